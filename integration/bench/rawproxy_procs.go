package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/kvmesh/kvmesh/integration/ports"
)

// A proxy under test in the raw-proxy comparison: something listening on a
// loopback port that forwards to the backends.
type proxyProc struct {
	name string
	url  string
	// spread, when set, are URLs the load generator uses in turn instead
	// of url (the direct arm: the backends themselves).
	spread []string
	cmd    *exec.Cmd // nil for in-process proxies
	stop   func() error
	log    string // where the process's output went
}

// Close stops the proxy.
func (p *proxyProc) Close() error {
	if p.stop != nil {
		return p.stop()
	}
	return nil
}

// cpuSeconds returns the user+system CPU time the proxy's process (and its
// reaped children) used so far, or -1 when unknown (in-process, or not
// Linux).
func (p *proxyProc) cpuSeconds() float64 {
	if p.cmd == nil || p.cmd.Process == nil {
		return -1
	}
	return processCPU(p.cmd.Process.Pid)
}

// processCPU reads utime+stime+cutime+cstime of pid and of its direct
// children (nginx's workers) from /proc, in seconds; -1 if unavailable.
func processCPU(pid int) float64 {
	total := procStatCPU(pid)
	if total < 0 {
		return -1
	}
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid)); err == nil {
		for _, f := range strings.Fields(string(b)) {
			if c, err := strconv.Atoi(f); err == nil {
				if v := procStatCPU(c); v > 0 {
					total += v
				}
			}
		}
	}
	return total
}

const clockTicks = 100 // USER_HZ on every Linux this runs on

func procStatCPU(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return -1
	}
	// Fields after the command name (which may contain spaces) in ")".
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return -1
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 15 {
		return -1
	}
	var ticks float64
	for _, k := range []int{11, 12, 13, 14} { // utime stime cutime cstime (fields 14-17)
		v, err := strconv.ParseFloat(f[k], 64)
		if err != nil {
			return -1
		}
		ticks += v
	}
	return ticks / clockTicks
}

// freePort returns a loopback port that was free a moment ago (a proxy
// process needs a port number in its configuration), outside the
// ephemeral range (see package ports).
func freePort() (int, error) {
	addr, err := ports.Free(ports.TCP)
	if err != nil {
		return 0, err
	}
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(p)
}

// hostPorts strips the scheme from backend URLs.
func hostPorts(urls []string) []string {
	out := make([]string, len(urls))
	for i, u := range urls {
		out[i] = strings.TrimPrefix(strings.TrimPrefix(u, "http://"), "https://")
	}
	return out
}

// NginxConfig renders an nginx configuration that proxies 127.0.0.1:port
// to backends (host:port) round robin, with upstream keep-alive and
// without response buffering (streams pass through), every path under dir.
func NginxConfig(dir string, port int, backends []string, asRoot bool) string {
	var b strings.Builder
	if asRoot {
		b.WriteString("user root;\n") // workers must reach the temp directories made by root
	}
	fmt.Fprintf(&b, `daemon off;
master_process on;
worker_processes 2;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log warn;
events { worker_connections 4096; }
http {
    access_log off;
    client_body_temp_path %[1]s/body;
    proxy_temp_path %[1]s/proxy;
    fastcgi_temp_path %[1]s/fastcgi;
    uwsgi_temp_path %[1]s/uwsgi;
    scgi_temp_path %[1]s/scgi;
    upstream backends {
`, dir)
	for _, h := range backends {
		fmt.Fprintf(&b, "        server %s;\n", h)
	}
	fmt.Fprintf(&b, `        keepalive 256;
    }
    server {
        listen 127.0.0.1:%d;
        client_max_body_size 64m;
        client_body_buffer_size 1m;
        location / {
            proxy_pass http://backends;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
        }
    }
}
`, port)
	return b.String()
}

