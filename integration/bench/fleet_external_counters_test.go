package bench

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// fakeVLLM serves /sim/fault, /health and a /metrics page with the
// prefix-cache counters it is told.
func fakeVLLM(t *testing.T, page *atomic.Value) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/sim/fault", "/health":
		case "/metrics":
			fmt.Fprint(w, page.Load().(string))
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

func counterPage(queries, hits int) string {
	return fmt.Sprintf("vllm:prefix_cache_queries_total{engine=\"0\"} %d\nvllm:prefix_cache_hits_total{engine=\"0\"} %d\n", queries, hits)
}

// A backend whose counters start over during a run (a crash and restart,
// as a real vLLM's do) has lost the run's counts: Counters must say so,
// not subtract into a wrapped-around hit count.
func TestExternalFleetCountersGoingBackIsAnError(t *testing.T) {
	var page atomic.Value
	page.Store(counterPage(5000, 4000))
	srv := fakeVLLM(t, &page)
	f, err := ExternalFleet([]string{srv.URL})(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	page.Store(counterPage(6000, 4500))
	c, err := f.Counters(context.Background())
	if err != nil || c[0].PrefixCacheQueries != 1000 || c[0].PrefixCacheHits != 500 {
		t.Fatalf("counters %+v, err %v: want the differences 1000 and 500", c, err)
	}
	page.Store(counterPage(800, 100)) // restarted: counting from 0 again
	c, err = f.Counters(context.Background())
	if err == nil || !strings.Contains(err.Error(), "backwards") {
		t.Errorf("counters after a reset: %+v, err %v; want an error saying they went backwards", c, err)
	}
}

// A metrics page without the prefix-cache counters (a URL that is not a
// vLLM's) must not read as a run of zero hits.
func TestExternalFleetNeedsThePrefixCacheCounters(t *testing.T) {
	var page atomic.Value
	page.Store("# nothing here\nprocess_cpu_seconds_total 3\n")
	srv := fakeVLLM(t, &page)
	_, err := ExternalFleet([]string{srv.URL})(context.Background())
	if err == nil || !strings.Contains(err.Error(), "prefix_cache_queries_total") {
		t.Errorf("err %v, want one naming the missing counters", err)
	}
}

// The text format allows a timestamp after the value, and label values
// with spaces and braces: the value is the field after the labels.
func TestParseCountersTimestampsAndLabels(t *testing.T) {
	page := `vllm:prefix_cache_queries_total{model_name="a b} c",engine="0"} 1200 1700000000000
vllm:prefix_cache_hits_total{model_name="x \"}\" y"} 640 1700000000000
vllm:request_success_total 7
`
	c, err := parseCounters(strings.NewReader(page))
	if err != nil {
		t.Fatal(err)
	}
	if c.PrefixCacheQueries != 1200 || c.PrefixCacheHits != 640 || c.Requests != 7 {
		t.Errorf("parsed %+v, want queries 1200, hits 640, requests 7", c)
	}
}
