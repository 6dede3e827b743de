package router

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"
)

// Each value of a load report is finite, but their sum need not be: a
// report whose summed counts pass the bound is rejected like any other
// malformed report, in every format.
func TestParseORCARejectsInfiniteTotals(t *testing.T) {
	bin := func(m protoMsg) string { return base64.StdEncoding.EncodeToString(m) }
	for name, v := range map[string]string{
		"text waiting":       "TEXT named_metrics.num_requests_waiting=1e308, named_metrics.num_requests_waiting=1e308",
		"text running":       "TEXT named_metrics.num_requests_running:1e308,named_metrics.num_requests_running:1e308",
		"text rps":           "TEXT rps_fractional=1e308, rps_fractional=1e308",
		"text huge finite":   "TEXT named_metrics.num_requests_waiting=6e8, named_metrics.num_requests_waiting=6e8",
		"text one too large": "TEXT named_metrics.num_requests_running=1e300",
		"json":               `JSON {"rps_fractional": 1e308, "rpsFractional": 1e308}`,
		"json named":         `JSON {"named_metrics": {"num_requests_waiting": 1e308, "num_requests_waiting": "1e308"}}`,
		"bin":                "BIN " + bin(protoMsg(nil).entry(8, "num_requests_waiting", 1e308).entry(8, "num_requests_waiting", 1e308)),
		"bin rps":            "BIN " + bin(protoMsg(nil).double(6, 1e308).double(6, 1e308)),
	} {
		r, err := ParseORCA(v)
		if err == nil {
			t.Errorf("%s: accepted, report %+v", name, r)
			continue
		}
		if !errors.Is(err, errLoadTotal) || !strings.HasPrefix(err.Error(), "orca: ") {
			t.Errorf("%s: error %q does not say the total is too large", name, err)
		}
		if r != (LoadReport{}) {
			t.Errorf("%s: error with report %+v", name, r)
		}
	}
	v := bin(protoMsg(nil).entry(8, "num_requests_running", 1e308).entry(8, "num_requests_running", 1e308))
	if r, err := ParseORCABinary(v); !errors.Is(err, errLoadTotal) {
		t.Errorf("-bin header: %+v, %v", r, err)
	}
	// At the bound is still a report.
	if r, err := ParseORCA("TEXT named_metrics.num_requests_waiting=5e8, named_metrics.num_requests_waiting=5e8"); err != nil || r.Waiting != 1e9 {
		t.Errorf("at the bound: %+v, %v", r, err)
	}
}

// Two engines' samples that add up past the bounds make the page an error.
func TestParseMetricsRejectsInfiniteTotals(t *testing.T) {
	for name, page := range map[string]string{
		"waiting":  "vllm:num_requests_waiting{engine=\"0\"} 1e308\nvllm:num_requests_waiting{engine=\"1\"} 1e308\n",
		"running":  "sglang:num_running_reqs{dp=\"0\"} 1e308\nsglang:num_running_reqs{dp=\"1\"} 1e308\n",
		"finite":   "vllm:num_requests_running{engine=\"0\"} 6e8\nvllm:num_requests_running{engine=\"1\"} 6e8\n",
		"queries":  "vllm:prefix_cache_queries_total{engine=\"0\"} 1e308\nvllm:prefix_cache_queries_total{engine=\"1\"} 1e308\n",
		"hits":     "sglang:cached_tokens_total{cache_source=\"device\"} 1e308\nsglang:cached_tokens_total{cache_source=\"host\"} 1e308\n",
		"legacy":   "vllm:gpu_prefix_cache_queries_total{engine=\"0\"} 1e308\nvllm:gpu_prefix_cache_queries_total{engine=\"1\"} 1e308\n",
		"capacity": "sglang:max_total_num_tokens 1e19\n",
		"capacity sum": "vllm:cache_config_info{engine=\"0\",num_gpu_blocks=\"68719476736\",block_size=\"16\"} 1\n" +
			"vllm:cache_config_info{engine=\"1\",num_gpu_blocks=\"68719476736\",block_size=\"16\"} 1\n",
	} {
		var s ScrapedLoad
		err := ParseMetrics(strings.NewReader(page), "", &s)
		if err == nil {
			t.Errorf("%s: accepted: %+v", name, s)
			continue
		}
		if !errors.Is(err, errLoadTotal) || !strings.Contains(err.Error(), "line ") {
			t.Errorf("%s: error %q does not say which total is too large", name, err)
		}
		if s != (ScrapedLoad{}) {
			t.Errorf("%s: error with result %+v", name, s)
		}
	}
	var s ScrapedLoad
	if err := ParseMetrics(strings.NewReader("sglang:max_total_num_tokens 1099511627776\nvllm:num_requests_waiting 1e9\n"), "", &s); err != nil ||
		s.KVCapacityTokens != MaxKVCapacityTokens || s.Waiting != 1e9 {
		t.Errorf("at the bounds: %+v, %v", s, err)
	}
}

