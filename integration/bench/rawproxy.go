package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvmesh/kvmesh/router"
	"github.com/kvmesh/kvmesh/tree"
)

// The raw-proxy comparison: kvmesh as a plain reverse proxy against nginx
// and Caddy in front of the same trivial backends, driven by the same
// closed-loop load generator, in alternating order. It measures what the
// proxy itself costs: requests per second at a fixed concurrency, latency
// added over going straight to a backend, and CPU per request.

// Proxy names RawProxyConfig.Proxies accepts.
const (
	ProxyDirect = "direct" // no proxy: the baseline for added latency
	ProxyKVMesh = "kvmesh"
	ProxyNginx  = "nginx"
	ProxyCaddy  = "caddy"
)

// RawProxyConfig describes a raw-proxy comparison.
type RawProxyConfig struct {
	// Backends is the number of trivial backends. Default 4.
	Backends int
	// Proxies to measure. Default direct, kvmesh, nginx, caddy.
	Proxies []string
	// KVMeshPolicy is the router policy of the kvmesh proxy. Default
	// round_robin, like the other proxies: the figures are the proxy path
	// (parse, render, hash, forward, stream back), not cache-aware choices.
	KVMeshPolicy string
	// RouterCommand runs kvmesh as its own process, as nginx and Caddy run;
	// nil runs it inside this process (it then shares the CPUs with the
	// load generator, which flatters no one).
	RouterCommand RouterCommand
	// Concurrency is the number of closed-loop clients. Default 32.
	Concurrency int
	// Duration and Warmup are the measured and the discarded time per
	// proxy per repeat. Defaults 10 s and 1 s.
	Duration, Warmup time.Duration
	// Repeats: every proxy runs this often, order rotated. Default 3.
	Repeats int
	// PromptWords is the prompt length of the request body. Default 512
	// words (~3 KB): a short chat turn.
	PromptWords int
	// Dir holds the proxies' configurations and logs; "" = a temporary
	// directory, removed afterwards.
	Dir string
	// Progress shows progress (nil = none).
	Progress *Progress
}

// DefaultRawProxyConfig returns the defaults documented on RawProxyConfig.
func DefaultRawProxyConfig() RawProxyConfig {
	return RawProxyConfig{
		Backends:     4,
		Proxies:      []string{ProxyDirect, ProxyKVMesh, ProxyNginx, ProxyCaddy},
		KVMeshPolicy: router.PolicyRoundRobin,
		Concurrency:  32,
		Duration:     10 * time.Second,
		Warmup:       time.Second,
		Repeats:      3,
		PromptWords:  512,
	}
}

// RawProxyRun is one proxy measured once.
type RawProxyRun struct {
	Proxy    string  `json:"proxy"`
	Repeat   int     `json:"repeat"`
	Position int     `json:"position"`
	Requests int     `json:"requests"`
	Errors   int     `json:"errors"`
	RPS      float64 `json:"requests_per_s"`
	// Latencies of whole requests, in milliseconds of wall time.
	P50  float64 `json:"p50_ms"`
	P90  float64 `json:"p90_ms"`
	P99  float64 `json:"p99_ms"`
	Mean float64 `json:"mean_ms"`
	// AddedP50 and AddedP99 are P50 and P99 minus direct's in the same
	// repeat (0 without a direct run).
	AddedP50 float64 `json:"added_p50_ms"`
	AddedP99 float64 `json:"added_p99_ms"`
	// CPUPer1k is the proxy process's CPU time per 1,000 requests, in ms
	// (-1 when unknown: in-process or not Linux).
	CPUPer1k float64 `json:"cpu_ms_per_1k"`
}

// RawProxySummary is one proxy over the repeats.
type RawProxySummary struct {
	Proxy    string `json:"proxy"`
	RPS      Spread `json:"requests_per_s"`
	P50      Spread `json:"p50_ms"`
	P99      Spread `json:"p99_ms"`
	AddedP50 Spread `json:"added_p50_ms"`
	AddedP99 Spread `json:"added_p99_ms"`
	CPUPer1k Spread `json:"cpu_ms_per_1k"`
	Errors   Spread `json:"errors"`
}

