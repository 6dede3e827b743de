package router

import (
	"encoding/base64"
	"encoding/binary"
	"math"
	"net/http"
	"testing"
	"time"
)

// An ORCA report on a response updates the backend's load view.
func TestORCAUpdatesLoadView(t *testing.T) {
	a := newFakeBackend(t, "a")
	orca := "TEXT named_metrics.kv_cache_usage_perc=0.5, named_metrics.num_requests_waiting=3.0"
	a.orca.Store(&orca)
	g := newRig(t, nil, a)
	if st := g.rt.Backends()[0]; st.ORCA != nil || st.Load.Waiting != nil {
		t.Fatalf("signal before any report: %+v", st)
	}
	if status, _, _ := g.call("POST", "/v1/completions", `{"model":"m1","prompt":"x"}`); status != 200 {
		t.Fatal(status)
	}
	st := g.rt.Backends()[0]
	if st.ORCA == nil || *st.ORCA.Waiting != 3 || *st.ORCA.KVUsage != 0.5 || st.ORCA.Running != nil {
		t.Fatalf("ORCA signal %+v", st.ORCA)
	}
	if *st.Load.Waiting != 3 || st.Load.SignalWeight != 1 {
		t.Fatalf("load view %+v", st.Load)
	}
	if g.counter("kvmesh_router_backend_waiting_requests", "backend", "a") != 3 ||
		g.counter("kvmesh_router_backend_kv_cache_usage_ratio", "backend", "a") != 0.5 {
		t.Error("backend gauges do not show the ORCA report")
	}
}

// orcaBin builds a base64 OrcaLoadReport with named_metrics entries.
func orcaBin(named map[string]float64) string {
	var msg []byte
	for k, v := range named {
		var entry []byte
		entry = append(entry, 0x0a, byte(len(k)))
		entry = append(entry, k...)
		entry = append(entry, 0x11)
		entry = binary.LittleEndian.AppendUint64(entry, math.Float64bits(v))
		msg = append(msg, 0x42, byte(len(entry)))
		msg = append(msg, entry...)
	}
	return base64.StdEncoding.EncodeToString(msg)
}

func TestORCALegacyBinaryHeader(t *testing.T) {
	a := newFakeBackend(t, "a")
	a.setHook(func(w http.ResponseWriter, _ *http.Request, _ []byte) {
		w.Header().Set("Endpoint-Load-Metrics-Bin", orcaBin(map[string]float64{"num_requests_waiting": 7}))
		_, _ = w.Write([]byte(`{}`))
	})
	g := newRig(t, nil, a)
	g.call("POST", "/v1/completions", `{"model":"m1","prompt":"x"}`)
	if st := g.rt.Backends()[0]; st.ORCA == nil || st.ORCA.Waiting == nil || *st.ORCA.Waiting != 7 {
		t.Fatalf("ORCA from the -bin header: %+v", st.ORCA)
	}
}

// A malformed report is counted and ignored; the request succeeds.
func TestBadORCAHeaderIgnored(t *testing.T) {
	a := newFakeBackend(t, "a")
	bad := "TEXT named_metrics.num_requests_waiting=lots"
	a.orca.Store(&bad)
	g := newRig(t, nil, a)
	if status, _, _ := g.call("POST", "/v1/completions", `{"model":"m1","prompt":"x"}`); status != 200 {
		t.Fatal(status)
	}
	if g.rt.Backends()[0].ORCA != nil {
		t.Error("a malformed report was recorded")
	}
	if g.counter("kvmesh_router_errors_total", "kind", "signal_parse") != 1 {
		t.Error("parse error not counted")
	}
}