// A scraped capacity becomes whole tokens, never a negative number.
func TestCapacityTokensClamped(t *testing.T) {
	for _, c := range []struct {
		in   float64
		want int64
	}{{1e19, MaxKVCapacityTokens}, {math.Inf(1), MaxKVCapacityTokens}, {math.MaxFloat64, MaxKVCapacityTokens},
		{MaxKVCapacityTokens + 1, MaxKVCapacityTokens}, {math.NaN(), 0}, {-5, 0}, {0, 0}, {262144.5, 262144}} {
		if got := capacityTokens(c.in); got != c.want {
			t.Errorf("capacityTokens(%v) = %d, want %d", c.in, got, c.want)
		}
	}
}

// A report adding up past the bound, in one header value or over repeated
// ones, is counted and ignored: /admin/backends keeps answering and the
// policy never sees an infinite load.
func TestORCAInfiniteTotalIgnored(t *testing.T) {
	for name, vals := range map[string][]string{
		"one value": {"TEXT named_metrics.num_requests_waiting=1e308, named_metrics.num_requests_waiting=1e308"},
		"repeated":  {"TEXT named_metrics.num_requests_running=6e8", "TEXT named_metrics.num_requests_running=6e8"},
	} {
		t.Run(name, func(t *testing.T) {
			a := newFakeBackend(t, "a")
			a.setHook(func(w http.ResponseWriter, _ *http.Request, _ []byte) {
				w.Header()["Endpoint-Load-Metrics"] = vals
				_, _ = w.Write([]byte(`{}`))
			})
			g := newRig(t, nil, a)
			if status, _, _ := g.call("POST", "/v1/completions", `{"model":"m1","prompt":"x"}`); status != 200 {
				t.Fatal(status)
			}
			checkAdminBackends(t, g)
			if st := g.rt.Backends()[0]; st.ORCA != nil {
				t.Errorf("report recorded: %+v", st.ORCA)
			}
			if g.counter("kvmesh_router_errors_total", "kind", "signal_parse") != 1 {
				t.Error("bad report not counted")
			}
			// Even once the report would be stale, the load stays finite.
			lv := g.rt.backendByName("a").loadView(time.Now().Add(time.Hour), &g.rt.cfg, nil)
			if x := lv.SignalWeight * lv.Waiting; math.IsNaN(x) || math.IsInf(x, 0) {
				t.Errorf("load view %+v", lv)
			}
		})
	}
}

// A metrics page adding up past the bounds is counted and ignored.
func TestScrapeInfiniteTotalIgnored(t *testing.T) {
	a := newFakeBackend(t, "a")
	page := "vllm:num_requests_waiting{engine=\"0\"} 1e308\nvllm:num_requests_waiting{engine=\"1\"} 1e308\nsglang:max_total_num_tokens 1e19\n"
	a.metrics.Store(&page)
	g := newRig(t, func(c *Config, _ *Deps) { c.ScrapeInterval = 10 * time.Millisecond }, a)
	if err := g.rt.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a scrape", func() bool { return g.counter("kvmesh_router_errors_total", "kind", "signal_parse") >= 1 })
	checkAdminBackends(t, g)
	if st := g.rt.Backends()[0]; st.Scrape != nil {
		t.Errorf("page recorded: %+v", st.Scrape)
	}
	if c := g.rt.backendByName("a").belief.capTokens.Load(); c != 0 {
		t.Errorf("capacity %d taken from a rejected page", c)
	}
}

func checkAdminBackends(t *testing.T, g *testRig) {
	t.Helper()
	status, body := adminCall(t, g, "GET", "/admin/backends", "")
	var list []BackendStatus
	if status != 200 || json.Unmarshal(body, &list) != nil || len(list) != 1 {
		t.Fatalf("/admin/backends: %d %s", status, body)
	}
}
