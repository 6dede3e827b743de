package router

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// kvmesh_router_backends_routable counts what /readyz checks: the backends
// in rotation. It drops for each way out of it (drained by an operator,
// no longer listed, ejected), and reaches 0 in a mixed outage that
// backend_healthy does not show (the drained backend still reports 1).
func TestMetricsRoutableBackendsFollowRotation(t *testing.T) {
	a, b, c := newFakeBackend(t, "a"), newFakeBackend(t, "b"), newFakeBackend(t, "c")
	g := newRig(t, func(cfg *Config, d *Deps) {
		cfg.EjectAfter = 1 // not started: no probe re-admits an ejected backend
		prefer("b", "c", "a")(cfg, d)
	}, a, b, c)
	admin := g.rt.AdminHandler()
	check := func(step string, want float64) {
		t.Helper()
		if got := g.counter("kvmesh_router_backends_routable"); got != want {
			t.Errorf("%s: backends_routable %v, want %v", step, got, want)
		}
		rec := httptest.NewRecorder()
		admin.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
		if ready := rec.Code == http.StatusOK; ready != (want > 0) || ready != g.rt.Ready() {
			t.Errorf("%s: /readyz %d, Ready %v, with %v backends routable", step, rec.Code, g.rt.Ready(), want)
		}
	}
	check("all in rotation", 3)
	if err := g.rt.SetDrained("a", true); err != nil {
		t.Fatal(err)
	}
	check("a drained", 2)
	if err := g.rt.SetBackends(g.rt.Config().Backends[:2]); err != nil {
		t.Fatal(err)
	}
	check("c no longer listed", 1)
	b.setHook(closeConn)
	if status, route, body := g.call("POST", "/v1/completions", `{"model":"m1","prompt":"x"}`); status == http.StatusOK {
		t.Fatalf("b answered through a closed connection: %q %s", route, body)
	}
	if g.rt.backendByName("b").healthy.Load() {
		t.Fatal("b not ejected")
	}
	check("b ejected", 0)
	if got := g.counter("kvmesh_router_backend_healthy"); got == 0 {
		t.Error("backend_healthy sums to 0: this outage was not the one it misses")
	}
	if err := g.rt.SetDrained("a", false); err != nil {
		t.Fatal(err)
	}
	check("a back", 1)
}
