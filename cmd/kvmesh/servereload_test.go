package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
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

// reloadMetric reads one of h's metrics: the counter of result, or the
// last-reload gauge when result is "".
func reloadMetric(t *testing.T, h *reloadHandler, result string) float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(h.collectors()...)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			switch {
			case result == "" && f.GetName() == "kvmesh_config_last_reload_successful":
				return m.GetGauge().GetValue()
			case result != "" && f.GetName() == "kvmesh_config_reloads_total" &&
				len(m.GetLabel()) == 1 && m.GetLabel()[0].GetValue() == result:
				return m.GetCounter().GetValue()
			}
		}
	}
	t.Fatalf("no metric for %q", result)
	return 0
}

// Every SIGHUP is counted by its result, and the gauge says whether the
// last reload applied the list: an operator whose config tool rewrote the
// file and signalled the nodes sees one refuse it without reading its log.
func TestReloadHandlerCountsResults(t *testing.T) {
	var fail atomic.Bool
	var partial atomic.Bool
	rt := setterFunc(func([]router.BackendConfig) error {
		if partial.Load() {
			return errors.New("backend x: changed entry not applied")
		}
		return nil
	})
	cfg := DefaultServeConfig()
	cfg.reload = func() (*ServeConfig, error) {
		if fail.Load() {
			return nil, errors.New("config kvmesh.yaml: line 4: router.bogus: unknown key")
		}
		nc := DefaultServeConfig()
		nc.Router.Backends = []router.BackendConfig{{Name: "x", URL: "http://x:1"}}
		return &nc, nil
	}
	hup := make(chan os.Signal) // unbuffered: a send returns once the handler took it
	h, stop := handleReloads(hup, &cfg, zerolog.Nop())
	defer stop()
	handled := func(what, result string, n float64) {
		t.Helper()
		hup <- syscall.SIGHUP
		eventually(t, what, func() bool { return reloadMetric(t, h, result) == n })
	}
	if got := reloadMetric(t, h, ""); got != 1 {
		t.Fatalf("before any reload: last_reload_successful %v, want 1", got)
	}
	handled("a SIGHUP while starting", reloadIgnored, 1)
	h.open(rt)
	fail.Store(true)
	handled("a reload of a broken file", reloadError, 1)
	if got := reloadMetric(t, h, ""); got != 0 {
		t.Fatalf("after a failed reload: last_reload_successful %v, want 0", got)
	}
	fail.Store(false)
	handled("a good reload", reloadOK, 1)
	if got := reloadMetric(t, h, ""); got != 1 {
		t.Fatalf("after a good reload: last_reload_successful %v, want 1", got)
	}
	partial.Store(true)
	handled("a partly applied reload", reloadPartial, 1)
	if got := reloadMetric(t, h, ""); got != 0 {
		t.Fatalf("after a partial reload: last_reload_successful %v, want 0", got)
	}
	if got := reloadMetric(t, h, reloadOK) + reloadMetric(t, h, reloadError); got != 2 {
		t.Fatalf("ok+error reloads %v, want 2", got)
	}
}

// A backend list given by --backends or KVMESH_BACKENDS replaces the
// file's, at start and at every SIGHUP alike: the operator who edits the
// file's list and sends SIGHUP must hear that it cannot take effect, at
// start and at the reload, not "backend list reloaded" alone.
func TestReloadWarnsWhenAFlagSetsTheBackends(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kvmesh.yaml")
	write := func(s string) {
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("router:\n  backends:\n    - {name: a, url: \"http://a:1\"}\n")
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		from string
	}{
		{"flag", []string{"--config", path, "--backends", "b=http://b:1"}, nil, "--backends"},
		{"environment", []string{"--config", path}, map[string]string{"KVMESH_BACKENDS": "b=http://b:1"}, "KVMESH_BACKENDS"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			write("router:\n  backends:\n    - {name: a, url: \"http://a:1\"}\n")
			cfg, err := loadServeConfig(tc.args, env(tc.env), io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			if w := strings.Join(cfg.warnings(), "\n"); !strings.Contains(w, "router.backends is replaced by "+tc.from) {
				t.Errorf("start-up warnings %q do not say that %s replaces the file's list", w, tc.from)
			}
			write("router:\n  backends:\n    - {name: c, url: \"http://c:1\"}\n")
			var got []router.BackendConfig
			rt := setterFunc(func(l []router.BackendConfig) error { got = l; return nil })
			var logs syncBuffer
			reloadBackends(cfg, rt, zerolog.New(&logs))
			if len(got) != 1 || got[0].Name != "b" {
				t.Fatalf("applied %v, want the list %s sets", got, tc.from)
			}
			if !strings.Contains(logs.String(), `"level":"warn"`) || !strings.Contains(logs.String(), "set by "+tc.from) {
				t.Errorf("the reload does not warn that %s sets the list: %s", tc.from, logs.String())
			}
		})
	}

	// With no file, the flag is the only list: no file to edit, no warning.
	noFile, err := loadServeConfig([]string{"--backends", "b=http://b:1"}, env(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	var noFileLogs syncBuffer
	reloadBackends(noFile, setterFunc(func([]router.BackendConfig) error { return nil }), zerolog.New(&noFileLogs))
	if strings.Contains(noFileLogs.String(), `"level":"warn"`) {
		t.Errorf("a reload without a config file warns about editing one: %s", noFileLogs.String())
	}

	// From the file: no such warning.
	write("router:\n  backends:\n    - {name: a, url: \"http://a:1\"}\n")
	cfg, err := loadServeConfig([]string{"--config", path}, env(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if w := cfg.warnings(); len(w) != 0 {
		t.Errorf("warnings with the file's list: %q", w)
	}
	var logs syncBuffer
	reloadBackends(cfg, setterFunc(func([]router.BackendConfig) error { return nil }), zerolog.New(&logs))
	if strings.Contains(logs.String(), `"level":"warn"`) {
		t.Errorf("a reload of the file's own list warns: %s", logs.String())
	}
}
