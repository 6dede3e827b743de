package bench

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/kvmesh/kvmesh/integration/sim"
	"github.com/kvmesh/kvmesh/integration/workload"
)

// prefixHeavy is a workload where routing decides the hit rate: 4 groups of
// 12 prompts sharing a 1,024-token system prompt, on 2 backends whose
// caches hold about two groups' prefixes each. Round robin sends every
// group to both backends, which then thrash; a cache-aware router keeps
// each group on one.
func prefixHeavy(t *testing.T) (*workload.Workload, sim.Config) {
	t.Helper()
	o := workload.DefaultSharedPrefixOptions()
	o.Groups, o.PromptsPerGroup = 4, 12
	o.SystemPromptTokens, o.QuestionTokens, o.OutputTokens = 1024, 32, 4
	o.Rate = 0
	w, err := workload.SharedPrefix(o)
	if err != nil {
		t.Fatal(err)
	}
	sc := sim.DefaultConfig()
	sc.TimeScale = 1000
	sc.CacheBlocks = 170 // 2 x 64 prefix blocks + room for the running questions
	sc.MaxRunning = 4
	return w, sc
}

func e2eConfig(t *testing.T, sc sim.Config, arms string) Config {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Fleet = SimFleet(2, sc)
	cfg.TimeScale = sc.TimeScale
	cfg.Replay.Mode, cfg.Replay.Concurrency = ClosedLoop, 2
	cfg.Replay.RequestTimeout = 30 * time.Second
	cfg.Repeats = 1
	cfg.LagSampleEvery = 0
	var err error
	if cfg.Arms, err = ParseArms(arms); err != nil {
		t.Fatal(err)
	}
	return cfg
}

func TestEndToEndHitRatesFromFleetCounters(t *testing.T) {
	w, sc := prefixHeavy(t)
	cfg := e2eConfig(t, sc, "round_robin,kvmesh")
	cfg.KeepSamples = true
	rep, err := Run(context.Background(), cfg, w)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Runs) != 2 || len(rep.Arms) != 2 {
		t.Fatalf("%d runs, %d summaries", len(rep.Runs), len(rep.Arms))
	}
	for _, run := range rep.Runs {
		if run.Errors != 0 || run.OK != len(w.Requests) {
			t.Fatalf("%s: %d ok, %d errors %v", run.Arm, run.OK, run.Errors, run.ErrorKinds)
		}
		// The hit rate is the fleet counters' and nothing else: hits and
		// queries are the backends' sums, and the queries are exactly the
		// prompt tokens of this run's requests (a fresh fleet per run).
		var q, h uint64
		for _, b := range run.Backends {
			q += b.PrefixCacheQueries
			h += b.PrefixCacheHits
		}
		if q != run.Queries || h != run.Hits || run.HitRate != float64(h)/float64(q) {
			t.Errorf("%s: hit rate %v from %d/%d, backends sum %d/%d", run.Arm, run.HitRate, run.Hits, run.Queries, h, q)
		}
		if int64(q) != w.PromptTokens {
			t.Errorf("%s: fleet counted %d prompt tokens, the run sent %d: counters are not this run's alone", run.Arm, q, w.PromptTokens)
		}
		// The clients' view (usage.cached_tokens) agrees with the counters.
		if uint64(run.ClientCachedTokens) != run.Hits {
			t.Errorf("%s: clients saw %d cached tokens, backends counted %d hits", run.Arm, run.ClientCachedTokens, run.Hits)
		}
		if len(run.Samples) != len(w.Requests) || run.TTFT.N != len(w.Requests) || run.TTFT.P50 <= 0 {
			t.Errorf("%s: %d samples, TTFT %+v", run.Arm, len(run.Samples), run.TTFT)
		}
	}
	// The kvmesh run records its router's cache model of each backend,
	// whose written count is the prompt tokens the backends computed, as
	// the router estimates them (byte-mode keys: within a factor of 2).
	for _, run := range rep.Runs {
		if run.Arm != "kvmesh" {
			continue
		}
		// Its counters came with the samples: the decisions by reason
		// sum to the requests.
		var decided float64
		for k, v := range run.Counters {
			if strings.HasPrefix(k, "kvmesh_router_decisions_total{") {
				decided += v
			}
		}
		if decided != float64(len(w.Requests)) {
			t.Errorf("kvmesh: the run's counters hold %.0f decisions for %d requests (%d counters)", decided, len(w.Requests), len(run.Counters))
		}
		if len(run.Beliefs) != len(run.Backends) {
			t.Fatalf("kvmesh: %d beliefs for %d backends", len(run.Beliefs), len(run.Backends))
		}
		var written float64
		for i, b := range run.Beliefs {
			if b.Backend != run.Backends[i].Name {
				t.Errorf("belief %d is about %q, backend %d is %q", i, b.Backend, i, run.Backends[i].Name)
			}
			written += b.Belief.WrittenTokens
		}
		if computed := float64(run.Queries - run.Hits); !(written > computed/2 && written < 2*computed) {
			t.Errorf("kvmesh: the router counted %.0f tokens written, the backends computed %.0f", written, computed)
		}
	}
	rr, km := rep.Find("round_robin"), rep.Find("kvmesh")
	// Cache-aware routing gets 0.73-0.89 here, round robin 0.44-0.63
	// (TestPreciseArm), both by the first requests' timing.
	if !(km.HitRate.Median > rr.HitRate.Median+0.05) {
		t.Errorf("kvmesh hit rate %.3f does not beat round_robin's %.3f on a prefix-heavy workload", km.HitRate.Median, rr.HitRate.Median)
	}
	t.Logf("round_robin %.3f, kvmesh %.3f", rr.HitRate.Median, km.HitRate.Median)
}

