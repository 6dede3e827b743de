package router

import (
	"hash/maphash"
	"sync"
	"time"
)

// tenantShare bounds how many new claims each tenant learns per window
// (Config.ConfirmedTTL, the life of a confirmed claim): at most
// Config.TenantIndexShare of the index's capacity, so that no tenant can
// fill the index and evict every other tenant's claims. Tenants are told
// apart by a hash of their TenantHeader value; a request with no header is
// the tenant "".
//
// A claim is new when it is deeper than what the chosen backend already
// holds of the prompt (its matched depth): refreshing what a backend holds
// adds nothing to the index and is never refused. Usage is a sliding
// estimate over two fixed windows (the previous one's count weighted by how
// much of it still overlaps), as rate limiters do.
type tenantShare struct {
	mu        sync.Mutex
	start     time.Time          // the current window's start
	cur, prev map[uint64]float64 // new claims learned per tenant hash
}

// maxTenantsTracked bounds the per-window map: tenants beyond it (a client
// inventing a tenant per request) share one overflow budget.
const maxTenantsTracked = 1 << 16

var tenantSeed = maphash.MakeSeed()

// tenantOf hashes a tenant header value (0 is kept for the overflow).
func (*tenantShare) tenantOf(tenant string) uint64 {
	return maphash.String(tenantSeed, tenant) | 1
}

// take charges n new claims to tenant at now and reports whether they fit
// in its share (limit claims per window); nothing is charged when they do
// not.
func (ts *tenantShare) take(tenant uint64, n int, limit float64, window time.Duration, now time.Time) bool {
	if n <= 0 {
		return true
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	switch elapsed := now.Sub(ts.start); {
	case ts.cur == nil || elapsed >= 2*window || elapsed < 0:
		ts.start, ts.cur, ts.prev = now, make(map[uint64]float64), nil
	case elapsed >= window:
		ts.start, ts.prev, ts.cur = ts.start.Add(window), ts.cur, make(map[uint64]float64, len(ts.cur))
	}
	if _, ok := ts.cur[tenant]; !ok && len(ts.cur) >= maxTenantsTracked {
		tenant = 0
	}
	overlap := 1 - float64(now.Sub(ts.start))/float64(window)
	used := ts.cur[tenant] + ts.prev[tenant]*max(overlap, 0)
	if used+float64(n) > limit {
		return false
	}
	ts.cur[tenant] += float64(n)
	return true
}

// admitLearn decides what a request learns at backend b, whose claims
// already hold matched blocks of the prompt: everything, when the tenant's
// share has room for the new depths; otherwise only the depths it holds
// (refreshes), which it reports with false, or nothing at all (st.chain's
// learn list is cut in place). It returns whether anything is left to learn.
func (rt *Router) admitLearn(st *reqState, matched int32) bool {
	share := rt.cfg.TenantIndexShare
	learn := st.chain.Learn
	if share >= 1 || len(learn) == 0 {
		return len(learn) > 0
	}
	old := 0 // learn is ascending: depths up to matched are refreshes
	for old < len(learn) && learn[old] <= matched {
		old++
	}
	limit := share * float64(rt.ix.Config().Capacity)
	if rt.share.take(st.tenant, len(learn)-old, limit, rt.cfg.ConfirmedTTL, rt.now()) {
		return true
	}
	rt.metrics.tenantShareExceeded.Inc()
	st.chain.Learn = learn[:old]
	return old > 0
}
