package router

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/kvmesh/kvmesh/tree"
)

// A backend's GET /v1/models cannot make the model label (requests_total
// and the two histograms) take any number of values: past
// max_models_per_backend and beyond max_model_bytes per id, entries are
// skipped, counted by reason, and logged once per discovery, not per entry.
func TestDiscoveryBoundsModelsPerBackend(t *testing.T) {
	long := strings.Repeat("x", 257) // one byte over max_model_bytes
	fits := strings.Repeat("y", 256) // exactly max_model_bytes: kept
	const listed = 5000
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var b bytes.Buffer
		fmt.Fprintf(&b, `{"object":"list","data":[{"id":%q},{"id":%q},{"id":"%s-2"}`, long, fits, long)
		for i := range listed {
			fmt.Fprintf(&b, `,{"id":"adapter-%d","object":"model"}`, i)
		}
		b.WriteString(`,{"id":"adapter-0"}]}`) // a duplicate: skipped as ever, not counted
		w.Write(b.Bytes())
	}))
	defer srv.Close()
	var logs bytes.Buffer
	cfg := DefaultConfig()
	cfg.Backends = []BackendConfig{{Name: "a", URL: srv.URL}}
	ix, _ := tree.New(tree.Config{BlockTokens: 16, Capacity: 1024, MaxBackends: 16, EvictFraction: 0.25, SweepPerWrite: 1})
	reg := prometheus.NewRegistry()
	rt, err := New(cfg, Deps{Index: ix, Registerer: reg, Logger: zerolog.New(&logs).Level(zerolog.InfoLevel)})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.MaxModelsPerBackend != 256 || cfg.MaxModelBytes != 256 {
		t.Fatalf("defaults: max_models_per_backend %d, max_model_bytes %d; the test assumes 256 and 256", cfg.MaxModelsPerBackend, cfg.MaxModelBytes)
	}
	// Until the counter is registered with the others (newMetrics), the
	// test registers it as that would.
	for _, c := range rt.metrics.models.collectors() {
		if err := reg.Register(c); err != nil {
			if _, dup := err.(prometheus.AlreadyRegisteredError); !dup {
				t.Fatal(err)
			}
		}
	}
	const rounds = 3
	for range rounds {
		rt.discover(context.Background(), rt.backends()[0])
	}
	ids := rt.models.cur.Load().ids
	if len(ids) != 256 {
		t.Fatalf("%d models served from one backend, want max_models_per_backend (256)", len(ids))
	}
	if rt.models.lookup(fits) == nil || rt.models.lookup("adapter-0") == nil || rt.models.lookup("adapter-254") == nil {
		t.Error("the first entries within the limits are not served")
	}
	if rt.models.lookup(long) != nil || rt.models.lookup("adapter-255") != nil || rt.models.lookup(fmt.Sprint("adapter-", listed-1)) != nil {
		t.Error("an entry beyond the limits is served")
	}
	// A request naming a skipped model is counted under "other", like any
	// model no backend serves.
	if mm := rt.modelMetricsFor(fmt.Sprint("adapter-", listed-1)); mm.name != otherModel {
		t.Errorf("a skipped model has its own label %q", mm.name)
	}
	counter := func(reason string) float64 {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() != "kvmesh_router_discovered_models_skipped_total" {
				continue
			}
			for _, m := range mf.GetMetric() {
				if m.GetLabel()[0].GetValue() == reason {
					return m.GetCounter().GetValue()
				}
			}
		}
		t.Fatalf("no kvmesh_router_discovered_models_skipped_total{reason=%q}", reason)
		return 0
	}
	if got, want := counter("too_many"), float64(rounds*(listed-255)); got != want {
		t.Errorf("skipped too_many %v, want %v (every discovery counts its list)", got, want)
	}
	if got, want := counter("id_too_long"), float64(rounds*2); got != want {
		t.Errorf("skipped id_too_long %v, want %v", got, want)
	}
	if n := strings.Count(logs.String(), "beyond the limits"); n != rounds {
		t.Errorf("the skipped entries were logged %d times in %d discoveries, want once each:\n%.2000s", n, rounds, logs.String())
	}
	if n := strings.Count(logs.String(), `"level":"warn"`); n != rounds {
		t.Errorf("%d warnings in %d discoveries, want one each", n, rounds)
	}
}

// parseModelList with limits keeps the first entries in the list's order,
// counts what it skips, and without limits keeps everything.
func TestParseModelListLimits(t *testing.T) {
	list := modelList(20) // adapter-0 .. adapter-9, each twice
	out, skips, err := parseModelList(bytes.NewReader(list), modelLimits{maxModels: 4, maxIDBytes: 9})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range out {
		ids = append(ids, m.ID)
	}
	if fmt.Sprint(ids) != "[adapter-0 adapter-1 adapter-2 adapter-3]" || skips[skipTooMany] != 12 || skips[skipIDBytes] != 0 {
		t.Fatalf("kept %v, skipped %v", ids, skips)
	}
	if _, skips, _ := parseModelList(bytes.NewReader(list), modelLimits{maxModels: 100, maxIDBytes: 8}); skips[skipIDBytes] != 20 {
		t.Fatalf("ids of 9 bytes over a bound of 8: skipped %v", skips)
	}
	if out, skips, _ := parseModelList(bytes.NewReader(list), modelLimits{}); len(out) != 10 || skips != (modelSkips{}) {
		t.Fatalf("no limits: kept %d, skipped %v", len(out), skips)
	}
}

func TestConfigMaxModelsPerBackend(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Backends = []BackendConfig{{URL: "http://127.0.0.1:1"}}
	cfg.MaxModelsPerBackend = 0
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "max_models_per_backend") {
		t.Fatalf("max_models_per_backend 0: %v", err)
	}
}