// reusedFleet hands out the same fleet every time: the isolation check must
// refuse it once it has served a run.
type reusedFleet struct{ f Fleet }

func (r *reusedFleet) start(context.Context) (Fleet, error) { return nopClose{r.f}, nil }

type nopClose struct{ Fleet }

func (nopClose) Close() error { return nil }

func TestArmsAreIsolated(t *testing.T) {
	w, sc := prefixHeavy(t)
	w.Requests = w.Requests[:12]
	cfg := e2eConfig(t, sc, "round_robin,least_loaded")
	cfg.Repeats = 2
	rep, err := Run(context.Background(), cfg, w)
	if err != nil {
		t.Fatal(err)
	}
	// Every run's fleet counted exactly its own requests.
	for _, run := range rep.Runs {
		var reqs uint64
		for _, b := range run.Backends {
			reqs += b.Requests
		}
		if reqs != uint64(len(w.Requests)) || int64(run.Queries) != promptTokens(w) {
			t.Errorf("%s repeat %d: fleet saw %d requests / %d tokens, want %d / %d", run.Arm, run.Repeat, reqs, run.Queries, len(w.Requests), promptTokens(w))
		}
	}
	// Arm order rotates between repeats.
	if rep.Runs[0].Arm != "round_robin" || rep.Runs[2].Arm != "least_loaded" {
		t.Errorf("run order %s, %s, %s, %s: want the second repeat rotated", rep.Runs[0].Arm, rep.Runs[1].Arm, rep.Runs[2].Arm, rep.Runs[3].Arm)
	}

	// A fleet that already served a run is refused.
	f, err := SimFleet(2, sc)(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cfg.Fleet = (&reusedFleet{f: f}).start
	cfg.Repeats = 1
	if _, err := Run(context.Background(), cfg, w); err == nil || !strings.Contains(err.Error(), "not fresh") {
		t.Errorf("a reused fleet: err %v, want a not-fresh error", err)
	}
}

func promptTokens(w *workload.Workload) int64 {
	var n int64
	for i := range w.Requests {
		n += int64(w.Requests[i].PromptTokens)
	}
	return n
}

func TestFillResult(t *testing.T) {
	samples := []Sample{
		{TTFT: 100 * time.Millisecond, E2E: 300 * time.Millisecond, OutputTokens: 10, CachedTokens: 5},
		{TTFT: 200 * time.Millisecond, E2E: 400 * time.Millisecond, OutputTokens: 20, Late: 10 * time.Millisecond},
		{Err: "http-500", Status: 500},
	}
	counters := []BackendCounters{
		{Name: "b0", PrefixCacheQueries: 100, PrefixCacheHits: 40, Requests: 1},
		{Name: "b1", PrefixCacheQueries: 100, PrefixCacheHits: 0, Requests: 1},
	}
	var r RunResult
	fillResult(&r, samples, counters, 2*time.Second, 10, func(i int) int { return i })
	if r.OK != 2 || r.Errors != 1 || r.ErrorKinds["http-500"] != 1 {
		t.Errorf("ok %d errors %d kinds %v", r.OK, r.Errors, r.ErrorKinds)
	}
	if !near(r.HitRate, 0.2) || r.Hits != 40 || r.Queries != 200 {
		t.Errorf("hit rate %v (%d/%d), want 0.2", r.HitRate, r.Hits, r.Queries)
	}
	// Times are scaled to simulated seconds: TTFT p50 of 0.1 s and 0.2 s
	// wall at scale 10 is 1.5 s.
	if !near(r.TTFT.P50, 1.5) || !near(r.E2E.P50, 3.5) || !near(r.SimSeconds, 20) {
		t.Errorf("TTFT p50 %v, E2E p50 %v, sim seconds %v", r.TTFT.P50, r.E2E.P50, r.SimSeconds)
	}
	if !near(r.RequestsPerSec, 0.1) || !near(r.OutputTokensPerSec, 1.5) {
		t.Errorf("rates %v req/s, %v tok/s", r.RequestsPerSec, r.OutputTokensPerSec)
	}
	// Computed tokens 60 and 100: mean 80, deviation 20.
	if !near(r.WorkCV, 0.25) || r.RequestsCV != 0 {
		t.Errorf("work CV %v, requests CV %v", r.WorkCV, r.RequestsCV)
	}
	if r.Late.N != 1 || !near(r.Late.P99, 0.1) || r.ClientCachedTokens != 5 {
		t.Errorf("late %+v, client cached %d", r.Late, r.ClientCachedTokens)
	}
}

// A run during which the machine fell behind is run again, and the
// untrusted attempt is kept apart from the figures.
func TestUntrustedRunsAreRerun(t *testing.T) {
	w, sc := prefixHeavy(t)
	w.Requests = w.Requests[:8]
	cfg := e2eConfig(t, sc, "round_robin")
	cfg.Replay.Mode = OpenLoop // the open loop measures its own lateness
	cfg.MaxLag = time.Nanosecond
	cfg.Retries = 1
	rep, err := Run(context.Background(), cfg, w)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Discarded) != 1 || len(rep.Runs) != 1 {
		t.Fatalf("%d discarded, %d kept; want 1 and 1", len(rep.Discarded), len(rep.Runs))
	}
	if rep.Runs[0].Attempt != 1 || !strings.Contains(rep.Runs[0].Invalid, "late") {
		t.Errorf("kept run: attempt %d, invalid %q", rep.Runs[0].Attempt, rep.Runs[0].Invalid)
	}
	var b strings.Builder
	if err := WriteMarkdown(&b, rep); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "Discarded") || !strings.Contains(b.String(), "NO: the load generator") {
		t.Errorf("the Markdown hides the untrusted runs:\n%s", b.String())
	}

	cfg.MaxLag = time.Hour
	rep, err = Run(context.Background(), cfg, w)
	if err != nil || len(rep.Discarded) != 0 || rep.Runs[0].Invalid != "" {
		t.Errorf("a generous MaxLag: err %v, %d discarded, invalid %q", err, len(rep.Discarded), rep.Runs[0].Invalid)
	}
}

