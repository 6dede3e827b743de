package sim

import (
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// promhttpPage is the page promhttp serves for in's registry (text format).
func promhttpPage(t testing.TB, in *Instance) string {
	t.Helper()
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	req.Header.Set("Accept", "text/plain; version=0.0.4")
	promhttp.HandlerFor(in.Registry(), promhttp.HandlerOpts{DisableCompression: true}).ServeHTTP(rec, req)
	return rec.Body.String()
}

// The hand-written page is the registry's page byte for byte: before any
// request and after some (histograms filled, counters moved), with a model
// name that needs escaping.
func TestMetricsPageIsTheRegistrysPage(t *testing.T) {
	in, srv := startServer(t, func(c *Config) { c.Models = []string{`org/m "x"\y`} })
	// The engine publishes its gauges (running, KV usage, lag) after a
	// request's last token, so two pages read moments apart can differ by
	// those: compare until a pair agrees, a bounded number of times.
	check := func(when string) {
		t.Helper()
		var got []byte
		var want string
		for range 200 {
			resp, err := http.Get(srv.URL + "/metrics")
			if err != nil {
				t.Fatal(err)
			}
			got, _ = io.ReadAll(resp.Body)
			resp.Body.Close()
			if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
				t.Fatalf("%s: Content-Type %q", when, ct)
			}
			if want = promhttpPage(t, in); string(got) == want {
				return
			}
			runtime.Gosched()
		}
		t.Fatalf("%s: the page differs from promhttp's\n--- got\n%s\n--- want\n%s", when, got, want)
	}
	check("idle")
	for i := range 3 {
		body := chatBody(t, 2, map[string]any{"model": `org/m "x"\y`}, msg{"user", words(string(rune('a'+i)), 40)})
		chat(t, srv.URL, body)
	}
	check("after 3 requests")
	if !strings.Contains(promhttpPage(t, in), `vllm:time_to_first_token_seconds_count{engine="0",model_name="org/m \"x\"\\y"} 3`) {
		t.Fatal("the comparison saw no request in the histograms")
	}
}

func BenchmarkMetricsPage(b *testing.B) {
	in, _ := startServer(b, nil)
	b.Run("handwritten", func(b *testing.B) {
		b.ReportAllocs()
		w := httptest.NewRecorder()
		for range b.N {
			w.Body.Reset()
			in.handleMetrics(w, nil)
		}
	})
	b.Run("promhttp", func(b *testing.B) {
		b.ReportAllocs()
		h := promhttp.HandlerFor(in.Registry(), promhttp.HandlerOpts{DisableCompression: true})
		req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
		w := httptest.NewRecorder()
		for range b.N {
			w.Body.Reset()
			h.ServeHTTP(w, req)
		}
	})
}
