package crdt

import "github.com/kvmesh/kvmesh/tree"

// End ends the claims of keys on backend b (an engine reported the blocks
// evicted): each live claim is replaced by a tombstone (tree.Index.End),
// stamped by the clock and queued for every peer like any change. It
// returns how many claims it ended.
func (r *Replica) End(keys []tree.Key, b tree.BackendID, now int64) int {
	n := 0
	for _, k := range keys {
		c, ok := r.ix.End(k, b, r.clock.Now(now), now)
		if !ok {
			continue
		}
		r.log.append(logEntry{claim: c})
		n++
	}
	r.stats.LocalChanges += uint64(n)
	return n
}