// Precision counts the prefix routes whose backend reported at least half
// the tokens the router believed it held.
func TestPrecision(t *testing.T) {
	s := []Sample{
		{Reason: "prefix", Matched: 0.5, PromptTokens: 1000, CachedTokens: 500}, // confirmed
		{Reason: "prefix", Matched: 0.5, PromptTokens: 1000, CachedTokens: 250}, // half of the belief: confirmed
		{Reason: "prefix", Matched: 0.5, PromptTokens: 1000, CachedTokens: 0},   // stale claim
		{Reason: "miss", Matched: 0, PromptTokens: 1000, CachedTokens: 0},       // not a prefix route
		{Reason: "prefix", Matched: 0.9, PromptTokens: 1000, Err: "timeout"},    // failed: not counted
		{Reason: "doubt", Matched: 0.8, PromptTokens: 1000, CachedTokens: 0},    // a doubted claim, gone
	}
	if p, n := precision(s, "prefix"); p != 2.0/3 || n != 3 {
		t.Fatalf("precision %v over %d routes, want 2/3 over 3", p, n)
	}
	if p, n := precision(s, "doubt"); p != 0 || n != 1 {
		t.Fatalf("doubt precision %v over %d routes, want 0 over 1", p, n)
	}
	if p, n := precision(nil, "prefix"); p != 0 || n != 0 {
		t.Fatalf("precision of nothing %v over %d", p, n)
	}
}

// Reach is what the requests reused over what the best-placed backend
// held; a request reusing more than was measured counts what it reused.
func TestReach(t *testing.T) {
	s := []Sample{
		{Available: 1000, CachedTokens: 1000}, // all reused
		{Available: 1000, CachedTokens: 0},    // all recomputed
		{Available: 0, CachedTokens: 500},     // more than measured (filled meanwhile)
		{Available: 800, Err: "timeout"},      // failed: not counted
	}
	r, regret, n := reach(s)
	if r != 1500.0/2500 || regret != 1000.0/3 || n != 3 {
		t.Fatalf("reach %v regret %v over %d, want 0.6 and 333.3 over 3", r, regret, n)
	}
	if r, g, n := reach([]Sample{{CachedTokens: 5}}); r != 0 || g != 0 || n != 0 {
		t.Fatalf("unmeasured: reach %v regret %v over %d", r, g, n)
	}
	// Measured, and nothing reused: a reach of 0 over one request.
	if r, g, n := reach([]Sample{{Available: 64}}); r != 0 || g != 64 || n != 1 {
		t.Fatalf("nothing reused: reach %v regret %v over %d", r, g, n)
	}
}

