package bench

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The comparison machinery with the proxies every machine has: direct and
// an in-process kvmesh router. nginx and Caddy are exercised by
// `kvmesh-bench rawproxy`, not by the tests.
func TestRawProxyDirectAndKVMesh(t *testing.T) {
	cfg := DefaultRawProxyConfig()
	cfg.Proxies = []string{ProxyDirect, ProxyKVMesh, "haproxy"}
	cfg.Backends, cfg.Concurrency, cfg.Repeats = 2, 4, 2
	cfg.Duration, cfg.Warmup = 300*time.Millisecond, 50*time.Millisecond
	cfg.PromptWords = 64
	rep, err := RunRawProxy(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(rep.Skipped["haproxy"], "unknown proxy") {
		t.Errorf("an unknown proxy was not skipped with a reason: %v", rep.Skipped)
	}
	if len(rep.Runs) != 4 || len(rep.Summary) != 2 {
		t.Fatalf("%d runs, %d summaries", len(rep.Runs), len(rep.Summary))
	}
	// Order alternates: the second repeat starts with the other proxy.
	if rep.Runs[0].Proxy == rep.Runs[2].Proxy {
		t.Errorf("both repeats started with %s", rep.Runs[0].Proxy)
	}
	for _, r := range rep.Runs {
		if r.Requests < 10 || r.Errors != 0 || r.RPS <= 0 || r.P50 <= 0 || r.P99 < r.P50 {
			t.Errorf("run %+v", r)
		}
		if r.Proxy == ProxyDirect && (r.AddedP50 != 0 || r.AddedP99 != 0) {
			t.Errorf("direct adds latency to itself: %+v", r)
		}
	}
	dir := t.TempDir()
	if err := rep.WriteDir(dir); err != nil {
		t.Fatal(err)
	}
	md, _ := os.ReadFile(filepath.Join(dir, "rawproxy.md"))
	for _, want := range []string{"| direct |", "| kvmesh |", "haproxy was skipped", "rawproxy_rps.svg"} {
		if !bytes.Contains(md, []byte(want)) {
			t.Errorf("rawproxy.md lacks %q:\n%s", want, md)
		}
	}
}

func TestProxyConfigs(t *testing.T) {
	n := NginxConfig("/tmp/x", 8080, []string{"127.0.0.1:1", "127.0.0.1:2"}, true)
	for _, want := range []string{"user root;", "daemon off;", "listen 127.0.0.1:8080;", "server 127.0.0.1:1;", "server 127.0.0.1:2;",
		"proxy_buffering off;", "keepalive 256;", "pid /tmp/x/nginx.pid;", `proxy_set_header Connection "";`} {
		if !strings.Contains(n, want) {
			t.Errorf("nginx config lacks %q:\n%s", want, n)
		}
	}
	if strings.Contains(NginxConfig("/tmp/x", 1, nil, false), "user root") {
		t.Error("nginx config runs workers as root without being root")
	}
	c := CaddyConfig(9090, []string{"127.0.0.1:1", "127.0.0.1:2"})
	for _, want := range []string{"http://127.0.0.1:9090 {", "reverse_proxy 127.0.0.1:1 127.0.0.1:2 {", "lb_policy round_robin",
		"flush_interval -1", "admin off", "auto_https off"} {
		if !strings.Contains(c, want) {
			t.Errorf("Caddyfile lacks %q:\n%s", want, c)
		}
	}
}

func TestProcStatCPU(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc")
	}
	if v := processCPU(os.Getpid()); v < 0 {
		t.Errorf("CPU of this process = %v", v)
	}
	if v := procStatCPU(1 << 30); v != -1 {
		t.Errorf("CPU of a missing process = %v, want -1", v)
	}
}

// A proxy process that dies at start is reported, not waited for forever.
func TestStartProcessThatExits(t *testing.T) {
	sh, err := lookBin("sh")
	if err != nil {
		t.Skip("no sh")
	}
	port, _ := freePort()
	// Noticed through the exit, not by waiting out the health check (whose
	// error says "no healthy answer"): no clock needed.
	_, err = startProcess(context.Background(), "failing", t.TempDir(), fmt.Sprintf("http://127.0.0.1:%d", port), "/health", nil, sh, "-c", "echo bad config >&2; exit 3")
	if err == nil || !strings.Contains(err.Error(), "exited") || !strings.Contains(err.Error(), "bad config") {
		t.Errorf("err = %v, want the exit and the log", err)
	}
}