// The scrape of /metrics feeds the load view of backends without ORCA.
func TestScrapeUpdatesLoadView(t *testing.T) {
	a := newFakeBackend(t, "a")
	page := "# HELP vllm:num_requests_running x\nvllm:num_requests_running{model_name=\"m1\"} 2\nvllm:num_requests_waiting{model_name=\"m1\"} 5\nvllm:kv_cache_usage_perc{model_name=\"m1\"} 0.25\n"
	a.metrics.Store(&page)
	g := newRig(t, func(c *Config, _ *Deps) { c.ScrapeInterval = 10 * time.Millisecond }, a)
	if err := g.rt.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a scrape", func() bool { return g.rt.Backends()[0].Scrape != nil })
	st := g.rt.Backends()[0]
	if *st.Scrape.Running != 2 || *st.Scrape.Waiting != 5 || *st.Scrape.KVUsage != 0.25 {
		t.Fatalf("scrape signal %+v", st.Scrape)
	}
	if *st.Load.Waiting != 5 || *st.Load.Running != 2 {
		t.Fatalf("load view %+v", st.Load)
	}
	// Scraped while this router has two requests pending there: the view
	// says at most two of the waiting five are its own.
	b := g.rt.backendByName("a")
	p1, p2 := b.addPending(10, 0, time.Time{}), b.addPending(10, 0, time.Time{})
	defer p1.release(time.Time{}, false)
	defer p2.release(time.Time{}, false)
	waitFor(t, "a scrape with two pending", func() bool { return b.loadView(time.Now(), &g.rt.cfg, nil).OwnAtSignal == 2 })
}

// An ORCA report records how many requests this router had pending at the
// backend when it arrived.
func TestORCARecordsOwnPending(t *testing.T) {
	g := newRig(t, nil, newFakeBackend(t, "a"))
	b := g.rt.backendByName("a")
	p := b.addPending(100, 0, time.Time{})
	h := http.Header{orcaResponseHeader: {"TEXT named_metrics.num_requests_waiting=4"}}
	if !g.rt.observeORCA(b, h, time.Now()) {
		t.Fatal("report not taken")
	}
	p.release(time.Time{}, false)
	if lv := b.loadView(time.Now(), &g.rt.cfg, nil); lv.Waiting != 4 || lv.OwnAtSignal != 1 || lv.PendingRequests != 0 {
		t.Fatalf("load view %+v, want 4 waiting of which 1 was ours, none pending now", lv)
	}
}

func TestSignalWeightDecaysLinearly(t *testing.T) {
	fresh, maxAge := 2*time.Second, 6*time.Second
	for _, c := range []struct {
		age  time.Duration
		want float64
	}{{0, 1}, {2 * time.Second, 1}, {3 * time.Second, 0.75}, {4 * time.Second, 0.5}, {6 * time.Second, 0}, {time.Hour, 0}} {
		if got := signalWeight(c.age, fresh, maxAge); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("weight at %v = %v, want %v", c.age, got, c.want)
		}
	}
}

// The fresher source wins; a field it lacks comes from the other while that
// one is not too old; a stale signal counts for nothing in the queue.
func TestFreshestSignalCombines(t *testing.T) {
	cfg := DefaultConfig()
	now := time.Unix(1000, 0)
	var orca, scrape signal
	scrape.store(sample{Waiting: 9, Running: 4, KVUsage: 0.1, Has: HasWaiting | HasRunning | HasKVCacheUsage, Own: 3}, now.Add(-3*time.Second))
	orca.store(sample{Waiting: 1, KVUsage: 0.7, Has: HasWaiting | HasKVCacheUsage, Own: 1}, now.Add(-time.Second))
	var lv LoadView
	freshest(now, &orca, &scrape, &cfg, &lv)
	if lv.Waiting != 1 || lv.OwnAtSignal != 1 || lv.KVUsage != 0.7 || lv.Running != 4 || lv.SignalAge != time.Second || lv.SignalWeight != 1 {
		t.Fatalf("combined view %+v", lv)
	}
	// Waiting from the older source comes with that source's own count.
	orca.store(sample{KVUsage: 0.7, Has: HasKVCacheUsage, Own: 1}, now.Add(-time.Second))
	lv = LoadView{}
	freshest(now, &orca, &scrape, &cfg, &lv)
	if lv.Waiting != 9 || lv.OwnAtSignal != 3 {
		t.Fatalf("waiting from the scrape: %+v", lv)
	}
	lv = LoadView{InFlight: 2}
	freshest(now.Add(time.Minute), &orca, &scrape, &cfg, &lv)
	if lv.SignalWeight != 0 || lv.Queue() != 2 || lv.Running != 0 {
		t.Fatalf("stale view %+v (queue %v)", lv, lv.Queue())
	}
}
