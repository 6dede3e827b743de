package router

import "sync/atomic"

// A backend whose settings change (a weight, its models, its capacity, its
// URL: on a reload or from discovery) is rebuilt as a new object under the
// same name (replaceLocked), because its loops and its URL are fixed for an
// object's life. Its claims stay: they are keyed by name, and the name is
// the cache. So what ages and weighs those claims must stay too, or the
// new object would start believing them afresh:
//
//   - written, the units this router has written to the backend since it
//     started: the mesh sums each node's count and keeps the largest it
//     has heard from each, so a count that went back to 0 would hide this
//     node's writes from every peer until it passed the old one again;
//   - the cache belief: the history of those writes, the capacity and
//     doubt worth learned from answers;
//   - on an eviction-link backend, what its engine's evictions said: the
//     eviction edge and the eviction order (shared: a request in flight on
//     the old object releases its claims into the same order);
//
// and, while the URL is the same (the same server), what it has shown of
// itself: its health (an ejected backend stays ejected until a probe
// readmits it, instead of coming back because its weight was edited), its
// last load reports and its rate of bound arrivals. A new URL is a new
// server as far as health and load go: those start afresh, as for a new
// backend.

// carryFrom copies into b, not yet published, what old learned that must
// outlive the rebuild (see above). old may still serve requests in flight:
// its fields are read under their locks or atomically.
func (b *backend) carryFrom(old *backend) {
	b.written = old.written // shared: late writes on old count too
	b.gone = old.gone       // shared: the name's removal stops old's late learns too
	b.belief.carryFrom(&old.belief, !b.capConfigured && !old.capConfigured)
	b.order = old.order // shared: the engine's LRU is the name's, as its claims are
	b.edge.carryFrom(&old.edge)
	if b.base != old.base {
		return
	}
	old.mu.Lock()
	b.health = old.health
	// In rotation unless ejected: between readmitting a backend that came
	// back cold and putting it back in rotation, markSuccess leaves it
	// healthy false with no ejection recorded, and a copy of that state
	// would never be readmitted (only an ejection's end readmits).
	b.healthy.Store(old.health.ejectedAt.IsZero())
	old.mu.Unlock()
	b.orca.copyFrom(&old.orca)
	b.scrape.copyFrom(&old.scrape)
	old.bound.mu.Lock()
	b.bound.n, b.bound.at = old.bound.n, old.bound.at
	old.bound.mu.Unlock()
}

// carryFrom copies old's history and lessons into cb (not yet in use).
// scraped says the capacity was read from the backend's metrics, not
// configured, before and after: it is carried until the next scrape;
// otherwise the new configuration's holds.
func (cb *cacheBelief) carryFrom(old *cacheBelief, scraped bool) {
	old.mu.Lock()
	defer old.mu.Unlock()
	cb.ring, cb.head, cb.n = old.ring, old.head, old.n
	cb.scale, cb.learned, cb.own = old.scale, old.learned, old.own
	if scraped {
		cb.capTokens.Store(old.capTokens.Load())
	}
	for _, p := range [...][2]*atomic.Uint64{
		{&cb.coldAt, &old.coldAt}, {&cb.kappa, &old.kappa}, {&cb.since, &old.since}, {&cb.nowW, &old.nowW},
		{&cb.confirmed, &old.confirmed}, {&cb.refuted, &old.refuted}, {&cb.doubt, &old.doubt},
		{&cb.doubtN, &old.doubtN}, {&cb.nearSince, &old.nearSince}, {&cb.pinned, &old.pinned},
	} {
		p[0].Store(p[1].Load())
	}
	// updated stays 0: the next request refreshes the bounds with the new
	// settings (a configured capacity may have changed).
	cb.stamp.Store(old.stamp.Load())
	cb.pinnedAt.Store(old.pinnedAt.Load())
	old.curve.mu.Lock()
	for i := range old.curve.w {
		cb.curve.w[i].Store(old.curve.w[i].Load())
		cb.curve.n[i].Store(old.curve.n[i].Load())
	}
	old.curve.mu.Unlock()
}

// copyFrom copies old's last sample into s.
func (s *signal) copyFrom(old *signal) {
	s.waiting.Store(old.waiting.Load())
	s.running.Store(old.running.Load())
	s.kv.Store(old.kv.Load())
	s.has.Store(old.has.Load())
	s.own.Store(old.own.Load())
	s.at.Store(old.at.Load())
}
