package router

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// streamInTwo answers with one SSE event, flushed, signals firstSent, and
// sends the end of the stream once finish is closed.
func streamInTwo(w http.ResponseWriter, firstSent chan<- struct{}, finish <-chan struct{}) {
	w.Header().Set("Content-Type", "text/event-stream")
	_, _ = io.WriteString(w, "data: {\"n\":1}\n\n")
	w.(http.Flusher).Flush()
	firstSent <- struct{}{}
	<-finish
	_, _ = io.WriteString(w, "data: [DONE]\n\n")
}

// postInBackground posts body to /v1/chat/completions from a goroutine
// and reads the whole answer; the channel closes when it is done.
func (g *testRig) postInBackground(body string) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		resp := g.do("POST", "/v1/chat/completions", body)
		_, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
	}()
	return done
}

// pendingOf reads a backend's pending prefill (units, requests).
func pendingOf(g *testRig, name string) (int64, int64) {
	b := g.rt.backendByName(name)
	return b.pendingUnits.Load(), b.pendingRequests.Load()
}

// A streamed request counts its uncached units as pending at its backend
// from dispatch until its first answer byte, then no more, although it
// stays in flight while it decodes. The count shows in /admin/backends,
// /debug/route and the pending-prefill gauge.
func TestPendingPrefillUntilFirstByte(t *testing.T) {
	a := newFakeBackend(t, "a")
	arrived, firstSent := make(chan struct{}, 1), make(chan struct{}, 1)
	sendFirst, finish := make(chan struct{}), make(chan struct{})
	a.setHook(func(w http.ResponseWriter, r *http.Request, _ []byte) {
		arrived <- struct{}{}
		<-sendFirst
		streamInTwo(w, firstSent, finish)
	})
	g := newRig(t, prefer("a"), a)
	sys := longText("pending system prompt", 3000)
	body := strings.Replace(chat("m1", sys, "first question"), `"model":"m1"`, `"model":"m1","stream":true`, 1)
	units := int64(chainFor(t, g, EndpointChat, body, "").Units)

	run := func(wantUnits int64) {
		t.Helper()
		done := g.postInBackground(body)
		<-arrived
		if u, n := pendingOf(g, "a"); u != wantUnits || n != 1 {
			t.Fatalf("before the first byte: pending %d units in %d requests, want %d in 1", u, n, wantUnits)
		}
		if got := g.counter("kvmesh_router_backend_pending_prefill_units", "backend", "a"); got != float64(wantUnits) {
			t.Errorf("gauge %v, want %d", got, wantUnits)
		}
		_, js := adminCall(t, g, "GET", "/admin/backends", "")
		var list []BackendStatus
		if err := json.Unmarshal(js, &list); err != nil || list[0].Load.PendingPrefillUnits != float64(wantUnits) || list[0].Load.PendingRequests != 1 {
			t.Errorf("/admin/backends: %+v (%v)", list, err)
		}
		_, js = adminCall(t, g, "POST", "/debug/route", body)
		var x RouteExplanation
		if err := json.Unmarshal(js, &x); err != nil || x.Candidates[0].Load.PendingPrefillUnits != float64(wantUnits) {
			t.Errorf("/debug/route: %+v (%v)", x, err)
		}
		sendFirst <- struct{}{}
		<-firstSent
		waitFor(t, "pending released at the first byte", func() bool {
			u, n := pendingOf(g, "a")
			return u == 0 && n == 0
		})
		if f := g.rt.backendByName("a").inFlight.Load(); f != 1 {
			t.Errorf("in flight %d while decoding, want 1", f)
		}
		finish <- struct{}{}
		<-done
		if u, n := pendingOf(g, "a"); u != 0 || n != 0 {
			t.Fatalf("after the answer: pending %d units in %d requests", u, n)
		}
	}
	run(units) // nothing held: the whole prompt is pending
	// The repeat matches the claims learned for a: only the rest is pending.
	matched := int64(g.holders(EndpointChat, body, "")["a"] * chainFor(t, g, EndpointChat, body, "").UnitsPerBlock)
	if matched == 0 {
		t.Fatal("a holds nothing after serving the prompt")
	}
	run(units - matched)
}

