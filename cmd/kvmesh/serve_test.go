package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/kvmesh/kvmesh/crdt"
)

// fakeBackend answers chat completions after delay and serves /v1/models
// and /health like vLLM.
func fakeBackend(t *testing.T, delay time.Duration) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/health":
			w.WriteHeader(200)
		case "/v1/models":
			io.WriteString(w, `{"object":"list","data":[{"id":"m","object":"model"}]}`)
		case "/v1/chat/completions":
			io.Copy(io.Discard, r.Body)
			time.Sleep(delay)
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":1,"total_tokens":6}}`)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

func startServe(t *testing.T, args ...string) (serving, context.CancelFunc, <-chan error) {
	t.Helper()
	cfg, err := loadServeConfig(append([]string{"--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--node-name", "t1", "--drain-delay", "0s"}, args...), env(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan serving, 1)
	done := make(chan error, 1)
	go func() { done <- serve(ctx, cfg, zerolog.Nop(), ready) }()
	select {
	case s := <-ready:
		return s, cancel, done
	case err := <-done:
		cancel()
		t.Fatalf("serve: %v", err)
	case <-time.After(20 * time.Second):
		cancel()
		t.Fatal("serve did not start")
	}
	return serving{}, cancel, done
}

const chatBody = `{"model":"m","messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"Say hi."}]}`

func TestServeRoutesAndExplains(t *testing.T) {
	be := fakeBackend(t, 0)
	s, cancel, done := startServe(t, "--backends", "b1="+be.URL, "--shutdown-timeout", "5s")
	defer func() { cancel(); <-done }()

	resp, err := http.Post("http://"+s.API+"/v1/chat/completions", "application/json", strings.NewReader(chatBody))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), "chat.completion") {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	if h := resp.Header.Get("X-Kvmesh-Route"); !strings.Contains(h, "backend=b1") {
		t.Fatalf("route header %q", h)
	}
	// The admin listener has the metrics (router's and the index's) and the
	// probes; the API listener does not expose them.
	metrics := get(t, "http://"+s.Admin+"/metrics")
	for _, m := range []string{"kvmesh_index_claims", "kvmesh_router_", "go_goroutines"} {
		if !strings.Contains(metrics, m) {
			t.Errorf("/metrics lacks %s", m)
		}
	}
	if got := get(t, "http://"+s.Admin+"/healthz"); got == "" {
		t.Error("no /healthz")
	}
	if r, _ := http.Get("http://" + s.API + "/metrics"); r == nil || r.StatusCode != 404 {
		t.Error("API listener serves /metrics")
	}
}

// SIGTERM (here: the context) drains: the node turns unready at once, and a
// request in flight still completes.
func TestServeShutdownFinishesInFlight(t *testing.T) {
	// The backend holds the request until the node is draining: no sleep
	// guesses when the request has arrived or the shutdown has begun.
	arrived, release := make(chan struct{}), make(chan struct{})
	plain := fakeBackend(t, 0)
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/chat/completions" {
			close(arrived)
			<-release
		}
		plain.Config.Handler.ServeHTTP(w, r)
	}))
	t.Cleanup(be.Close)
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()
	s, cancel, done := startServe(t, "--backends", "b1="+be.URL, "--shutdown-timeout", "1m")
	result := make(chan int, 1)
	go func() {
		resp, err := http.Post("http://"+s.API+"/v1/chat/completions", "application/json", strings.NewReader(chatBody))
		if err != nil {
			result <- -1
			return
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		result <- resp.StatusCode
	}()
	<-arrived
	cancel()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		resp, err := http.Get("http://" + s.Admin + "/readyz")
		if err != nil {
			t.Fatalf("admin listener gone while a request is in flight: %v", err)
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusServiceUnavailable {
			break // draining, the request still held
		}
		if time.Now().After(deadline) {
			t.Fatal("/readyz did not fail after the shutdown began")
		}
	}
	close(release)
	if code := <-result; code != 200 {
		t.Fatalf("in-flight request got %d during shutdown", code)
	}
	if err := <-done; err != nil {
		t.Fatalf("serve returned %v", err)
	}
	if _, err := http.Post("http://"+s.API+"/v1/chat/completions", "application/json", strings.NewReader(chatBody)); err == nil {
		t.Fatal("API still accepts after shutdown")
	}
}

