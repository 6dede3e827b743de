package router

import "github.com/kvmesh/kvmesh/tree"

// End ends the claims of keys on backend (tree.Index.End): an engine's KV
// events reported the blocks evicted. With LocalLearner's Learn and
// Invalidate it makes a router alone a sink for router/kvevents.
func (l *LocalLearner) End(keys []tree.Key, backend tree.BackendID) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, k := range keys {
		now, ts := l.stamp()
		l.ix.End(k, backend, ts, now)
	}
}
