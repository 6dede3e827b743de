package router

import (
	"time"

	"github.com/kvmesh/kvmesh/tree"
)

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

// Retract ends the claims of keys on backend that expire no later than
// claims learned now for ttl would (tree.Index.EndExpiring): a failed
// attempt's provisional claims (retract.go), not a longer-lived claim
// written for the same blocks meanwhile.
func (l *LocalLearner) Retract(keys []tree.Key, backend tree.BackendID, ttl time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, k := range keys {
		now, ts := l.stamp()
		l.ix.EndExpiring(k, backend, ts, now, ts.Millis()+max(0, ttl.Milliseconds()))
	}
}
