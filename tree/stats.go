package tree

import "sync/atomic"

type indexStats struct {
	inserted, replaced, coalesced, rejected atomic.Uint64
	swept, evicted, floorRaises, forgotten  atomic.Uint64
	grown                                   atomic.Uint64
}

// Stats are cumulative counters of an Index, for metrics.
type Stats struct {
	Claims      int    `json:"claims"`       // occupied slots now
	Capacity    int    `json:"capacity"`     // configured capacity
	TableBytes  int    `json:"table_bytes"`  // the claim table's memory now (it grows with the claims held)
	Grown       uint64 `json:"grown"`        // times the table doubled
	Backends    int    `json:"backends"`     // registered backends (names holding an id; removed ones until forgotten)
	Forgotten   int    `json:"forgotten"`    // removed names kept without an id (ForgetRemoved)
	ForgotTotal uint64 `json:"forgot_total"` // names ForgetRemoved freed the id of
	Inserted    uint64 `json:"inserted"`     // claims inserted
	Replaced    uint64 `json:"replaced"`     // claims replaced by a dominating value
	Coalesced   uint64 `json:"coalesced"`    // refreshes skipped because they changed too little
	Rejected    uint64 `json:"rejected"`     // claims rejected (expired, evicted, stale, invalid)
	Swept       uint64 `json:"swept"`        // dead claims reclaimed
	Evicted     uint64 `json:"evicted"`      // claims reclaimed because the floor rose on a full index
	FloorRaises uint64 `json:"floor_raises"` // times the eviction floor rose
	Floor       int64  `json:"floor"`        // the eviction floor (expiry milliseconds); 0 before the first eviction
}

// Stats returns a snapshot of the counters.
func (ix *Index) Stats() Stats {
	ix.mu.Lock()
	n, nb, nf, slots := ix.count, len(ix.reg.byName), len(ix.reg.forgotten), len(ix.t.slots)
	ix.mu.Unlock()
	return Stats{
		Claims: n, Capacity: ix.cfg.Capacity, TableBytes: slots * slotBytes, Grown: ix.stats.grown.Load(),
		Backends: nb, Forgotten: nf, ForgotTotal: ix.stats.forgotten.Load(),
		Inserted: ix.stats.inserted.Load(), Replaced: ix.stats.replaced.Load(),
		Coalesced: ix.stats.coalesced.Load(), Rejected: ix.stats.rejected.Load(),
		Swept: ix.stats.swept.Load(), Evicted: ix.stats.evicted.Load(),
		FloorRaises: ix.stats.floorRaises.Load(), Floor: max(ix.floor.Load(), 0), // not the internal "none yet" sentinel
	}
}
