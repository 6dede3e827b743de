package router

import (
	"math"
	"time"

	"github.com/kvmesh/kvmesh/tree"
)

// End ends the claims of keys on backend (tree.Index.End): an engine's KV
// events reported the blocks evicted. With LocalLearner's Learn and
// Invalidate it makes a router alone a sink for router/kvevents.
func (l *LocalLearner) End(keys []tree.Key, backend tree.BackendID) {
	l.end(keys, backend, -1)
}

// Retract ends the claims of keys on backend that expire no later than
// claims learned now for ttl would (tree.Index.EndExpiring): a failed
// attempt's provisional claims (retract.go), not a longer-lived claim
// written for the same blocks meanwhile.
func (l *LocalLearner) Retract(keys []tree.Key, backend tree.BackendID, ttl time.Duration) {
	l.end(keys, backend, max(0, ttl.Milliseconds()))
}

// end ends keys' claims on backend; with ttlMillis >= 0 only those expiring
// by the clock's time plus ttlMillis (crdt.Replica's end, for one router).
func (l *LocalLearner) end(keys []tree.Key, backend tree.BackendID, ttlMillis int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, k := range keys {
		now, ts := l.stamp()
		maxExp := int64(math.MaxInt64)
		if ttlMillis >= 0 {
			maxExp = ts.Millis() + ttlMillis
		}
		l.ix.EndExpiring(k, backend, ts, now, maxExp)
	}
}