// A run whose precision or reach was measured as 0 counts in its arm's
// spread; a run that did not measure them does not.
func TestSummarizeKeepsMeasuredZeros(t *testing.T) {
	arm := Arm{Name: "kvmesh", Policy: "kvmesh", Nodes: 1}
	measuredZero := []Sample{
		// A prefix route the backend did not confirm, and nothing reused of
		// what a backend held.
		{Reason: "prefix", Matched: 0.5, PromptTokens: 1000, Available: 500},
	}
	confirmed := []Sample{
		{Reason: "prefix", Matched: 0.5, PromptTokens: 1000, CachedTokens: 500, Available: 500},
	}
	unmeasured := []Sample{{Reason: "miss", PromptTokens: 1000}}
	var runs []RunResult
	for _, s := range [][]Sample{measuredZero, confirmed, confirmed, unmeasured} {
		r := RunResult{Arm: arm.Name}
		fillResult(&r, s, nil, time.Second, 1, func(i int) int { return i })
		runs = append(runs, r)
	}
	if runs[0].Precision != 0 || runs[0].PrecisionRoutes != 1 || runs[0].Reach != 0 || runs[0].ReachRequests != 1 {
		t.Fatalf("measured zeros: precision %v over %d, reach %v over %d", runs[0].Precision, runs[0].PrecisionRoutes, runs[0].Reach, runs[0].ReachRequests)
	}
	a := Summarize([]Arm{arm}, runs)[0]
	// Three runs measured each: 0, 1, 1.
	for name, sp := range map[string]Spread{"precision": a.Precision, "reach": a.Reach, "regret": a.RegretTokens, "move regret": a.MoveRegret} {
		if sp.N != 3 {
			t.Errorf("%s over %d runs, want the 3 that measured it", name, sp.N)
		}
	}
	if a.Precision.Min != 0 || a.Precision.Median != 1 || a.Reach.Min != 0 || a.RegretTokens.Max != 500 {
		t.Errorf("precision %+v, reach %+v, regret %+v", a.Precision, a.Reach, a.RegretTokens)
	}
}

// deployArm starts a fleet from factory and arm's routers in front of it;
// done closes both.
func deployArm(t testing.TB, cfg *Config, factory FleetFactory, arm Arm) (d *deployment, fleet Fleet, done func()) {
	t.Helper()
	fleet, err := factory(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	d, err = deploy(context.Background(), cfg, arm, fleet)
	if err != nil {
		fleet.Close()
		t.Fatal(err)
	}
	return d, fleet, func() { d.Close(); fleet.Close() }
}

func TestAvailableInNamesTheBestHolder(t *testing.T) {
	view := &OracleView{Backends: []OracleBackend{
		&fakeOracleBackend{cached: 100, prompt: 4000},
		&fakeOracleBackend{cached: 0, prompt: 4000},
		&fakeOracleBackend{cached: 3000, prompt: 4000},
		&fakeOracleBackend{cached: 3000, prompt: 4000}, // an equal: the first keeps it
	}}
	if n, at := availableIn(view, "/v1/chat/completions")(nil); n != 3000 || at != BackendName(2) {
		t.Fatalf("availableIn = %d at %q, want 3000 at %q", n, at, BackendName(2))
	}
	none := &OracleView{Backends: []OracleBackend{&fakeOracleBackend{prompt: 4000}}}
	if n, at := availableIn(none, "/v1/chat/completions")(nil); n != 0 || at != "" {
		t.Fatalf("availableIn with nothing held = %d at %q, want 0 at \"\"", n, at)
	}
}

// Agreement counts the answered requests the nodes decided as they were
// sent; held ones (decided later, on other loads) and failures are left out.
func TestAgreementLeavesOutHeldRequests(t *testing.T) {
	samples := []Sample{
		{Status: 200, Backend: "b0", Expected: "b0"},
		{Status: 200, Backend: "b1", Expected: "b0"},
		{Status: 200, Backend: "b2", Expected: "b0", Held: 40 * time.Millisecond},
		{Status: 200, Backend: "b2", Expected: "b0", Held: time.Millisecond},
		{Status: 502, Err: "http-502", Backend: "b1", Expected: "b0"},
		{Status: 200, Backend: "b1"}, // no shadow decision
	}
	if got := agreement(samples); !near(got, 0.5) {
		t.Errorf("agreement %v, want 0.5 (1 of the 2 requests decided as sent)", got)
	}
	if got := agreement(samples[2:4]); got != 0 {
		t.Errorf("agreement over held requests only %v, want 0 (none decided as sent)", got)
	}
}
