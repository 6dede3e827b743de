package tree

import "sync/atomic"

type indexStats struct {
	inserted, replaced, coalesced, rejected atomic.Uint64
	swept, evicted, floorRaises             atomic.Uint64
}

// Stats are cumulative counters of an Index, for metrics.
type Stats struct {
	Claims      int    // occupied slots now
	Capacity    int    // configured capacity
	Backends    int    // registered backends
	Inserted    uint64 // claims inserted
	Replaced    uint64 // claims replaced by a dominating value
	Coalesced   uint64 // refreshes skipped because they changed too little
	Rejected    uint64 // claims rejected (expired, evicted, stale, invalid)
	Swept       uint64 // dead claims reclaimed
	Evicted     uint64 // claims reclaimed because the floor rose on a full index
	FloorRaises uint64 // times the eviction floor rose
	Floor       int64  // the eviction floor (expiry milliseconds)
}

// Stats returns a snapshot of the counters.
func (ix *Index) Stats() Stats {
	ix.mu.Lock()
	n, nb := ix.count, len(ix.reg.entries)
	ix.mu.Unlock()
	return Stats{
		Claims: n, Capacity: ix.cfg.Capacity, Backends: nb,
		Inserted: ix.stats.inserted.Load(), Replaced: ix.stats.replaced.Load(),
		Coalesced: ix.stats.coalesced.Load(), Rejected: ix.stats.rejected.Load(),
		Swept: ix.stats.swept.Load(), Evicted: ix.stats.evicted.Load(),
		FloorRaises: ix.stats.floorRaises.Load(), Floor: ix.floor.Load(),
	}
}
