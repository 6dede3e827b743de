package router

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestAdminRefusesCrossSiteRequests: a web page the operator happens to
// visit must not drain backends through the admin listener (the browser
// sends the POST, with the operator's network position, to
// localhost:9090 or a cluster-internal address). Browsers label such a
// request (Sec-Fetch-Site, or an Origin that is not the listener's own);
// curl, scripts and the status page served on the listener itself do not
// or match it, and keep working.
func TestAdminRefusesCrossSiteRequests(t *testing.T) {
	a, b := newFakeBackend(t, "a"), newFakeBackend(t, "b")
	g := newRig(t, nil, a, b)
	admin := g.rt.AdminHandler()
	do := func(method, path string, hdr map[string]string) (int, string) {
		t.Helper()
		var body io.Reader
		if method == http.MethodPost && strings.HasPrefix(path, "/debug/route") {
			body = strings.NewReader(string(chat("m1", "sys", "hello")))
		}
		req, err := http.NewRequest(method, "http://localhost:9090"+path, body)
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		rec := httptest.NewRecorder()
		admin.ServeHTTP(rec, req)
		return rec.Code, rec.Body.String()
	}
	drained := func(name string) bool { return g.rt.backendByName(name).draining.Load() }

	crossSite := map[string]string{"Sec-Fetch-Site": "cross-site", "Origin": "https://evil.example"}
	if st, body := do(http.MethodPost, "/admin/backends/a/drain", crossSite); st != http.StatusForbidden || drained("a") {
		t.Fatalf("cross-site drain: status %d, drained %v (%s); want 403 and a in rotation", st, drained("a"), body)
	}
	// A browser too old to send Sec-Fetch-Site still sends Origin.
	oldBrowser := map[string]string{"Origin": "https://evil.example"}
	if st, _ := do(http.MethodPost, "/admin/backends/a/drain", oldBrowser); st != http.StatusForbidden || drained("a") {
		t.Fatalf("drain with a foreign Origin: status %d, drained %v; want 403", st, drained("a"))
	}
	if st, _ := do(http.MethodPost, "/debug/route", crossSite); st != http.StatusForbidden {
		t.Errorf("cross-site POST /debug/route: status %d, want 403", st)
	}

	// curl: no Sec-Fetch-Site, no Origin.
	if st, body := do(http.MethodPost, "/admin/backends/a/drain", nil); st != http.StatusOK || !drained("a") {
		t.Fatalf("drain without browser headers: status %d, drained %v (%s)", st, drained("a"), body)
	}
	// The status page (/ui) on the listener itself: same origin.
	sameOrigin := map[string]string{"Sec-Fetch-Site": "same-origin", "Origin": "http://localhost:9090"}
	if st, body := do(http.MethodPost, "/admin/backends/a/undrain", sameOrigin); st != http.StatusOK || drained("a") {
		t.Fatalf("same-origin undrain: status %d, drained %v (%s)", st, drained("a"), body)
	}
	if st, body := do(http.MethodPost, "/debug/route", sameOrigin); st != http.StatusOK {
		t.Errorf("same-origin POST /debug/route: status %d (%s)", st, body)
	}
	// Reads stay open (a cross-site page cannot read the answer anyway).
	if st, _ := do(http.MethodGet, "/admin/backends", crossSite); st != http.StatusOK {
		t.Errorf("cross-site GET /admin/backends: status %d, want 200", st)
	}
	if st, _ := do(http.MethodGet, "/readyz", crossSite); st != http.StatusOK {
		t.Errorf("cross-site GET /readyz: status %d, want 200", st)
	}
}

// The admin listener's refusals are JSON like its answers: a path it has
// no endpoint for (404), a method an endpoint does not take (405, with
// Allow), a cross-site request (403, code cross_origin).
func TestAdminRefusalsAreJSON(t *testing.T) {
	g := newRig(t, nil, newFakeBackend(t, "a"))
	admin := g.rt.AdminHandler()
	for _, c := range []struct {
		method, path string
		hdr          map[string]string
		status       int
		want         string
	}{
		{http.MethodGet, "/admin/nothing", nil, http.StatusNotFound, "no admin endpoint"},
		{http.MethodDelete, "/admin/backends", nil, http.StatusMethodNotAllowed, "is not allowed"},
		{http.MethodPost, "/admin/backends/a/drain", map[string]string{"Sec-Fetch-Site": "cross-site", "Origin": "https://evil.example"}, http.StatusForbidden, "cross_origin"},
	} {
		req := httptest.NewRequest(c.method, "http://localhost:9090"+c.path, nil)
		for k, v := range c.hdr {
			req.Header.Set(k, v)
		}
		rec := httptest.NewRecorder()
		admin.ServeHTTP(rec, req)
		body := rec.Body.String()
		if rec.Code != c.status || rec.Header().Get("Content-Type") != "application/json" || !strings.Contains(body, c.want) || !strings.Contains(body, `"error"`) {
			t.Errorf("%s %s: %d %q %s", c.method, c.path, rec.Code, rec.Header().Get("Content-Type"), body)
		}
		if c.status == http.StatusMethodNotAllowed && rec.Header().Get("Allow") == "" {
			t.Errorf("%s %s: no Allow header", c.method, c.path)
		}
	}
}

// A path the mux redirects (to its cleaned form) is still redirected, with
// its Location, not turned into a JSON error.
func TestAdminRedirectsStayRedirects(t *testing.T) {
	g := newRig(t, nil, newFakeBackend(t, "a"))
	rec := httptest.NewRecorder()
	g.rt.AdminHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "http://localhost:9090/admin//backends", nil))
	if rec.Code/100 != 3 || rec.Header().Get("Location") == "" {
		t.Fatalf("GET /admin//backends: %d, Location %q, %s", rec.Code, rec.Header().Get("Location"), rec.Body.String())
	}
}
