package tree

// Expiry, invalidation and eviction all end in the same place: a dead claim
// (expired, below the floor, of an old generation, or of a removed backend)
// never matches, is rejected when it arrives again, and its slot is
// reclaimed by a sweep.
//
// Eviction raises the floor, an expiry watermark: every claim expiring at or
// before it is gone. Because claims are ordered by expiry first within a
// generation (Claim.Dominates) and the floor only rises, the content of a
// replica is a function of the claims it has received and the highest floor
// it has heard of; replicas exchange their floors (package crdt) and so
// evict exactly the same claims, whatever the order things arrived in.
// With a single TTL, the soonest expiry is the oldest last refresh, so this
// is eviction of the least recently refreshed claims.

const histBuckets = 4096

// dead reports whether the claim in a slot can be reclaimed.
func (ix *Index) dead(c *Claim, now int64) bool {
	return c.Expires <= now || c.Expires <= ix.floor.Load() ||
		ix.reg.stale(c.Backend, c.Gen) || ix.reg.entries[c.Backend].State != BackendActive
}

// sweepSome examines a few slots from the incremental cursor.
func (ix *Index) sweepSome(now int64) {
	for n := 0; n < ix.cfg.SweepPerWrite; n++ {
		i := ix.cursor
		if k := ix.t.slots[i].key.Load(); k != 0 {
			c := ix.t.load(i)
			if ix.dead(&c, now) {
				ix.t.remove(i)
				ix.t.done()
				ix.count--
				ix.stats.swept.Add(1)
				continue // slot i now holds the next member of its run
			}
		}
		ix.cursor = (i + 1) & ix.t.mask
	}
}

// Sweep reclaims every dead claim now. Writes call it when the Index is
// full; callers may also run it periodically. It returns how many claims it
// reclaimed.
func (ix *Index) Sweep(now int64) int {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	return ix.sweep(now)
}

func (ix *Index) sweep(now int64) int {
	n, _, _ := ix.sweepRange(now)
	return n
}

// sweepRange is sweep that also returns the lowest and highest expiry of the
// claims it kept (lo > hi when it kept none), so eviction needs no extra pass.
func (ix *Index) sweepRange(now int64) (removed int, lo, hi int64) {
	lo, hi = 1<<62, -1<<62
	size := uint64(len(ix.t.slots))
	// Start on an empty slot: a backward shift never moves an entry across
	// one, so walking from there sees every entry exactly once.
	start := uint64(0)
	for ; start < size && ix.t.slots[start].key.Load() != 0; start++ {
	}
	for n := uint64(0); n < size; {
		i := (start + n) & ix.t.mask
		if ix.t.slots[i].key.Load() != 0 {
			c := ix.t.load(i)
			if ix.dead(&c, now) {
				ix.t.remove(i)
				ix.t.done()
				ix.count--
				removed++
				continue // re-examine slot i
			}
			lo, hi = min(lo, c.Expires), max(hi, c.Expires)
		}
		n++
	}
	ix.stats.swept.Add(uint64(removed))
	return removed, lo, hi
}

// RaiseFloor raises the eviction floor to f if it is higher, and reclaims
// the claims it evicts. Peers' floors arrive through here. It reports
// whether the floor rose.
func (ix *Index) RaiseFloor(f int64, now int64) bool {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if f <= ix.floor.Load() {
		return false
	}
	ix.floor.Store(f)
	ix.stats.floorRaises.Add(1)
	ix.sweep(now)
	return true
}

// makeRoom runs when an insert finds the Index full: it reclaims dead claims
// and, if that is not enough, raises the floor so that at least
// EvictFraction of the capacity is freed.
func (ix *Index) makeRoom(now int64) {
	_, lo, hi := ix.sweepRange(now)
	target := ix.cfg.Capacity - int(float64(ix.cfg.Capacity)*ix.cfg.EvictFraction)
	if target >= ix.cfg.Capacity {
		target = ix.cfg.Capacity - 1
	}
	if ix.count <= target || lo > hi {
		return
	}
	f := ix.chooseFloor(ix.count-target, lo, hi)
	if f > ix.floor.Load() {
		ix.floor.Store(f)
		ix.stats.floorRaises.Add(1)
	}
	n := ix.sweep(now)
	ix.stats.evicted.Add(uint64(n))
}

// chooseFloor finds an expiry F such that at least k live claims expire at
// or before F, and not many more: a radix select over the expiries in
// [lo, hi] with a histogram, usually in one or two passes, with no
// allocation. Claims sharing an expiry millisecond go together, so ties can
// evict a little more than k. Every slot holds a live claim when it runs
// (makeRoom has just swept).
func (ix *Index) chooseFloor(k int, lo, hi int64) int64 {
	slack := max(1, int(float64(ix.cfg.Capacity)*ix.cfg.EvictFraction)/4)
	below := 0 // live claims expiring before lo
	for {
		shift := uint(0)
		for (uint64(hi-lo) >> shift) >= histBuckets {
			shift++
		}
		clear(ix.hist)
		for i := range ix.t.slots {
			if ix.t.slots[i].key.Load() == 0 {
				continue
			}
			e := int64(ix.t.slots[i].exp.Load())
			if e >= lo && e <= hi {
				ix.hist[(e-lo)>>shift]++
			}
		}
		acc := below
		b := 0
		for ; b < histBuckets-1; b++ {
			if acc+int(ix.hist[b]) >= k {
				break
			}
			acc += int(ix.hist[b])
		}
		bLo := lo + int64(b)<<shift
		bHi := min(hi, bLo+int64(1)<<shift-1)
		if shift == 0 || acc+int(ix.hist[b])-k <= slack {
			return bHi
		}
		lo, hi, below = bLo, bHi, acc
	}
}
