package router

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// earlyBackend answers 503 the moment it accepts a connection, before the
// router's transport has written anything, and closes the connection a
// little later: Go's transport returns the answer while its write
// goroutine is still to write the request (header, URL, body). The rig is
// not started, so no health probe meets it.
func earlyBackend(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				fmt.Fprint(c, "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
				time.Sleep(40 * time.Millisecond) // the transport may still be writing the request
			}()
		}
	}()
	return "http://" + ln.Addr().String()
}

// A backend that answers before the request was written must not leave
// the transport reading a header map, URL or X-Forwarded-For value that
// the router then reuses for the next attempt or request: under the race
// detector (make test) this reported races and, without it, crashed the
// process ("concurrent map read and map write").
func TestEarlyAnswerLeavesTheRequestToTheTransport(t *testing.T) {
	url := earlyBackend(t)
	g := newRig(t, func(cfg *Config, _ *Deps) {
		cfg.Backends = []BackendConfig{{Name: "early", URL: url, Models: []string{"m1"}}, {Name: "early2", URL: url, Models: []string{"m1"}}}
		cfg.EjectAfter = 1 << 20 // keep answering through the router
		cfg.Retries = 1          // a second attempt reuses the first's parts
	})
	body := chat("m1", strings.Repeat("a long system prompt. ", 20000), "q") // ~440 KB: longer than socket buffers
	var wg sync.WaitGroup
	for c := 0; c < 8; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 6; i++ {
				st, _, _ := g.call("POST", "/v1/chat/completions", body, "X-Client", fmt.Sprint(c, "-", i))
				if st != 503 && st != 502 {
					t.Errorf("status %d, want the backend's 503 (or 502)", st)
				}
			}
		}()
	}
	wg.Wait()
}

// A client that stops reading a streamed answer is cut off once the
// router's write to it has blocked for client_write_timeout, and the
// backend request ends with it: it held the backend's sequence, its
// in-flight count and any admission slot for good.
func TestClientThatStopsReadingIsCutOff(t *testing.T) {
	backendDone := make(chan struct{})
	chunk := []byte("data: " + strings.Repeat("x", 64<<10) + "\n\n")
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer close(backendDone)
		w.Header().Set("Content-Type", "text/event-stream")
		rc := http.NewResponseController(w)
		for r.Context().Err() == nil {
			if _, err := w.Write(chunk); err != nil {
				return
			}
			_ = rc.Flush()
		}
	}))
	t.Cleanup(be.Close)
	g := newRig(t, func(cfg *Config, _ *Deps) {
		cfg.Backends = []BackendConfig{{Name: "a", URL: be.URL, Models: []string{"m1"}}}
		cfg.ClientWriteTimeout = 300 * time.Millisecond
	})
	c, err := net.Dial("tcp", strings.TrimPrefix(g.srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	body := `{"model":"m1","stream":true,"messages":[{"role":"user","content":"hi"}]}`
	fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	// ... and never reads.
	select {
	case <-backendDone:
	case <-time.After(30 * time.Second):
		t.Fatal("the backend request never ended: the client that stopped reading holds it")
	}
	waitFor(t, "in-flight back to 0", func() bool { return g.rt.backendByName("a").inFlight.Load() == 0 })
}

// The 502 a client gets when no backend could serve it says what kind of
// failure it was, not the backends' addresses and ports.
func TestBadGatewayHidesBackendAddresses(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there: connection refused
	g := newRig(t, func(cfg *Config, _ *Deps) {
		cfg.Backends = []BackendConfig{{Name: "gone", URL: "http://" + addr, Models: []string{"m1"}}}
		cfg.Retries = 0
	})
	st, _, body := g.call("POST", "/v1/chat/completions", chat("m1", "sys", "q"))
	if st != http.StatusBadGateway || !strings.Contains(body, "connection refused") {
		t.Fatalf("%d %s, want a 502 saying connection refused", st, body)
	}
	_, port, _ := net.SplitHostPort(addr)
	if strings.Contains(body, addr) || strings.Contains(body, ":"+port) {
		t.Fatalf("the answer names the backend's address: %s", body)
	}
}

// A backend that goes silent in the middle of a streamed answer (socket
// open) ends the answer after backend_stream_idle_timeout instead of
// holding the client as long as it stays silent; one that keeps sending,
// however long, is never cut.
func TestSilentStreamEndsAfterIdleTimeout(t *testing.T) {
	var silent atomic.Bool
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		rc := http.NewResponseController(w)
		for i := 0; i < 40; i++ { // 40 events 40 ms apart: longer than the timeout in all
			fmt.Fprintf(w, "data: {\"i\":%d}\n\n", i)
			_ = rc.Flush()
			time.Sleep(40 * time.Millisecond)
		}
		if silent.Load() {
			<-r.Context().Done() // silent, connection open
			return
		}
		fmt.Fprint(w, "data: [DONE]\n\n")
	}))
	t.Cleanup(be.Close)
	g := newRig(t, func(cfg *Config, _ *Deps) {
		cfg.Backends = []BackendConfig{{Name: "a", URL: be.URL, Models: []string{"m1"}}}
		cfg.BackendStreamIdleTimeout = time.Second // a busy machine may delay an event by far less
	})
	stream := `{"model":"m1","stream":true,"messages":[{"role":"user","content":"hi"}]}`
	if st, _, body := g.call("POST", "/v1/chat/completions", stream); st != 200 || !strings.Contains(body, "[DONE]") {
		t.Fatalf("a steady stream longer than the timeout: %d, done %v", st, strings.Contains(body, "[DONE]"))
	}
	silent.Store(true)
	done := make(chan string, 1)
	go func() { _, _, body := g.call("POST", "/v1/chat/completions", stream); done <- body }()
	select {
	case body := <-done:
		if !strings.Contains(body, `"i":39`) || strings.Contains(body, "[DONE]") {
			t.Fatalf("the answer cut off at the silence should hold every event sent: %q", body)
		}
	case <-time.After(30 * time.Second):
		be.CloseClientConnections() // or the servers' cleanup waits for the held request
		t.Fatal("a backend silent mid-stream held the client")
	}
}
