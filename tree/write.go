package tree

// Upsert joins one claim into the Index (a claim from a peer, or one made
// locally) and reports what happened. The join keeps, per (key, backend),
// the value that dominates (see Claim.Dominates); claims that are expired at
// now, below the eviction floor, or of an old backend generation are
// rejected.
func (ix *Index) Upsert(c Claim, now int64) Outcome {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	o := ix.upsert(&c, now, false)
	ix.t.done()
	ix.sweepSome(now)
	return o
}

// UpsertBatch joins many claims under one lock acquisition. changed receives
// the claims that modified the Index (the novel part of the batch), in
// order; it is returned extended.
func (ix *Index) UpsertBatch(claims []Claim, now int64, changed []Claim) ([]Claim, [RejectedInvalid + 1]int) {
	var counts [RejectedInvalid + 1]int
	ix.mu.Lock()
	defer ix.mu.Unlock()
	for i := range claims {
		o := ix.upsert(&claims[i], now, false)
		ix.t.done()
		counts[o]++
		if o.Changed() {
			changed = append(changed, claims[i])
		}
	}
	ix.sweepSome(now)
	return changed, counts
}

// check classifies a claim that cannot be stored, or returns 0.
func (ix *Index) check(c *Claim, now int64) Outcome {
	switch {
	case c.Key == 0 || int(c.Backend) >= len(ix.reg.entries) || ix.reg.entries[c.Backend].State == 0: // 0: a free id
		return RejectedInvalid
	case c.Expires <= now:
		return RejectedExpired
	case c.Expires <= ix.floor.Load():
		return RejectedEvicted
	case c.Gen != ix.reg.entries[c.Backend].Gen || ix.reg.entries[c.Backend].State == BackendRemoved:
		// Only the current generation is stored. An older one can never
		// match again; a newer one means the registry entry that must come
		// with it (package crdt sends them in the same batch, first) is
		// missing. Refusing both keeps the join order-independent: a value
		// of a generation ahead of the registry could otherwise shadow, and
		// lose, a current-generation value.
		return RejectedStale
	}
	return 0
}

// upsert is Upsert without the lock or the end of the table operation.
// learned is for claims made here (Learn), which differ from a plain join
// in two ways:
//   - one that meets a longer-lived claim of the same generation keeps
//     that claim's expiry and takes its own timestamp (the prefix was used
//     now; the expiry never shrinks);
//   - one that meets a tombstone (end.go) it could not dominate takes an
//     expiry just past the tombstone's, so a block stored again soon after
//     it was removed is claimed again.
func (ix *Index) upsert(c *Claim, now int64, learned bool) Outcome {
	i, found := ix.t.find(c.Key, c.Backend)
	if found && learned {
		if cur := ix.t.load(i); cur.Gen == c.Gen && !cur.Ended() && cur.Expires > max(c.Expires, now) {
			c.Expires = cur.Expires
		}
	}
	if o := ix.check(c, now); o != 0 {
		ix.stats.rejected.Add(1)
		return o
	}
	if found {
		cur := ix.t.load(i)
		if learned && cur.Ended() && cur.Gen == c.Gen && c.Expires <= cur.Expires {
			c.Expires = cur.Expires + 1
		}
		// A dead value (expired, below the floor, of an old generation or a
		// removed backend) that no sweep has reached yet is what an index
		// that had swept it would not hold: c takes the slot whatever the
		// order says. (Generations compare in serial arithmetic: past
		// 32,767 invalidations the current one looks older than a stale
		// claim's, which then blocked the key on that backend until swept.)
		if !ix.dead(&cur, now) && !c.Dominates(cur) {
			return Unchanged
		}
		ix.t.store(i, c)
		ix.stats.replaced.Add(1)
		return Replaced
	}
	if ix.growForInsert(i, c.Key, now) {
		i, _ = ix.t.find(c.Key, c.Backend)
	}
	if ix.count >= ix.cfg.Capacity {
		ix.t.done()
		ix.makeRoom(now)
		if o := ix.check(c, now); o != 0 { // the floor may have risen past c
			ix.stats.rejected.Add(1)
			return o
		}
		i, _ = ix.t.find(c.Key, c.Backend)
	}
	ix.t.store(i, c)
	ix.count++
	ix.stats.inserted.Add(1)
	return Inserted
}

// lags reports whether a claim's timestamp is more than RefreshMaxMillis
// older than ts: its last use is worth recording even when the expiry it
// would get is no later (RefreshMaxMillis 0: never).
func (ix *Index) lags(cur Claim, ts Timestamp) bool {
	m := ix.cfg.RefreshMaxMillis
	return m > 0 && ts.Millis()-cur.Time.Millis() > m
}

// Learn records that backend b now holds every prefix of ch at ch.Learn's
// depths, at time ts (the origin's hybrid logical clock), for ttlMillis. It
// appends to changed the claims that modified the Index, which are the ones
// to replicate, and returns it.
//
// A prompt's claims are written all together or not at all. They are
// skipped together when every one exists already, at the same generation,
// and the refresh would push no expiry out by more than RefreshFraction of
// the TTL (and RefreshMaxMillis) nor any timestamp by more than
// RefreshMaxMillis: repeated hits on a hot prefix do not flood the mesh.
// An existing claim that expires later than ttlMillis from now keeps its
// expiry and takes the new timestamp (the timestamp is the prefix's last
// use, which the router's cache model reads). Writing them
// together keeps an invariant Lookup relies on: a claim at some depth always
// comes with claims at every checkpoint above it, on the same backend, that
// expire no earlier.
func (ix *Index) Learn(ch *Chain, b BackendID, ts Timestamp, ttlMillis int64, origin NodeID, now int64, changed []Claim) []Claim {
	if len(ch.Learn) == 0 || ttlMillis <= 0 {
		return changed
	}
	gen, active := ix.Generation(b)
	if !active {
		return changed
	}
	exp := ts.Millis() + ttlMillis
	slack := int64(float64(ttlMillis) * ix.cfg.RefreshFraction)
	if m := ix.cfg.RefreshMaxMillis; m > 0 {
		slack = min(slack, m)
	}
	ix.mu.Lock()
	defer ix.mu.Unlock()
	fresh := true
	for _, d := range ch.Learn {
		if d < 1 || int(d) > len(ch.Keys) {
			continue
		}
		i, found := ix.t.find(ch.Keys[d-1], b)
		if !found {
			fresh = false
			break
		}
		if cur := ix.t.load(i); cur.Gen != gen || cur.Expires+slack < exp || cur.Expires <= now || cur.Ended() || ix.lags(cur, ts) {
			fresh = false
			break
		}
	}
	if fresh {
		ix.stats.coalesced.Add(uint64(len(ch.Learn)))
		return changed
	}
	for _, d := range ch.Learn {
		if d < 1 || int(d) > len(ch.Keys) {
			continue
		}
		c := Claim{Key: ch.Keys[d-1], Backend: b, Gen: gen, Time: ts, Expires: exp, Origin: origin}
		o := ix.upsert(&c, now, true)
		ix.t.done()
		if o.Changed() {
			changed = append(changed, c)
		}
	}
	ix.sweepSome(now)
	return changed
}
