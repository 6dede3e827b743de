package bench

import (
	"context"
	"strings"
	"testing"

	"github.com/kvmesh/kvmesh/integration/sim"
)

// An external fleet is made fresh for every run by restarting its
// backends: the same workload sent twice to the same processes hits the
// same, and the counters of each run are that run's alone.
func TestExternalFleetRestartsAndDiffs(t *testing.T) {
	w, sc := prefixHeavy(t)
	w.Requests = w.Requests[:16]
	f, err := sim.StartFleet(2, sc)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cfg := e2eConfig(t, sc, "round_robin")
	cfg.Arms[0].Name = "direct"
	cfg.Fleet = ExternalFleet(f.URLs())
	cfg.Fronts = f.URLs()[:1]  // straight to backend 0
	cfg.Repeats = 1            // with Fronts; each Run restarts the fleet
	cfg.Replay.Concurrency = 1 // deterministic: equal hits prove equal starts
	var runs []RunResult
	for range 2 {
		rep, err := Run(context.Background(), cfg, w)
		if err != nil {
			t.Fatal(err)
		}
		runs = append(runs, rep.Runs...)
	}
	a, b := runs[0], runs[1]
	if a.Queries != uint64(promptTokens(w)) || b.Queries != a.Queries {
		t.Errorf("queries %d and %d, want %d each: counters are not per run", a.Queries, b.Queries, promptTokens(w))
	}
	if a.Hits == 0 || b.Hits != a.Hits {
		t.Errorf("hits %d then %d: the second run must start as cold as the first", a.Hits, b.Hits)
	}
	if st := f.Stats(); st.Total.Restarts != 4 || st.Total.PrefixCacheQueries != 2*a.Queries {
		t.Errorf("fleet: %d restarts, %d queries in all", st.Total.Restarts, st.Total.PrefixCacheQueries)
	}
}

// External fronts are routers the harness cannot reset: a second run
// through them (another repeat or arm) would route on the first run's
// claims while the backends restart empty, so Run refuses more than one.
func TestFrontsRunOnce(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Fleet = ExternalFleet([]string{"http://127.0.0.1:1"})
	cfg.Fronts = []string{"http://127.0.0.1:2"}
	cfg.Arms = []Arm{{Name: "external", Policy: "external", Nodes: 1}}
	cfg.Repeats = 1
	if err := cfg.Validate(); err != nil {
		t.Fatalf("one repeat through fronts: %v", err)
	}
	cfg.Repeats = 3
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "Fronts") {
		t.Errorf("three repeats through fronts: err %v, want one naming Fronts", err)
	}
	cfg.Repeats = 1
	cfg.Arms = append(cfg.Arms, Arm{Name: "again", Policy: "external", Nodes: 1})
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "Fronts") {
		t.Errorf("two arms through fronts: err %v, want one naming Fronts", err)
	}
}

func TestParseCounters(t *testing.T) {
	page := `# HELP vllm:prefix_cache_queries_total x
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{engine="0",model_name="m"} 1200
vllm:prefix_cache_queries_total{engine="1",model_name="m"} 300
vllm:prefix_cache_hits_total{engine="0",model_name="m"} 640
vllm:request_success_total{finished_reason="length"} 7
vllm:generation_tokens_total 99
kvmesh_sim_engine_busy_seconds_total 1.5
vllm:num_requests_running 3
garbage line
vllm:prefix_cache_hits_total{engine="1"} NaN
`
	c, err := parseCounters(strings.NewReader(page))
	if err != nil {
		t.Fatal(err)
	}
	if c.PrefixCacheQueries != 1500 || c.PrefixCacheHits != 640 || c.Requests != 7 || c.GenerationTokens != 99 || c.BusySeconds != 1.5 {
		t.Errorf("parsed %+v", c)
	}
}
