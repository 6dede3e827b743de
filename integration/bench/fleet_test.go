package bench

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

// The lag sampler keeps the largest engine lag any backend reported,
// reading only that gauge (not a metric whose name begins with it, nor a
// value JSON cannot carry) and counting a backend it cannot reach as no lag.
func TestLagSamplerKeepsTheLargestLag(t *testing.T) {
	serve := func(page string, hit func()) string {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/metrics" {
				http.NotFound(w, r)
				return
			}
			if hit != nil {
				hit()
			}
			io.WriteString(w, page)
		}))
		t.Cleanup(srv.Close)
		return srv.URL
	}
	down := httptest.NewServer(http.NotFoundHandler())
	down.Close()

	// Backends are sampled in order, one round per tick: the first
	// backend's second page means every backend was read once.
	var hits atomic.Int32
	round := make(chan struct{})
	first := serve("# HELP kvmesh_sim_engine_lag_seconds Real seconds behind.\nkvmesh_sim_engine_lag_seconds 0.25\n", func() {
		if hits.Add(1) == 2 {
			close(round)
		}
	})
	urls := []string{
		first,
		down.URL,
		serve("kvmesh_sim_engine_lag_seconds_max 9\nkvmesh_sim_engine_lag_seconds{engine=\"0\"} 0.5\n", nil),
		serve("kvmesh_sim_engine_lag_seconds NaN\n", nil),
		serve("kvmesh_sim_engine_lag_seconds +Inf\n", nil),
		serve("vllm:num_requests_running 3\n", nil),
	}
	ls := startLagSampler(urls, time.Millisecond)
	<-round
	if got := ls.Stop(); got != 0.5 {
		t.Errorf("max lag %v, want 0.5", got)
	}
}
