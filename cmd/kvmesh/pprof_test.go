package main

import (
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// Profiles are served on the admin listener only with --admin-pprof; off,
// the path says how to turn them on; the command line (which may hold the
// gossip key) is never served.
func TestAdminPprof(t *testing.T) {
	be := fakeBackend(t, 0)
	off, cancelOff, doneOff := startServe(t, "--backends", "b1="+be.URL)
	defer func() { cancelOff(); <-doneOff }()
	code, body := getStatus(t, "http://"+off.Admin+"/debug/pprof/goroutine?debug=1")
	var e struct {
		Error struct{ Code, Message string }
	}
	if err := json.Unmarshal([]byte(body), &e); code != http.StatusNotFound || err != nil || e.Error.Code != "pprof_off" || !strings.Contains(e.Error.Message, "--admin-pprof") {
		t.Errorf("profiling off: %d %s, want a JSON 404 pprof_off naming --admin-pprof", code, body)
	}

	on, cancelOn, doneOn := startServe(t, "--backends", "b1="+be.URL, "--admin-pprof")
	defer func() { cancelOn(); <-doneOn }()
	if code, body := getStatus(t, "http://"+on.Admin+"/debug/pprof/goroutine?debug=1"); code != http.StatusOK || !strings.Contains(body, "goroutine profile:") {
		t.Errorf("goroutine dump: %d %.200s", code, body)
	}
	if code, body := getStatus(t, "http://"+on.Admin+"/debug/pprof/"); code != http.StatusOK || !strings.Contains(body, "heap") {
		t.Errorf("pprof index: %d %.200s", code, body)
	}
	if code, body := getStatus(t, "http://"+on.Admin+"/debug/pprof/cmdline"); code != http.StatusNotFound || !strings.Contains(body, "not_served") {
		t.Errorf("cmdline served: %d %.200s", code, body)
	}
	for _, q := range []string{"profile?seconds=86400", "trace?seconds=0", "profile?seconds=x", "heap?seconds=86400", "allocs?seconds=-1"} {
		if code, body := getStatus(t, "http://"+on.Admin+"/debug/pprof/"+q); code != http.StatusBadRequest || !strings.Contains(body, "seconds must be") {
			t.Errorf("%s: %d %.200s, want a 400 naming the bound", q, code, body)
		}
	}
	if code, _ := getStatus(t, "http://"+on.API+"/debug/pprof/"); code == http.StatusOK {
		t.Error("the API listener serves profiles")
	}
}

// The admin listener cuts off a client that reads its answer too slowly
// (adminWriteTimeout), and a CPU profile longer than that timeout still
// completes: its ?seconds= extends the deadline. (A CPU profile cannot be
// taken while the test binary itself is profiled.)
func TestAdminWriteTimeout(t *testing.T) {
	old := adminWriteTimeout
	adminWriteTimeout = time.Second
	defer func() { adminWriteTimeout = old }()

	// A stalled reader: the handler's writes fail once the deadline passes
	// (without it they would block until the client went away).
	wrote := make(chan error, 1)
	chunk := make([]byte, 1<<20)
	srv := newAdminServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for {
			if _, err := w.Write(chunk); err != nil {
				wrote <- err
				return
			}
		}
	}), zerolog.Nop())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	defer srv.Close()
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-wrote:
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("write to a stalled reader: %v, want a deadline error", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("a write to a reader that never reads is still blocked after a minute")
	}

	// The profile runs 4 s and is written within the 3 s the timeout leaves
	// after them; without the extension its write would come after the
	// deadline and the client would get a cut connection.
	adminWriteTimeout = 3 * time.Second
	be := fakeBackend(t, 0)
	on, cancel, done := startServe(t, "--backends", "b1="+be.URL, "--admin-pprof")
	defer func() { cancel(); <-done }()
	if code, body := getStatus(t, "http://"+on.Admin+"/debug/pprof/profile?seconds=4"); code != http.StatusOK || len(body) == 0 {
		t.Errorf("a 4 s CPU profile under a 3 s write timeout: %d, %d bytes %.200q", code, len(body), body)
	}
}