// Every way an attempt can end releases its pending prefill exactly once:
// afterwards every backend's count is exactly zero (a double release would
// leave it negative), and each failing attempt did count while it lasted.
func TestPendingPrefillReleasedOnEveryPath(t *testing.T) {
	streamOne := func(w http.ResponseWriter) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: {\"n\":1}\n\n")
		w.(http.Flusher).Flush()
	}
	cases := []struct {
		name   string
		hook   func(w http.ResponseWriter, r *http.Request, _ []byte)
		mod    func(*Config)
		cancel bool // the client goes away while a holds the request
		status int  // 0: any (a broken or canceled answer)
	}{
		{name: "connection closed, retried", hook: closeConn, status: 200},
		{name: "5xx, retried", hook: func(w http.ResponseWriter, _ *http.Request, _ []byte) {
			w.WriteHeader(http.StatusBadGateway)
		}, status: 200},
		{name: "header timeout", hook: func(w http.ResponseWriter, r *http.Request, _ []byte) {
			select {
			case <-r.Context().Done():
			case <-time.After(5 * time.Second):
			}
		}, mod: func(c *Config) { c.BackendHeaderTimeout = 100 * time.Millisecond }, status: http.StatusGatewayTimeout},
		{name: "client gone before headers", hook: func(w http.ResponseWriter, r *http.Request, _ []byte) {
			<-r.Context().Done()
		}, cancel: true},
		{name: "broken after the first byte", hook: func(w http.ResponseWriter, _ *http.Request, _ []byte) {
			streamOne(w)
			if conn, buf, err := http.NewResponseController(w).Hijack(); err == nil {
				_ = buf.Flush()
				conn.Close()
			}
		}},
		{name: "client gone after the first byte", hook: func(w http.ResponseWriter, r *http.Request, _ []byte) {
			streamOne(w)
			<-r.Context().Done()
		}, cancel: true},
		{name: "empty answer", hook: func(w http.ResponseWriter, _ *http.Request, _ []byte) {
			w.WriteHeader(http.StatusNoContent)
		}, status: http.StatusNoContent},
		{name: "non-streaming answer", hook: nil, status: 200},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a, b := newFakeBackend(t, "a"), newFakeBackend(t, "b")
			var g *testRig
			var sawPending atomic.Int64
			held := make(chan struct{}, 1)
			a.setHook(func(w http.ResponseWriter, r *http.Request, body []byte) {
				u, _ := pendingOf(g, "a")
				sawPending.Store(u)
				select {
				case held <- struct{}{}:
				default:
				}
				if tc.hook == nil {
					w.Header().Set("Content-Type", "application/json")
					_, _ = io.WriteString(w, `{"choices":[]}`)
					return
				}
				tc.hook(w, r, body)
			})
			g = newRig(t, func(c *Config, d *Deps) {
				prefer("a", "b")(c, d)
				if tc.mod != nil {
					tc.mod(c)
				}
			}, a, b)
			body := `{"model":"m1","prompt":"` + longText("pending", 2000) + `"}`
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			if tc.cancel {
				go func() {
					<-held
					time.Sleep(20 * time.Millisecond)
					cancel()
				}()
			}
			req, _ := http.NewRequestWithContext(ctx, "POST", g.srv.URL+"/v1/completions", strings.NewReader(body))
			resp, err := g.srv.Client().Do(req)
			if err == nil {
				_, _ = io.ReadAll(resp.Body)
				resp.Body.Close()
				if tc.status != 0 && resp.StatusCode != tc.status {
					t.Errorf("status %d, want %d", resp.StatusCode, tc.status)
				}
			} else if tc.status != 0 {
				t.Fatalf("request failed: %v", err)
			}
			if got, want := sawPending.Load(), int64(chainFor(t, g, EndpointCompletions, body, "").Units); got != want {
				t.Errorf("a's pending while it held the request: %d units, want %d", got, want)
			}
			waitFor(t, "every attempt finished", func() bool {
				return g.rt.backendByName("a").inFlight.Load() == 0 && g.rt.backendByName("b").inFlight.Load() == 0
			})
			for _, name := range []string{"a", "b"} {
				if u, n := pendingOf(g, name); u != 0 || n != 0 {
					t.Errorf("%s: pending %d units in %d requests after the request ended, want 0", name, u, n)
				}
			}
		})
	}
}
