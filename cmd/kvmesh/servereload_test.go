package main

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/kvmesh/kvmesh/router"
)

// A SIGHUP reloads the backends only in the reload window; before it
// (start-up) and after it (shutdown) it is logged and ignored, and the
// router is never touched after the window closed.
func TestReloadHandlerWindow(t *testing.T) {
	var mu sync.Mutex
	var applied int
	rt := setterFunc(func([]router.BackendConfig) error { mu.Lock(); applied++; mu.Unlock(); return nil })
	reloaded := func() int { mu.Lock(); defer mu.Unlock(); return applied }
	cfg := DefaultServeConfig()
	cfg.reload = func() (*ServeConfig, error) {
		nc := DefaultServeConfig()
		nc.Router.Backends = []router.BackendConfig{{Name: "x", URL: "http://x:1"}}
		return &nc, nil
	}
	var logs syncBuffer
	hup := make(chan os.Signal) // unbuffered: a send returns once the handler took it
	h, stop := handleReloads(hup, &cfg, zerolog.New(&logs))
	defer stop()
	handled := func(what string, n int) {
		t.Helper()
		hup <- syscall.SIGHUP
		eventually(t, what, func() bool { return strings.Count(logs.String(), "\n") == n })
	}

	handled("a SIGHUP while starting", 1)
	if !strings.Contains(logs.String(), "reload ignored: starting") || reloaded() != 0 {
		t.Fatalf("while starting: %d reloads, log %s", reloaded(), logs.String())
	}
	h.open(rt)
	handled("a SIGHUP while serving", 2)
	if reloaded() != 1 {
		t.Fatalf("while serving: %d reloads, log %s", reloaded(), logs.String())
	}
	h.close()
	handled("a SIGHUP while stopping", 3)
	if !strings.Contains(logs.String(), "reload ignored: stopping") || reloaded() != 1 {
		t.Fatalf("while stopping: %d reloads, log %s", reloaded(), logs.String())
	}
	stop()
	select {
	case hup <- syscall.SIGHUP:
		t.Fatal("a signal was handled after stop")
	default:
	}
}

// childServeArgs, set in a child's environment, makes TestServeCommandChild
// run `kvmesh serve` with these (tab-separated) arguments.
const childServeArgs = "KVMESH_TEST_CHILD_SERVE_ARGS"

// TestServeCommandChild is the child process of the tests that signal a
// whole `kvmesh serve` (the test binary run again): it exits with serve's
// status.
func TestServeCommandChild(t *testing.T) {
	args := os.Getenv(childServeArgs)
	if args == "" {
		t.Skip("only run as a child process")
	}
	os.Exit(run(append([]string{"serve"}, strings.Split(args, "\t")...), io.Discard, os.Stderr))
}

// childLog collects a child's stderr, line by line.
type childLog struct {
	mu    sync.Mutex
	lines []string
	eof   chan struct{}
}

func readChildLog(r io.Reader) *childLog {
	c := &childLog{eof: make(chan struct{})}
	go func() {
		defer close(c.eof)
		sc := bufio.NewScanner(r)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			c.mu.Lock()
			c.lines = append(c.lines, sc.Text())
			c.mu.Unlock()
		}
	}()
	return c
}

// await returns the first line containing s, or "" if the child's stderr
// closed (it exited) without one.
func (c *childLog) await(t *testing.T, s string) string {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
		eof := false
		select {
		case <-c.eof: // every line is in c.lines
			eof = true
		default:
		}
		c.mu.Lock()
		for _, l := range c.lines {
			if strings.Contains(l, s) {
				c.mu.Unlock()
				return l
			}
		}
		c.mu.Unlock()
		if eof {
			return ""
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %q in the child's log:\n%s", s, c)
		}
	}
}

func (c *childLog) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return strings.Join(c.lines, "\n")
}

// A SIGHUP that comes while serve stops, after the reload window closed
// (here: while the last spans are flushed, held by the collector), is
// ignored: the process still exits 0 once it has stopped, instead of
// being killed by the signal.
func TestServeCommandIgnoresSIGHUPWhileStopping(t *testing.T) {
	be := fakeBackend(t, 0)
	var stopping atomic.Bool
	exporting, release := make(chan struct{}), make(chan struct{})
	var exportOnce, releaseOnce sync.Once
	defer releaseOnce.Do(func() { close(release) })
	col := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if stopping.Load() {
			exportOnce.Do(func() { close(exporting) })
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	defer col.Close()

	args := []string{"--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--node-name", "t1", "--drain-delay", "0s",
		"--log-format", "json", "--backends", "b1=" + be.URL, "--otlp-endpoint", col.URL}
	cmd := exec.Command(os.Args[0], "-test.run=^TestServeCommandChild$")
	cmd.Env = append(os.Environ(), childServeArgs+"="+strings.Join(args, "\t"),
		"OTEL_BSP_SCHEDULE_DELAY=3600000") // the spans wait for the flush at shutdown
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	logs := readChildLog(stderr)
	exited := false
	defer func() {
		if !exited {
			cmd.Process.Kill()
			<-logs.eof
			cmd.Wait()
		}
	}()
	signal := func(sig os.Signal) {
		t.Helper()
		if err := cmd.Process.Signal(sig); err != nil {
			t.Fatal(err)
		}
	}

	line := logs.await(t, "kvmesh serving")
	var started struct{ API string }
	if err := json.Unmarshal([]byte(line), &started); err != nil || started.API == "" {
		t.Fatalf("the child did not start (%v):\n%s", err, logs)
	}
	resp, err := http.Post("http://"+started.API+"/v1/chat/completions", "application/json", strings.NewReader(chatBody))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()

	stopping.Store(true)
	signal(syscall.SIGTERM)
	select {
	case <-exporting:
	case <-logs.eof:
		t.Fatalf("the child exited before flushing its spans:\n%s", logs)
	case <-time.After(time.Minute):
		t.Fatalf("the child did not flush its spans:\n%s", logs)
	}
	signal(syscall.SIGHUP)
	ignored := logs.await(t, "reload ignored: stopping")
	releaseOnce.Do(func() { close(release) })
	<-logs.eof
	err = cmd.Wait()
	exited = true
	if err != nil {
		t.Fatalf("the child exited with %v after a SIGHUP while stopping:\n%s", err, logs)
	}
	if ignored == "" {
		t.Errorf("the SIGHUP was not logged as ignored:\n%s", logs)
	}
}