// CaddyConfig renders a Caddyfile that proxies 127.0.0.1:port to backends
// round robin, flushing immediately (streams pass through), without the
// admin endpoint, automatic HTTPS or logs.
func CaddyConfig(port int, backends []string) string {
	return fmt.Sprintf(`{
	admin off
	auto_https off
	log {
		output discard
	}
}
http://127.0.0.1:%d {
	reverse_proxy %s {
		lb_policy round_robin
		flush_interval -1
	}
}
`, port, strings.Join(backends, " "))
}

// startProcess starts name with args in dir, output to a log file there,
// and waits until url+health answers 200 (or 10 s pass).
func startProcess(ctx context.Context, name, dir, url, health string, env []string, bin string, args ...string) (*proxyProc, error) {
	logPath := filepath.Join(dir, name+".log")
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // its own group: stopped with its workers
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	// exited is closed when the process is gone (closed, not sent on, so
	// that every waiter sees it); waitErr is then its exit status.
	exited := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); logf.Close(); close(exited) }()
	p := &proxyProc{name: name, url: url, cmd: cmd, log: logPath}
	p.stop = func() error {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-exited
		}
		return nil
	}
	if err := waitHealthy(ctx, url+health, exited, func() error { return waitErr }); err != nil {
		p.Close()
		out, _ := os.ReadFile(logPath)
		return nil, fmt.Errorf("%s did not come up: %w; its log:\n%s", name, err, tail(out, 2000))
	}
	return p, nil
}

// waitHealthy polls url until it answers 200. exited, if not nil, is
// closed when the process serving url has ended, with status() its reason.
func waitHealthy(ctx context.Context, url string, exited <-chan struct{}, status func() error) error {
	c := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			return fmt.Errorf("exited: %v", status())
		case <-ctx.Done():
			return ctx.Err()
		default:
		}
		if resp, err := c.Get(url); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return errors.New("no healthy answer within 10 s")
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// startNginx runs nginx (found on PATH or in /usr/sbin) in front of backends.
func startNginx(ctx context.Context, dir string, backends []string) (*proxyProc, error) {
	bin, err := lookBin("nginx")
	if err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	conf := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(conf, []byte(NginxConfig(dir, port, hostPorts(backends), os.Geteuid() == 0)), 0o644); err != nil {
		return nil, err
	}
	return startProcess(ctx, "nginx", dir, fmt.Sprintf("http://127.0.0.1:%d", port), "/health", nil, bin, "-e", filepath.Join(dir, "error.log"), "-p", dir, "-c", conf)
}

// startCaddy runs caddy in front of backends.
func startCaddy(ctx context.Context, dir string, backends []string) (*proxyProc, error) {
	bin, err := lookBin("caddy")
	if err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	conf := filepath.Join(dir, "Caddyfile")
	if err := os.WriteFile(conf, []byte(CaddyConfig(port, hostPorts(backends))), 0o644); err != nil {
		return nil, err
	}
	env := []string{"HOME=" + dir, "XDG_DATA_HOME=" + dir, "XDG_CONFIG_HOME=" + dir}
	return startProcess(ctx, "caddy", dir, fmt.Sprintf("http://127.0.0.1:%d", port), "/health", env, bin, "run", "--config", conf, "--adapter", "caddyfile")
}

// RouterCommand returns the command that runs a kvmesh router process
// listening on listen in front of backends with policy.
type RouterCommand func(listen string, backends []string, policy string) (bin string, args []string)

// startRouterProcess runs a kvmesh router as its own process.
func startRouterProcess(ctx context.Context, dir string, backends []string, policy string, command RouterCommand) (*proxyProc, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	listen := fmt.Sprintf("127.0.0.1:%d", port)
	bin, args := command(listen, backends, policy)
	return startProcess(ctx, "kvmesh-"+policy, dir, "http://"+listen, "/readyz", nil, bin, args...)
}

// lookBin finds a program on PATH or in the sbin directories a non-root
// PATH may lack.
func lookBin(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, d := range []string{"/usr/sbin", "/sbin", "/usr/local/sbin"} {
		p := filepath.Join(d, name)
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s is not installed (Debian: apt-get install -y nginx-light caddy)", name)
}
