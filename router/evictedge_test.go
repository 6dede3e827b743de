package router

import (
	"sync/atomic"
	"testing"
	"time"
)

// The eviction edge doubts a claim its engine's evictions say will be gone
// before a request reaches the engine, and only the blocks no fresher
// claim of the prompt covers: a conversation's older turn past the edge, not
// the system prompt another conversation refreshed since.
func TestEvictionEdgeDoubtsClaimsDueToGo(t *testing.T) {
	var clock atomic.Int64
	clock.Store(time.Now().UnixNano())
	now := func() time.Time { return time.Unix(0, clock.Load()) }
	advance := func(d time.Duration) { clock.Add(int64(d)) }
	a := newTokenizingBackend(t, "a")
	g := evictRigAt(t, now, func(pc *PreciseConfig) { pc.EvictionLag, pc.EvictionOrder = 250*time.Millisecond, false }, a.fakeBackend) // evictlinks_test.go
	lag := g.rt.precise.cfg.EvictionLag
	if DefaultPreciseConfig().EvictionLag != 0 {
		t.Fatal("the eviction edge's doubt is on by default")
	}
	sys := longText("system", 3000)
	older := chat("m1", sys, longText("an older conversation", 1500))
	newer := chat("m1", sys, longText("a newer conversation", 1500))
	postLinked(t, g, older, 1)
	advance(4 * lag) // the newer conversation refreshes the system prompt's claim later
	postLinked(t, g, newer, 2)
	t2 := now().UnixMilli()
	advance(time.Second)
	b := g.rt.set.Load().listed[0]
	discount := func() (float64, int, int) {
		t.Helper()
		c := explainCandidate(t, g, older, "a")
		return c.Discount, c.MatchedBlocks, c.MatchedUnits
	}
	if d, m, _ := discount(); d != 0 || m == 0 {
		t.Fatalf("before any eviction: discount %v on %d blocks, want 0 on the whole prompt", d, m)
	}
	if n := g.counter("kvmesh_router_backend_eviction_retention_seconds"); n != 0 {
		t.Fatalf("retention %v reported before any eviction", n)
	}
	setEdge := func(retention time.Duration) {
		n := now().UnixMilli()
		b.edge.newest.Store(n - retention.Milliseconds())
		b.edge.seen.Store(n)
	}
	// The engine keeps released prefixes far longer than their age: no doubt.
	setEdge(time.Hour)
	if d, _, _ := discount(); d != 0 {
		t.Fatalf("retention 1h: discount %v, want 0", d)
	}
	// It keeps them for as long as since the newer conversation plus two
	// lags: the newer stamp's margin is one lag (no doubt), the older
	// conversation's is three lags less (whole doubt): the blocks past the
	// system prompt are doubted, the system prompt's are not.
	age2 := time.Duration(now().UnixMilli()-t2) * time.Millisecond
	setEdge(age2 + 2*lag)
	d, _, units := discount()
	st := g.rt.getState()
	if aerr := g.rt.prepare(st, EndpointChat, []byte(older), ""); aerr != nil {
		t.Fatal(aerr)
	}
	sysUnits := st.chain.UnitsAt(st.prompt.Ends[0] / st.chain.UnitsPerBlock) // the system message's claim
	g.rt.putState(st)
	if want := float64(units-sysUnits) / float64(units); d < want-1e-9 || d > want+1e-9 {
		t.Fatalf("older conversation past the edge: discount %v, want %v (the %d units past the system prompt's %d of %d)", d, want, units-sysUnits, sysUnits, units)
	}
	// Everything released before now: the whole prompt is doubted.
	setEdge(0)
	if d, _, _ := discount(); d != maxEdgeDiscount {
		t.Fatalf("retention 0: discount %v, want %v", d, maxEdgeDiscount)
	}
	// Off: no doubt.
	g.rt.precise.cfg.EvictionLag = 0
	if d, _, _ := discount(); d != 0 {
		t.Fatalf("eviction lag 0: discount %v, want 0", d)
	}
	b.edge.newest.Store(0)
	b.edge.seen.Store(0)
	// Measured, off or on: the engine evicts the newer prompt's blocks past the system message:
	// the retention is how long since that answer ended (the link's time),
	// and the gauge says so.
	sysEnd := len(engineTokens(t, []byte(chat("m1", sys)))) - 1
	g.rt.EvictionSink(nil).End(engineBlocks(t, g, newer, sysEnd+32), b.id)
	if got, want := b.edge.newest.Load(), t2; got != want {
		t.Fatalf("edge at the release %d, want the newer answer's end %d", got, want)
	}
	if got := g.counter("kvmesh_router_backend_eviction_retention_seconds"); got != 1 {
		t.Fatalf("retention gauge %v s, want 1 (evicted a second after its answer ended)", got)
	}
	// An eviction of an older release leaves the edge where it is.
	g.rt.EvictionSink(nil).End(engineBlocks(t, g, older, sysEnd+32), b.id)
	if got := b.edge.newest.Load(); got != t2 {
		t.Fatalf("an older release moved the edge to %d, want %d", got, t2)
	}
}

func TestEdgeRisk(t *testing.T) {
	const now, lag = 100_000, 100
	for _, c := range []struct {
		name                   string
		stamp, retention, wait int64
		want                   float64
	}{
		{"outlives the wait by more than a lag", now - 1000, 1300, 0, 0},
		{"margin of exactly a lag", now - 1000, 1200, 0, 0},
		{"margin 0: even odds", now - 1000, 1100, 0, 0.5},
		{"gone a lag ago", now - 1000, 1000, 0, 1},
		{"long gone", now - 5000, 1000, 0, 1},
		{"the queue ahead outlasts it", now - 1000, 1300, 200, 0.5},
		{"a longer queue", now - 1000, 1300, 300, 1},
	} {
		if got := edgeRisk(c.stamp, c.retention, lag, now, c.wait); got != c.want {
			t.Errorf("%s: risk %v, want %v", c.name, got, c.want)
		}
	}
}

// explainCandidate is backend's candidate in the router's explanation of
// a chat request of body.
func explainCandidate(t *testing.T, g *testRig, body, backend string) CandidateExplanation {
	t.Helper()
	x, aerr := g.rt.Explain("/v1/chat/completions", []byte(body), "")
	if aerr != nil {
		t.Fatal(aerr)
	}
	for _, c := range x.Candidates {
		if c.Backend == backend {
			return c
		}
	}
	t.Fatalf("no candidate %s", backend)
	return CandidateExplanation{}
}
