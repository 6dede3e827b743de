package crdt

import (
	"math"

	"github.com/kvmesh/kvmesh/tree"
)

// End ends the claims of keys on backend b (an engine reported the blocks
// evicted): each live claim is replaced by a tombstone (tree.Index.End),
// stamped by the clock and queued for every peer like any change. It
// returns how many claims it ended.
func (r *Replica) End(keys []tree.Key, b tree.BackendID, now int64) int {
	return r.end(keys, b, -1, now)
}

// Retract ends the claims of keys on backend b that expire no later than
// claims learned now for ttlMillis would (tree.Index.EndExpiring): the
// provisional claims a router learned for an attempt that failed, and no
// longer-lived claim written for the same blocks meanwhile (a concurrent
// answer's, an engine's lease). It returns how many claims it ended.
func (r *Replica) Retract(keys []tree.Key, b tree.BackendID, ttlMillis, now int64) int {
	return r.end(keys, b, max(0, min(ttlMillis, r.cfg.MaxTTL.Milliseconds())), now)
}

// end ends keys' claims on b; with ttlMillis >= 0 only those expiring by
// the clock's time plus ttlMillis.
func (r *Replica) end(keys []tree.Key, b tree.BackendID, ttlMillis, now int64) int {
	n := 0
	for _, k := range keys {
		ts := r.clock.Now(now)
		maxExp := int64(math.MaxInt64)
		if ttlMillis >= 0 {
			maxExp = ts.Millis() + ttlMillis
		}
		c, ok := r.ix.EndExpiring(k, b, ts, now, maxExp)
		if !ok {
			continue
		}
		r.log.append(logEntry{claim: c})
		n++
	}
	r.stats.LocalChanges += uint64(n)
	return n
}