func get(t *testing.T, url string) string {
	t.Helper()
	_, body := getStatus(t, url)
	return body
}

// getStatus fetches url and returns the status and the body.
func getStatus(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// With a snapshot due every millisecond, the periodic writes run right up
// to the shutdown: they stop before the final one, which is whole (under
// -race, a periodic write beside the final one fails this test).
func TestServeFinalSnapshotAfterPeriodic(t *testing.T) {
	be := fakeBackend(t, 0)
	dir := t.TempDir()
	s, cancel, done := startServe(t, "--backends", "b1="+be.URL, "--state-dir", dir, "--state-interval", "1ms")
	stop := sync.OnceValue(func() error { cancel(); return <-done })
	defer stop()
	long := `{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("the quick brown fox jumps over the lazy dog ", 200) + `"}]}`
	resp, err := http.Post("http://"+s.API+"/v1/chat/completions", "application/json", strings.NewReader(long))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	// Periodic writes have happened, the request's claims in the last.
	eventually(t, "periodic snapshots", func() bool {
		m := get(t, "http://"+s.Admin+"/metrics")
		return !strings.Contains(m, "kvmesh_state_snapshot_writes_total{result=\"ok\"} 0\n") &&
			strings.Contains(m, "kvmesh_state_snapshot_claims ") && !strings.Contains(m, "kvmesh_state_snapshot_claims 0\n")
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(dir, stateFile))
	if err != nil {
		t.Fatal(err)
	}
	snap, err := crdt.ParseSnapshot(data)
	if err != nil || snap.Info.Claims == 0 {
		t.Fatalf("the final snapshot: %v, %d claims", err, snap.Info.Claims)
	}
}

// freeAddr returns a loopback address no listener holds right now.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// A start that fails late (here: the --kv-events-listen port is taken,
// after the node started its mesh membership) releases the API and admin
// ports and leaves the mesh gracefully.
func TestServeLateStartFailureCleansUp(t *testing.T) {
	certs := t.TempDir()
	if code := run([]string{"certs", "--dir", certs, "--nodes", "t1"}, io.Discard, io.Discard); code != 0 {
		t.Fatal("certs failed")
	}
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	be := fakeBackend(t, 0)
	api, admin := freeAddr(t), freeAddr(t)
	cfg, err := loadServeConfig([]string{"--listen", api, "--admin-listen", admin, "--node-name", "t1", "--backends", "b1=" + be.URL,
		"--mesh", "--dev", "--bind", "127.0.0.1:0", "--quic-listen", "127.0.0.1:0",
		"--tls-ca", filepath.Join(certs, "ca.pem"), "--tls-cert", filepath.Join(certs, "t1.pem"), "--tls-key", filepath.Join(certs, "t1-key.pem"),
		"--kv-events", "b1", "--kv-events-listen", "tcp://" + taken.Addr().String(), "--kv-events-model", "m"}, env(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	done := make(chan error, 1)
	go func() { done <- serve(context.Background(), cfg, newLogger(cfg.Log, &logs), nil) }()
	select {
	case err = <-done:
	case <-time.After(time.Minute):
		t.Fatal("serve did not fail")
	}
	if err == nil || !strings.Contains(err.Error(), "precise") {
		t.Fatalf("serve returned %v, want the precise listener's error", err)
	}
	for name, addr := range map[string]string{"API": api, "admin": admin} {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Errorf("the %s port is still held after the failed start: %v", name, err)
			continue
		}
		ln.Close()
	}
	if !strings.Contains(logs.String(), `"mesh: left"`) {
		t.Errorf("the node did not leave the mesh gracefully:\n%s", logs.String())
	}
}
