package tree

// Range calls fn for every live claim (unexpired, above the floor, of its
// backend's current generation, backend not removed) in slot order, under
// the writers' lock, until fn returns false. Use it for digests and
// full-state transfer; it takes about a millisecond per 200,000 slots.
// fn must not call back into the Index.
func (ix *Index) Range(now int64, fn func(c *Claim) bool) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	var c Claim // one variable for the whole walk: fn gets its address
	for i := range ix.t.slots {
		if ix.t.slots[i].key.Load() == 0 {
			continue
		}
		c = ix.t.load(uint64(i))
		if ix.dead(&c, now) {
			continue
		}
		if !fn(&c) {
			return
		}
	}
}

// RangeKeys is Range restricted to claims whose key is in [lo, hi]. Because
// a claim's home slot is the top bits of its key, it only walks the slots of
// that key range (plus the overflow of its last probe run).
func (ix *Index) RangeKeys(lo, hi Key, now int64, fn func(c *Claim) bool) {
	if lo > hi {
		return
	}
	ix.mu.Lock()
	defer ix.mu.Unlock()
	t := ix.t
	start, end := t.home(lo), t.home(hi)
	// Every claim of the range sits at or after its home slot (in
	// [start, end]) with no empty slot in between, so walking from start to
	// the first empty slot at or past end, cyclically and at most once round
	// the table, sees all of them.
	reached := false
	i := start
	var c Claim
	for steps := 0; steps < len(t.slots); steps++ {
		k := t.slots[i].key.Load()
		if k == 0 && reached {
			return
		}
		if k != 0 && Key(k) >= lo && Key(k) <= hi {
			c = t.load(i)
			if !ix.dead(&c, now) && !fn(&c) {
				return
			}
		}
		if i == end {
			reached = true
			if k == 0 {
				return
			}
		}
		i = (i + 1) & t.mask
	}
}
