package router

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
)

// FuzzServeHTTP sends arbitrary requests (method, path, tenant header and
// body) to a router in front of a fake backend: the handler must never
// panic, must always answer a valid status, and every error it writes
// itself must be an OpenAI-style JSON error.
func FuzzServeHTTP(f *testing.F) {
	seeds := []struct {
		method, path, tenant, body string
	}{
		{"POST", "/v1/chat/completions", "", `{"model":"m1","messages":[{"role":"user","content":"hi"}]}`},
		{"POST", "/v1/chat/completions", "t", `{"model":"m1","stream":true,"cache_salt":"s","messages":[{"role":"system","content":"x"},{"role":"user","content":[{"type":"text","text":"y"}]}]}`},
		{"POST", "/v1/completions", "", `{"model":"m1","prompt":[[1,2],[3]]}`},
		{"POST", "/v1/responses", "", `{"model":"m1","input":[{"type":"function_call","name":"f","arguments":"{}"}]}`},
		{"POST", "/v1/embeddings", "", `{"model":"m1","input":"x"}`},
		{"GET", "/v1/models", "", ``},
		{"GET", "/v1/models/m1", "", ``},
		{"POST", "/tokenize", "", `{"model":"m1","prompt":"x"}`},
		{"POST", "/v1/chat/completions", "", `{"model":"nope","messages":[]}`},
		{"POST", "/v1/chat/completions", "", `{"model":"m1","messages":[`},
		{"DELETE", "/v1/completions", "", ``},
		{"GET", "/../../etc/passwd", "", ``},
		{"POST", "/v1/chat/completions", "", "\xff\xfe{\x00"},
	}
	for _, s := range seeds {
		f.Add(s.method, s.path, s.tenant, []byte(s.body))
	}
	a := newFakeBackend(f, "a", "m1")
	g := newRig(f, func(c *Config, _ *Deps) {
		c.EjectAfter = 1 << 30 // keep the backend in rotation whatever the fuzzer sends
		c.MaxBodyBytes = 64 << 10
	}, a)
	f.Fuzz(func(t *testing.T, method, path, tenant string, body []byte) {
		u := &url.URL{Path: path}
		if i := strings.IndexByte(path, '?'); i >= 0 {
			u.Path, u.RawQuery = path[:i], path[i+1:]
		}
		r := &http.Request{Method: method, URL: u, RequestURI: u.RequestURI(), Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
			Header: http.Header{"Content-Type": {"application/json"}}, Host: "router",
			Body: http.NoBody, ContentLength: int64(len(body)), RemoteAddr: "127.0.0.1:1234"}
		if len(body) > 0 {
			r.Body = nopCloser{bytes.NewReader(body)}
		}
		if tenant != "" {
			r.Header["X-Tenant-Id"] = []string{tenant}
		}
		r = r.WithContext(t.Context())
		w := httptest.NewRecorder()
		g.rt.ServeHTTP(w, r)
		if w.Code < 100 || w.Code > 599 {
			t.Fatalf("status %d", w.Code)
		}
		if w.Header().Get(RouteHeader) == "" && w.Code >= 400 && w.Header().Get("Content-Type") == "application/json" {
			var e struct {
				Error *struct {
					Message string `json:"message"`
					Type    string `json:"type"`
				} `json:"error"`
			}
			if err := json.Unmarshal(w.Body.Bytes(), &e); err != nil || e.Error == nil || e.Error.Message == "" || e.Error.Type == "" {
				t.Fatalf("status %d with a malformed error body: %q", w.Code, w.Body.Bytes())
			}
		}
	})
}

type nopCloser struct{ *bytes.Reader }

func (nopCloser) Close() error { return nil }