// RawProxyReport is a whole comparison.
type RawProxyReport struct {
	Command string            `json:"command"`
	Started time.Time         `json:"started"`
	Setup   string            `json:"setup"`
	Skipped map[string]string `json:"skipped,omitempty"` // proxy -> why it could not run
	Runs    []RawProxyRun     `json:"runs"`
	Summary []RawProxySummary `json:"summary"`
}

// RunRawProxy runs the comparison. Proxies that cannot start (not
// installed) are skipped with the reason in the report.
func RunRawProxy(ctx context.Context, cfg RawProxyConfig) (*RawProxyReport, error) {
	if cfg.Backends < 1 || cfg.Concurrency < 1 || cfg.Repeats < 1 || cfg.Duration <= 0 || len(cfg.Proxies) == 0 {
		return nil, errors.New("bench: raw proxy: Backends, Concurrency, Repeats, Duration and Proxies must be set (see DefaultRawProxyConfig)")
	}
	dir := cfg.Dir
	if dir == "" {
		d, err := os.MkdirTemp("", "kvmesh-rawproxy-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	backs, err := startFakeBackends(cfg.Backends)
	if err != nil {
		return nil, err
	}
	defer backs.Close()

	rep := &RawProxyReport{Started: time.Now(), Skipped: map[string]string{},
		Setup: fmt.Sprintf("%d trivial streaming backends, %d closed-loop clients, %v measured after %v warm-up per proxy and repeat, %d repeats, %d-word prompts, kvmesh policy %s",
			cfg.Backends, cfg.Concurrency, cfg.Duration, cfg.Warmup, cfg.Repeats, cfg.PromptWords, cfg.KVMeshPolicy)}
	var procs []*proxyProc
	defer func() {
		for _, p := range procs {
			p.Close()
		}
	}()
	for _, name := range cfg.Proxies {
		p, err := startProxy(ctx, name, filepath.Join(dir, name), backs.urls, &cfg)
		if err != nil {
			rep.Skipped[name] = err.Error()
			continue
		}
		procs = append(procs, p)
	}
	if len(procs) == 0 {
		return rep, errors.New("bench: raw proxy: no proxy could start")
	}

	body := chatBody(words("w", cfg.PromptWords), "hello", 8)
	if cfg.Progress != nil {
		cfg.Progress.Expect(cfg.Repeats * len(procs) * int((cfg.Duration+cfg.Warmup)/(100*time.Millisecond)))
	}
	for r := range cfg.Repeats {
		var direct *RawProxyRun
		var runs []RawProxyRun
		for pos := range procs {
			p := procs[(pos+r)%len(procs)]
			run := measureProxy(ctx, p, body, &cfg, fmt.Sprintf("%-8s rep %d/%d", p.name, r+1, cfg.Repeats))
			if ctx.Err() != nil {
				return rep, ctx.Err()
			}
			run.Repeat, run.Position = r, pos
			runs = append(runs, run)
		}
		for i := range runs {
			if runs[i].Proxy == ProxyDirect {
				direct = &runs[i]
			}
		}
		for i := range runs {
			if direct != nil {
				runs[i].AddedP50, runs[i].AddedP99 = runs[i].P50-direct.P50, runs[i].P99-direct.P99
			}
		}
		rep.Runs = append(rep.Runs, runs...)
	}
	for _, p := range procs {
		rep.Summary = append(rep.Summary, summarizeProxy(p.name, rep.Runs))
	}
	return rep, nil
}

func summarizeProxy(name string, runs []RawProxyRun) RawProxySummary {
	var rps, p50, p99, a50, a99, cpu, errs []float64
	for _, r := range runs {
		if r.Proxy != name {
			continue
		}
		rps, p50, p99 = append(rps, r.RPS), append(p50, r.P50), append(p99, r.P99)
		a50, a99, errs = append(a50, r.AddedP50), append(a99, r.AddedP99), append(errs, float64(r.Errors))
		if r.CPUPer1k >= 0 {
			cpu = append(cpu, r.CPUPer1k)
		}
	}
	return RawProxySummary{Proxy: name, RPS: SpreadOf(rps), P50: SpreadOf(p50), P99: SpreadOf(p99),
		AddedP50: SpreadOf(a50), AddedP99: SpreadOf(a99), CPUPer1k: SpreadOf(cpu), Errors: SpreadOf(errs)}
}

// startProxy starts the named proxy in front of backends.
func startProxy(ctx context.Context, name, dir string, backends []string, cfg *RawProxyConfig) (*proxyProc, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	switch name {
	case ProxyDirect:
		// The load generator spreads over the backends itself, round robin
		// per request like the proxies.
		return &proxyProc{name: name, url: backends[0], spread: backends}, nil
	case ProxyNginx:
		return startNginx(ctx, dir, backends)
	case ProxyCaddy:
		return startCaddy(ctx, dir, backends)
	case ProxyKVMesh:
		if cfg.RouterCommand != nil {
			p, err := startRouterProcess(ctx, dir, backends, cfg.KVMeshPolicy, cfg.RouterCommand)
			if p != nil {
				p.name = ProxyKVMesh
			}
			return p, err
		}
		return startInProcessRouter(backends, cfg.KVMeshPolicy)
	}
	return nil, fmt.Errorf("unknown proxy %q (want %s, %s, %s or %s)", name, ProxyDirect, ProxyKVMesh, ProxyNginx, ProxyCaddy)
}

// startInProcessRouter serves a kvmesh router on a loopback port.
func startInProcessRouter(backends []string, policy string) (*proxyProc, error) {
	rc := router.DefaultConfig()
	rc.Policy = policy
	for i, u := range backends {
		rc.Backends = append(rc.Backends, router.BackendConfig{Name: BackendName(i), URL: u, Models: []string{"kvmesh-sim"}})
	}
	ix, err := tree.New(tree.DefaultConfig())
	if err != nil {
		return nil, err
	}
	reg := prometheus.NewRegistry()
	rt, err := router.New(rc, router.Deps{Index: ix, Registerer: reg})
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		rt.Close()
		return nil, err
	}
	srv := &http.Server{Handler: NodeMux(rt, rt.AdminHandler(), reg), ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	return &proxyProc{name: ProxyKVMesh, url: "http://" + ln.Addr().String(), stop: func() error {
		srv.Close()
		return rt.Close()
	}}, nil
}

// measureProxy drives p with cfg.Concurrency closed-loop clients for the
// warm-up (discarded) and the measured duration.
func measureProxy(ctx context.Context, p *proxyProc, body []byte, cfg *RawProxyConfig, label string) RawProxyRun {
	urls := []string{p.url + "/v1/chat/completions"}
	if len(p.spread) > 0 {
		urls = nil
		for _, u := range p.spread {
			urls = append(urls, u+"/v1/chat/completions")
		}
	}
	client := newHTTPClient(cfg.Concurrency)
	defer client.CloseIdleConnections()
	render := func(b []byte) []byte { return append(b, body...) }

	ticks := int((cfg.Duration + cfg.Warmup) / (100 * time.Millisecond))
	cfg.Progress.Begin(label, ticks)
	stopTicks := make(chan struct{})
	go func() {
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for range ticks {
			select {
			case <-t.C:
				cfg.Progress.Add()
			case <-stopTicks:
				return
			}
		}
	}()

	start := time.Now()
	measureFrom, end := start.Add(cfg.Warmup), start.Add(cfg.Warmup+cfg.Duration)
	var (
		mu     sync.Mutex
		lat    []float64
		errs   int
		next   atomic.Uint64
		wg     sync.WaitGroup
		cpu0   = -1.0
		cpu0At sync.Once
	)
	for range cfg.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []float64
			myErrs := 0
			for ctx.Err() == nil {
				now := time.Now()
				if now.After(end) {
					break
				}
				if !now.Before(measureFrom) {
					cpu0At.Do(func() { cpu0 = p.cpuSeconds() })
				}
				var s Sample
				send(ctx, client, urls[next.Add(1)%uint64(len(urls))], render, nil, &s)
				if now.Before(measureFrom) {
					continue
				}
				if s.OK() {
					mine = append(mine, float64(s.E2E)/float64(time.Millisecond))
				} else {
					myErrs++
				}
			}
			mu.Lock()
			lat = append(lat, mine...)
			errs += myErrs
			mu.Unlock()
		}()
	}
	wg.Wait()
	close(stopTicks)
	cfg.Progress.End()
	run := RawProxyRun{Proxy: p.name, Requests: len(lat), Errors: errs, CPUPer1k: -1}
	elapsed := time.Since(measureFrom).Seconds()
	if elapsed > 0 {
		run.RPS = float64(len(lat)) / elapsed
	}
	slices.Sort(lat)
	if len(lat) > 0 {
		run.P50, run.P90, run.P99, run.Mean = Percentile(lat, 50), Percentile(lat, 90), Percentile(lat, 99), Mean(lat)
	}
	if cpu1 := p.cpuSeconds(); cpu0 >= 0 && cpu1 >= cpu0 && len(lat) > 0 {
		run.CPUPer1k = (cpu1 - cpu0) * 1000 / float64(len(lat)) * 1000
	}
	return run
}

