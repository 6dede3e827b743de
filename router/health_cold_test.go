package router

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/kvmesh/kvmesh/tree"
)

// coldRig is a router over one backend a whose probes, scrapes and
// ColdAfter are quick, with its prefix-cache counters at 5000 and scraped.
func coldRig(t *testing.T) (*testRig, *fakeBackend, *countingLearner, func(q float64)) {
	t.Helper()
	a := newFakeBackend(t, "a")
	var l *countingLearner
	g := newRig(t, func(c *Config, d *Deps) {
		c.EjectAfter = 2
		c.EjectionTime = 20 * time.Millisecond
		c.ProbeInterval = 10 * time.Millisecond
		c.ScrapeInterval = 10 * time.Millisecond
		c.ColdAfter = 80 * time.Millisecond
		withLearner(&l)(c, d)
	}, a)
	counters := func(q float64) {
		s := "# TYPE vllm:prefix_cache_queries counter\nvllm:prefix_cache_queries_total{model_name=\"m1\"} " +
			strconv.FormatFloat(q, 'f', -1, 64) + "\nvllm:prefix_cache_hits_total{model_name=\"m1\"} 10\n"
		a.metrics.Store(&s)
	}
	counters(5000)
	if err := g.rt.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "first scrape", func() bool { return g.rt.Backends()[0].PrefixCacheQueries == 5000 })
	return g, a, l, counters
}

// downLongEnough fails a's probes until it is ejected and has been down
// longer than ColdAfter (a lower bound: sleeping longer changes nothing).
func downLongEnough(t *testing.T, g *testRig, a *fakeBackend) {
	t.Helper()
	a.health.Store(http.StatusServiceUnavailable)
	waitFor(t, "ejection", func() bool { return !g.rt.backendByName("a").healthy.Load() })
	time.Sleep(100 * time.Millisecond)
}

// One restart, seen by the probe (down longer than ColdAfter, answering
// again) and by the scrape (counters went backwards), starts one new
// generation: a second would end the claims learned after the first, on
// the backend that came back.
func TestOneRestartSeenTwiceInvalidatesOnce(t *testing.T) {
	g, a, l, counters := coldRig(t)
	downLongEnough(t, g, a)
	counters(30) // restarted: before it answers its probe again
	a.health.Store(0)
	waitFor(t, "re-admission", func() bool { return g.rt.backendByName("a").healthy.Load() })
	waitFor(t, "the restarted counters scraped", func() bool { return g.rt.Backends()[0].PrefixCacheQueries == 30 })
	// A few more scrapes and probes: nothing more to see.
	time.Sleep(50 * time.Millisecond)
	if n := l.count(); n != 1 {
		t.Errorf("%d invalidations for one restart, want 1", n)
	}
	st := g.rt.Backends()[0]
	if st.Generation != 1 || st.ColdReturns != 1 {
		t.Errorf("generation %d, cold returns %d after one restart: want 1 and 1", st.Generation, st.ColdReturns)
	}
	if n := g.counter("kvmesh_router_backend_invalidations_total", "backend", "a"); n != 1 {
		t.Errorf("backend_invalidations_total %v, want 1", n)
	}
}

// A peer that saw the restart first started the new generation: this node,
// seeing it later, starts none (the claims learned on the new generation
// meanwhile stay) but counts the backend's cache empty all the same.
func TestRestartAPeerInvalidatedFirstIsNotInvalidatedAgain(t *testing.T) {
	g, a, l, _ := coldRig(t)
	downLongEnough(t, g, a)
	id := g.rt.backendByName("a").id
	// The peer's generation, and a claim learned on it (replicated here).
	if _, err := g.ix.Invalidate("a", false, tree.MakeTimestamp(time.Now().UnixMilli(), 0), tree.NodeIDOf("peer")); err != nil {
		t.Fatal(err)
	}
	body := `{"model":"m1","prompt":"` + longText("learned after the restart", 600) + `"}`
	ch := chainFor(t, g, EndpointCompletions, body, "")
	g.rt.learner.Learn(ch, id, time.Minute)
	a.health.Store(0)
	waitFor(t, "re-admission", func() bool { return g.rt.backendByName("a").healthy.Load() })
	if n := l.count(); n != 0 {
		t.Errorf("%d invalidations of a restart a peer had invalidated, want 0", n)
	}
	if h := g.holders(EndpointCompletions, body, ""); h["a"] == 0 {
		t.Error("the claim learned on the peer's new generation was ended")
	}
	if st := g.rt.Backends()[0]; st.ColdReturns != 1 {
		t.Errorf("cold returns %d, want 1 (the cache counts empty here too)", st.ColdReturns)
	}
}
