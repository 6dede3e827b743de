package router

import (
	"net/http"
	"sync/atomic"
	"testing"
	"time"
)

// vLLM's ORCA report has no num_requests_running: while ORCA keeps a
// backend's load fresh, the view borrows the running count from the last
// scrape, which is good only up to SignalMaxAge. The scrape ticks of the
// watch loop (its scrapeGate, driven here tick by tick on a fake clock at
// the default intervals) come often enough that the running count never
// drops out of the view, nor out of kvmesh_router_backend_running_requests.
func TestRunningNeverDropsOutWhileORCAFresh(t *testing.T) {
	a := newFakeBackend(t, "a")
	page := "vllm:num_requests_running{model_name=\"m1\"} 3\nvllm:num_requests_waiting{model_name=\"m1\"} 9\nvllm:kv_cache_usage_perc{model_name=\"m1\"} 0.1\n"
	a.metrics.Store(&page)
	var clock atomic.Int64
	base := time.Unix(1_000_000, 0)
	clock.Store(base.UnixNano())
	now := func() time.Time { return time.Unix(0, clock.Load()) }
	g := newRig(t, func(_ *Config, d *Deps) { d.Now = now }, a)
	cfg := &g.rt.cfg
	if cfg.ScrapeInterval != time.Second || cfg.SignalMaxAge != 6*time.Second {
		t.Fatalf("the test assumes the default intervals, got %v and %v", cfg.ScrapeInterval, cfg.SignalMaxAge)
	}
	b := g.rt.backendByName("a")
	orca := http.Header{orcaResponseHeader: {"TEXT named_metrics.num_requests_waiting=2, named_metrics.kv_cache_usage_perc=0.4"}}
	gate := newScrapeGate(cfg)
	check := func(at time.Time, what string) {
		t.Helper()
		clock.Store(at.UnixNano())
		lv := b.loadView(at, cfg, nil)
		if lv.Has&HasRunning == 0 || lv.Running != 3 || lv.SignalWeight != 1 {
			t.Fatalf("%v into the run (%s): load view has fields %b, running %v, weight %v; want a fresh view with the scrape's running 3",
				at.Sub(base), what, lv.Has, lv.Running, lv.SignalWeight)
		}
		if r := g.counter("kvmesh_router_backend_running_requests", "backend", "a"); r != 3 {
			t.Fatalf("%v into the run (%s): kvmesh_router_backend_running_requests = %v, want 3", at.Sub(base), what, r)
		}
	}
	scrapes := 0
	const ticks = 40
	for k := 1; k <= ticks; k++ {
		tick := base.Add(time.Duration(k) * cfg.ScrapeInterval)
		// Answers carry ORCA reports all along: one came just before the tick.
		if !g.rt.observeORCA(b, orca, tick.Add(-50*time.Millisecond)) {
			t.Fatal("ORCA report not taken")
		}
		if k > 1 {
			check(tick, "at the tick, before its scrape")
		}
		clock.Store(tick.UnixNano())
		if gate.due(g.rt, b, tick) {
			g.rt.scrapeLoad(t.Context(), b)
			scrapes++
		}
		if b.scrape.at.Load() == 0 {
			t.Fatal("the first tick did not scrape")
		}
		for j := range 10 {
			check(tick.Add(time.Duration(j)*cfg.ScrapeInterval/10), "between ticks")
		}
	}
	// Still far fewer scrapes than ticks: ORCA carries the load.
	if scrapes >= ticks/2 {
		t.Fatalf("%d scrapes in %d ticks while ORCA is fresh", scrapes, ticks)
	}
}

// The cadence fits inside SignalMaxAge with an interval to spare, and
// never exceeds scrapeEvery.
func TestScrapeCadence(t *testing.T) {
	for _, c := range []struct {
		interval, maxAge time.Duration
		want             int
	}{
		{time.Second, 6 * time.Second, 5},
		{time.Second, 60 * time.Second, scrapeEvery},
		{time.Second, 1500 * time.Millisecond, 1},
		{2 * time.Second, time.Second, 1},
		{100 * time.Millisecond, 600 * time.Millisecond, 5},
	} {
		cfg := DefaultConfig()
		cfg.ScrapeInterval, cfg.SignalMaxAge = c.interval, c.maxAge
		if got := scrapeCadence(&cfg); got != c.want {
			t.Errorf("interval %v, max age %v: cadence %d, want %d", c.interval, c.maxAge, got, c.want)
		}
	}
}

// The gate counts time, not ticks: a ticker drops the ticks that come
// while the watch loop probes or discovers (a slow backend stretches
// both), and counting ticks would then wait far past SignalMaxAge.
func TestScrapeGateCountsTime(t *testing.T) {
	a := newFakeBackend(t, "a")
	g := newRig(t, nil, a)
	cfg := &g.rt.cfg
	b := g.rt.backendByName("a")
	for _, every := range []time.Duration{cfg.ScrapeInterval, 2500 * time.Millisecond, 4 * time.Second} {
		gate := newScrapeGate(cfg)
		base := time.Unix(2_000_000, 0)
		var last time.Time
		for k := range 40 {
			now := base.Add(time.Duration(k) * every)
			b.orca.at.Store(now.Add(-50 * time.Millisecond).UnixNano()) // ORCA fresh all along
			if gate.due(g.rt, b, now) {
				if !last.IsZero() && now.Sub(last) >= cfg.SignalMaxAge {
					t.Fatalf("ticks %v apart: scrapes %v apart, past SignalMaxAge %v", every, now.Sub(last), cfg.SignalMaxAge)
				}
				last = now
			}
		}
		if last.IsZero() {
			t.Fatalf("ticks %v apart: no scrape", every)
		}
	}
}