// fakeBackends are trivial OpenAI-compatible servers: every chat request
// gets a short stream (role, one token, usage, [DONE]) at once.
type fakeBackends struct {
	urls []string
	srvs []*http.Server
}

func startFakeBackends(n int) (*fakeBackends, error) {
	fb := &fakeBackends{}
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			fb.Close()
			return nil, err
		}
		srv := &http.Server{Handler: http.HandlerFunc(serveFake), ReadHeaderTimeout: 10 * time.Second}
		go srv.Serve(ln)
		fb.srvs = append(fb.srvs, srv)
		fb.urls = append(fb.urls, "http://"+ln.Addr().String())
	}
	return fb, nil
}

const fakeStream = `data: {"id":"f","object":"chat.completion.chunk","model":"kvmesh-sim","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}` + "\n\n" +
	`data: {"id":"f","object":"chat.completion.chunk","model":"kvmesh-sim","choices":[{"index":0,"delta":{"content":"ok"},"finish_reason":"length"}]}` + "\n\n" +
	`data: {"id":"f","object":"chat.completion.chunk","model":"kvmesh-sim","choices":[],"usage":{"prompt_tokens":520,"completion_tokens":1,"total_tokens":521,"prompt_tokens_details":{"cached_tokens":0}}}` + "\n\n" +
	"data: [DONE]\n\n"

func serveFake(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	switch {
	case r.URL.Path == "/health":
	case r.URL.Path == "/metrics":
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
	case r.URL.Path == "/v1/models":
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"object":"list","data":[{"id":"kvmesh-sim","object":"model"}]}`)
	case strings.HasSuffix(r.URL.Path, "/completions"):
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Cache-Control", "no-cache")
		io.WriteString(w, fakeStream)
	default:
		http.NotFound(w, r)
	}
}

func (fb *fakeBackends) Close() {
	for _, s := range fb.srvs {
		s.Close()
	}
}

// chatBody is a chat completion body with a system and a user message.
func chatBody(system, user string, maxTokens int) []byte {
	return fmt.Appendf(nil, `{"model":"kvmesh-sim","messages":[{"role":"system","content":%q},{"role":"user","content":%q}],"max_tokens":%d}`,
		system, user, maxTokens)
}

// words returns n distinct words starting with prefix.
func words(prefix string, n int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%s%d", prefix, i)
	}
	return b.String()
}
