package router

import (
	"context"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/kvmesh/kvmesh/tree"
)

// newFakeBackendAt is newFakeBackend listening on addr (host:port).
func newFakeBackendAt(t *testing.T, name, addr string, models ...string) (*fakeBackend, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	if len(models) == 0 {
		models = []string{"m1"}
	}
	f := &fakeBackend{t: t, name: name, models: models}
	f.srv = httptest.NewUnstartedServer(http.HandlerFunc(f.serve))
	f.srv.Listener.Close()
	f.srv.Listener = ln
	f.srv.Start()
	t.Cleanup(f.srv.Close)
	return f, nil
}

// twoLoopbackBackends starts two fake backends on 127.0.0.2 and 127.0.0.3
// with the same port (A records carry no port).
func twoLoopbackBackends(t *testing.T) (a, b *fakeBackend, port int) {
	t.Helper()
	for try := 0; try < 20; try++ {
		fa, err := newFakeBackendAt(t, "a", "127.0.0.2:0")
		if err != nil {
			t.Skipf("no second loopback address: %v", err)
		}
		port = fa.srv.Listener.Addr().(*net.TCPAddr).Port
		fb, err := newFakeBackendAt(t, "b", fmt.Sprintf("127.0.0.3:%d", port))
		if err == nil {
			return fa, fb, port
		}
		fa.srv.Close()
	}
	t.Fatal("could not find a port free on both 127.0.0.2 and 127.0.0.3")
	return nil, nil, 0
}

// dynRig is a started router whose backends come from a discoverer.
type dynRig struct {
	*testRig
	ctx context.Context
}

func newDynRig(t *testing.T, mod func(*Config, *Deps)) *dynRig {
	t.Helper()
	g := newRig(t, func(c *Config, d *Deps) {
		c.Backends = nil
		c.Discovery.Models = []string{"m1"}
		c.ProbeInterval = 50 * time.Millisecond
		c.ScrapeInterval = time.Hour
		mod(c, d)
	})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if err := g.rt.Start(ctx); err != nil {
		t.Fatal(err)
	}
	return &dynRig{testRig: g, ctx: ctx}
}

// member returns name's state: whether the router has it at all (starting
// included), and whether it is in rotation.
func (g *dynRig) member(name string) (known, serving bool) {
	rt := g.rt
	rt.setMu.Lock()
	defer rt.setMu.Unlock()
	m, ok := rt.members[name]
	if !ok {
		return false, false
	}
	return true, m.state == memberServing && !m.drained
}

func (g *dynRig) removed(name string) bool {
	id, ok := g.ix.BackendByName(name)
	if !ok {
		return false
	}
	e, _ := g.ix.Backend(id)
	return e.State == tree.BackendRemoved && g.rt.backendByName(name) == nil
}

// load sends requests one after another until stop is closed, counting
// the answers that were not 200.
type load struct {
	sent, failed atomic.Int64
	byBackend    sync.Map // name -> *atomic.Int64
	done         chan struct{}
	stop         chan struct{}
}

func (g *dynRig) startLoad(t *testing.T) *load {
	l := &load{done: make(chan struct{}), stop: make(chan struct{})}
	go func() {
		defer close(l.done)
		for i := 0; ; i++ {
			select {
			case <-l.stop:
				return
			default:
			}
			req, _ := http.NewRequest(http.MethodPost, g.srv.URL+"/v1/chat/completions",
				strings.NewReader(chat("m1", "sys", fmt.Sprintf("load %d", i))))
			resp, err := g.srv.Client().Do(req)
			l.sent.Add(1)
			if err != nil {
				l.failed.Add(1)
				t.Errorf("load request: %v", err)
				continue
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				l.failed.Add(1)
				t.Errorf("load request answered %d", resp.StatusCode)
			}
			name := routeField(resp.Header.Get(RouteHeader), "backend")
			c, _ := l.byBackend.LoadOrStore(name, new(atomic.Int64))
			c.(*atomic.Int64).Add(1)
		}
	}()
	return l
}

func (l *load) end() { close(l.stop); <-l.done }

func (l *load) to(name string) int64 {
	if c, ok := l.byBackend.Load(name); ok {
		return c.(*atomic.Int64).Load()
	}
	return 0
}

// hold makes backend f keep the next generation request until release is
// closed; entered is closed when it arrived.
func hold(f *fakeBackend) (entered, release chan struct{}) {
	entered, release = make(chan struct{}), make(chan struct{})
	var once sync.Once
	f.setHook(func(w http.ResponseWriter, r *http.Request, body []byte) {
		first := false
		once.Do(func() { first = true })
		if first {
			close(entered)
			<-release
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"hi"}}],"usage":{"prompt_tokens":40,"completion_tokens":1,"total_tokens":41}}`)
	})
	return entered, release
}

// drainWithInFlight is the removal half of the discovery tests: with a
// request held at victim and load running, remove() takes victim out of
// the source; the router must take it out of rotation, let the held
// request finish, then invalidate its claims and delete its series, with
// no request failing.
func drainWithInFlight(t *testing.T, g *dynRig, victim *fakeBackend, victimName, otherName string, remove func()) {
	t.Helper()
	// The held request must reach the victim: drain the other one meanwhile.
	if err := g.rt.SetDrained(otherName, true); err != nil {
		t.Fatal(err)
	}
	entered, release := hold(victim)
	heldDone := make(chan int, 1)
	go func() {
		resp := g.do(http.MethodPost, "/v1/chat/completions", chat("m1", "sys", "held"))
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		heldDone <- resp.StatusCode
	}()
	<-entered
	if err := g.rt.SetDrained(otherName, false); err != nil {
		t.Fatal(err)
	}
	// Learn a claim on the victim, to see it invalidated.
	vb := g.rt.backendByName(victimName)
	var ch tree.Chain
	g.ix.Keyer().Bytes(&ch, tree.NewSeed("m1", "", ""), []byte(longText("claim", 256)), nil)
	g.rt.learner.Learn(&ch, vb.id, time.Hour)
	gen, _ := g.ix.Generation(vb.id)

	l := g.startLoad(t)
	remove()
	waitFor(t, "the victim leaves rotation", func() bool { return vb.removing.Load() })
	toVictim := l.to(victimName)
	// While the held request is in flight the victim stays (draining).
	sent := l.sent.Load()
	waitFor(t, "load after the removal", func() bool { return l.sent.Load() >= sent+20 })
	if b := g.rt.backendByName(victimName); b == nil || !b.draining.Load() {
		t.Fatalf("the victim should be draining while a request is in flight there")
	}
	if got := l.to(victimName); got > toVictim+1 { // one request may have chosen it just before
		t.Errorf("%d requests went to the draining victim", got-toVictim)
	}
	close(release)
	if status := <-heldDone; status != http.StatusOK {
		t.Errorf("the request in flight at the removed backend got %d, want 200", status)
	}
	// The drain is observed last, after the claims and series are gone.
	waitFor(t, "the victim's removal", func() bool {
		return g.removed(victimName) && g.counter("kvmesh_router_discovery_drain_duration_seconds") >= 1
	})
	waitFor(t, "the victim's loops to stop", func() bool { return g.rt.disc.loops.Load() == int64(len(g.rt.backends())) })
	l.end()
	if n := l.failed.Load(); n != 0 {
		t.Errorf("%d of %d requests failed during the drain", n, l.sent.Load())
	}
	if g2, active := g.ix.Generation(vb.id); active || g2 == gen {
		t.Errorf("victim's registry entry: generation %d active %v, want a new removed generation", g2, active)
	}
	if g.counter("kvmesh_router_backend_cached_tokens_total", "backend", victimName) != 0 {
		t.Error("the victim's series is still there")
	}
	mfs, _ := g.reg.Gather()
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "backend" && lp.GetValue() == victimName {
					t.Errorf("%s still has a series for the removed backend", mf.GetName())
				}
			}
		}
	}
	if g.counter("kvmesh_router_discovery_drain_duration_seconds") != 1 {
		t.Error("the drain was not observed")
	}
}

// TestSetBackends: the static list changes (what SIGHUP does): a backend
// added joins after its first probe, one removed drains, one listed again
// while draining is back, one whose URL changed is replaced in place.
func TestSetBackends(t *testing.T) {
	a, b, c := newFakeBackend(t, "a"), newFakeBackend(t, "b"), newFakeBackend(t, "c")
	g := newDynRig(t, func(cfg *Config, _ *Deps) {
		cfg.Discovery.Models = nil
		cfg.Backends = []BackendConfig{{Name: "a", URL: a.URL()}, {Name: "b", URL: b.URL()}}
	})
	list := func(bs ...BackendConfig) []BackendConfig { return bs }
	A, B, C := BackendConfig{Name: "a", URL: a.URL()}, BackendConfig{Name: "b", URL: b.URL()}, BackendConfig{Name: "c", URL: c.URL()}
	if err := g.rt.SetBackends(list(A, B, C)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "c", func() bool { _, s := g.member("c"); return s })
	if got := g.rt.models.lookup("m1"); len(got) != 3 {
		t.Fatalf("m1 served by %d backends, want 3 (c's models discovered before it joined)", len(got))
	}
	slotB := g.rt.backendByName("b").slot
	// b leaves and comes back before its drain ends.
	entered, release := hold(b)
	_ = g.rt.SetDrained("a", true)
	_ = g.rt.SetDrained("c", true)
	done := make(chan int, 1)
	go func() {
		st, _, _ := g.call(http.MethodPost, "/v1/chat/completions", chat("m1", "sys", "held"))
		done <- st
	}()
	<-entered
	_ = g.rt.SetDrained("a", false)
	_ = g.rt.SetDrained("c", false)
	if err := g.rt.SetBackends(list(A, C)); err != nil {
		t.Fatal(err)
	}
	if bb := g.rt.backendByName("b"); bb == nil || !bb.removing.Load() {
		t.Fatal("b should be draining")
	}
	for i := 0; i < 10; i++ {
		_, route, _ := g.call(http.MethodPost, "/v1/chat/completions", chat("m1", "sys", fmt.Sprint("q", i)))
		if routeField(route, "backend") == "b" {
			t.Fatal("a request went to the draining b")
		}
	}
	if err := g.rt.SetBackends(list(A, B, C)); err != nil {
		t.Fatal(err)
	}
	if _, s := g.member("b"); !s {
		t.Fatal("b listed again should be serving")
	}
	close(release)
	if st := <-done; st != 200 {
		t.Errorf("held request: %d", st)
	}
	// a's URL changes: replaced, same slot.
	a2 := newFakeBackend(t, "a2")
	slotA := g.rt.backendByName("a").slot
	if err := g.rt.SetBackends(list(BackendConfig{Name: "a", URL: a2.URL()}, B, C)); err != nil {
		t.Fatal(err)
	}
	if na := g.rt.backendByName("a"); na.slot != slotA || na.base != a2.URL() {
		t.Errorf("a replaced: slot %d (was %d), base %s", na.slot, slotA, na.base)
	}
	// Garbage entries are skipped, the rest applied.
	err := g.rt.SetBackends(list(BackendConfig{Name: "a", URL: a2.URL()}, B, C, BackendConfig{Name: "x", URL: "ftp://x"}, B))
	if err == nil || !strings.Contains(err.Error(), "scheme") || !strings.Contains(err.Error(), "listed twice") {
		t.Errorf("error %v, want the bad scheme and the duplicate", err)
	}
	if len(g.rt.Backends()) != 3 {
		t.Errorf("%d backends", len(g.rt.Backends()))
	}
	// b leaves for good; a later b comes back in its old slot, active again,
	// counting its writes on from the old one's (peers keep the largest).
	wroteB := g.rt.backendByName("b").written.Load()
	if wroteB == 0 {
		t.Fatal("nothing written to b")
	}
	if err := g.rt.SetBackends(list(BackendConfig{Name: "a", URL: a2.URL()}, C)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "b's removal", func() bool { return g.removed("b") })
	waitFor(t, "b's loops to stop", func() bool { return g.rt.disc.loops.Load() == 2 })
	if err := g.rt.SetBackends(list(BackendConfig{Name: "a", URL: a2.URL()}, B, C)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "b back", func() bool { _, s := g.member("b"); return s })
	bb := g.rt.backendByName("b")
	if _, active := g.ix.Generation(bb.id); !active || bb.slot != slotB {
		t.Errorf("b back: active %v, slot %d (was %d)", active, bb.slot, slotB)
	}
	if got := bb.written.Load(); got != wroteB {
		t.Errorf("b back: written %d, want %d (the removed one's)", got, wroteB)
	}
	if cold := math.Float64frombits(bb.belief.coldAt.Load()); cold != float64(wroteB) {
		t.Errorf("b back: its cache counts as empty from %v units, want %d (nothing it holds is claimed)", cold, wroteB)
	}
}

// TestAdminDrain: POST /admin/backends/{name}/drain and /undrain.
func TestAdminDrain(t *testing.T) {
	a, b := newFakeBackend(t, "a"), newFakeBackend(t, "b/1")
	g := newRig(t, nil, a, b)
	admin := httptest.NewServer(g.rt.AdminHandler())
	defer admin.Close()
	post := func(path string) (int, string) {
		resp, err := http.Post(admin.URL+path, "", nil)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	if st, body := post("/admin/backends/b%2F1/drain"); st != 200 || !strings.Contains(body, `"draining": true`) {
		t.Fatalf("drain: %d %s", st, body)
	}
	for i := 0; i < 10; i++ {
		_, route, _ := g.call(http.MethodPost, "/v1/chat/completions", chat("m1", "sys", fmt.Sprint("q", i)))
		if routeField(route, "backend") != "a" {
			t.Fatalf("routed to %q with b/1 drained", route)
		}
	}
	if st, body := post("/admin/backends/a/drain"); st != 200 {
		t.Fatalf("drain a: %d %s", st, body)
	}
	if g.rt.Ready() {
		t.Error("ready with every backend drained")
	}
	if st, _, _ := g.call(http.MethodPost, "/v1/chat/completions", chat("m1", "sys", "x")); st != http.StatusServiceUnavailable {
		t.Errorf("status %d with every backend drained, want 503", st)
	}
	if st, body := post("/admin/backends/b%2F1/undrain"); st != 200 || !strings.Contains(body, `"draining": false`) {
		t.Fatalf("undrain: %d %s", st, body)
	}
	if st, _, _ := g.call(http.MethodPost, "/v1/chat/completions", chat("m1", "sys", "x")); st != 200 {
		t.Errorf("status %d after undrain", st)
	}
	if st, body := post("/admin/backends/nope/drain"); st != 404 || !strings.Contains(body, "backend_not_found") {
		t.Errorf("unknown backend: %d %s", st, body)
	}
	if st, _ := post("/admin/backends/a/explode"); st != 404 && st != 405 {
		t.Errorf("unknown action: %d", st)
	}
}

// TestReactivateAfterGrace: a backend this node lists that a peer removed
// is made active again, but only once the removal is two discovery
// intervals old (a node that has not re-read its source yet must not undo
// a real removal).
func TestReactivateAfterGrace(t *testing.T) {
	a := newFakeBackend(t, "a")
	var now atomic.Int64
	now.Store(time.Now().UnixMilli())
	g := newRig(t, func(c *Config, d *Deps) {
		c.Discovery.Interval = 10 * time.Second
		d.Now = func() time.Time { return time.UnixMilli(now.Load()) }
	}, a)
	l := NewLocalLearner(g.ix, "peer")
	l.Now = func() time.Time { return time.UnixMilli(now.Load()) }
	var page Status // reused, as the status page's poller does: a stale field would show
	statusOfA := func() BackendStatus {
		t.Helper()
		g.rt.ReadStatus(&page)
		for _, s := range g.rt.Backends() {
			if s.Name != "a" {
				continue
			}
			// The status page (ReadStatus) says what /admin/backends says.
			for _, p := range page.Backends {
				if p.Name == "a" && (p.RegistryRemoved != s.RegistryRemoved || s.ReactivateInMs != nil && p.ReactivateInMs != *s.ReactivateInMs ||
					s.ReactivateInMs == nil && p.ReactivateInMs != 0) {
					t.Fatalf("status page: registry_removed %v, reactivate_in_ms %d; /admin/backends %v, %v",
						p.RegistryRemoved, p.ReactivateInMs, s.RegistryRemoved, s.ReactivateInMs)
				}
			}
			return s
		}
		t.Fatal("a is not in /admin/backends")
		return BackendStatus{}
	}
	if s := statusOfA(); s.RegistryRemoved || s.ReactivateInMs != nil {
		t.Fatalf("active backend shown removed: %v %v", s.RegistryRemoved, s.ReactivateInMs)
	}
	l.Invalidate("a", true) // a peer removed it
	id := g.rt.backendByName("a").id
	g.rt.reactivate()
	if _, active := g.ix.Generation(id); active {
		t.Fatal("reactivated before the grace")
	}
	now.Add((5 * time.Second).Milliseconds())
	// /admin/backends shows the removal and the wait before this node
	// overrules it: 20 s after the removal, 15 s from now.
	if s := statusOfA(); !s.RegistryRemoved || s.ReactivateInMs == nil || *s.ReactivateInMs != 15000 {
		t.Fatalf("removed by a peer: registry_removed %v, reactivate_in_ms %v, want true and 15000", s.RegistryRemoved, s.ReactivateInMs)
	}
	now.Add((15 * time.Second).Milliseconds())
	g.rt.reactivate()
	if _, active := g.ix.Generation(id); !active {
		t.Fatal("not reactivated after the grace")
	}
	if s := statusOfA(); s.RegistryRemoved || s.ReactivateInMs != nil {
		t.Fatalf("reactivated backend still shown removed: %v %v", s.RegistryRemoved, s.ReactivateInMs)
	}
}

// TestDiscoveryConfigValidate covers the modes' required settings.
func TestDiscoveryConfigValidate(t *testing.T) {
	for _, c := range []struct {
		mod  func(*Config)
		want string
	}{
		{func(c *Config) { c.Discovery.Mode = "dns" }, "backends: must be empty"},
		{func(c *Config) { c.Backends = nil; c.Discovery.Mode = "dns" }, "dns: name is required"},
		{func(c *Config) { c.Backends = nil; c.Discovery.Mode = "dns"; c.Discovery.DNS.Name = "x" }, "port must be in [1, 65535]"},
		{func(c *Config) {
			c.Backends = nil
			c.Discovery.Mode = "dns"
			c.Discovery.DNS = DNSDiscoveryConfig{Name: "x", Record: "MX"}
		}, "want A or SRV"},
		{func(c *Config) { c.Backends = nil; c.Discovery.Mode = "kubernetes" }, "selector is required"},
		{func(c *Config) { c.Discovery.Mode = "consul" }, `mode "consul"`},
		{func(c *Config) { c.Discovery.Interval = 0 }, "interval must be at least 10ms"},
		{func(c *Config) { c.Discovery.Interval = time.Nanosecond }, "interval must be at least 10ms, got 1ns"},
		{func(c *Config) { c.Backends = nil }, "at least one backend"},
		{func(c *Config) { c.Discovery.UnlistedGrace = -time.Second }, "unlisted_grace must be 0 (off) or positive, got -1s"},
		{kube("app in ((", ""), `kubernetes: selector "app in ((":`},
		{kube("app=vllm,", ""), `kubernetes: selector "app=vllm,"`},
		{kube("app=vllm", "70000"), "kubernetes: port 70000: a port number must be in [1, 65535]"},
		{kube("app=vllm", "0"), "kubernetes: port 0: a port number must be in [1, 65535]"},
		{kube("app=vllm", "-1"), "kubernetes: port -1"},
		{kube("app=vllm", "Http_Port"), `kubernetes: port "Http_Port": neither a number nor a port name`},
		{dnsServer("10.0.0.10:"), `dns: server "10.0.0.10:": the port must be a number`},
		{dnsServer("10.0.0.10:0"), `dns: server "10.0.0.10:0": the port must be a number`},
		{dnsServer("10.0.0.10:99999"), `dns: server "10.0.0.10:99999"`},
		{dnsServer("10.0.0.10"), `dns: server "10.0.0.10": address 10.0.0.10: missing port`},
		{func(c *Config) {
			c.Backends = nil
			c.Discovery.Mode = "dns"
			c.Discovery.DNS = DNSDiscoveryConfig{Name: "x", Port: 80, Family: "ipv5"}
		}, `dns: family "ipv5": want auto, any, ipv4 or ipv6`},
	} {
		cfg := DefaultConfig()
		cfg.Backends = []BackendConfig{{URL: "http://x:1"}}
		c.mod(&cfg)
		err := cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("got %v, want %q", err, c.want)
		}
	}
	cfg := DefaultConfig()
	cfg.Discovery.Mode = "dns"
	cfg.Discovery.DNS = DNSDiscoveryConfig{Name: "_http._tcp.x"}
	if err := cfg.Validate(); err != nil {
		t.Errorf("SRV without a port: %v", err)
	}
	for _, ok := range []func(*Config){
		kube("kubernetes.io/service-name=vllm", ""),
		kube("app in (vllm, sglang),tier!=canary", "http"),
		kube("app=vllm", "8000"),
		kube("app=vllm", "65535"),
		dnsServer("10.0.0.10:53"),
		dnsServer("[fd00::10]:5353"),
		func(c *Config) {
			c.Backends = nil
			c.Discovery.Mode = "dns"
			c.Discovery.DNS = DNSDiscoveryConfig{Name: "x", Port: 80, Family: "IPv6"}
		},
		func(c *Config) { c.Discovery.Interval = 10 * time.Millisecond },
	} {
		cfg := DefaultConfig()
		cfg.Backends = []BackendConfig{{URL: "http://x:1"}}
		ok(&cfg)
		if err := cfg.Validate(); err != nil {
			t.Errorf("refused: %v", err)
		}
	}
}

// kube is a kubernetes-mode config with selector and port.
func kube(selector, port string) func(*Config) {
	return func(c *Config) {
		c.Backends = nil
		c.Discovery.Mode = DiscoveryKubernetes
		c.Discovery.Kubernetes = KubernetesDiscoveryConfig{Selector: selector, Port: port}
	}
}

// dnsServer is an A-mode dns config asking server.
func dnsServer(server string) func(*Config) {
	return func(c *Config) {
		c.Backends = nil
		c.Discovery.Mode = DiscoveryDNS
		c.Discovery.DNS = DNSDiscoveryConfig{Name: "vllm", Port: 8000, Server: server}
	}
}

// A router in kubernetes mode without a discoverer is refused.
func TestKubernetesModeNeedsDiscoverer(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Discovery.Mode = DiscoveryKubernetes
	cfg.Discovery.Kubernetes.Selector = "app=vllm"
	tc := tree.DefaultConfig()
	tc.Capacity = 1 << 10
	ix, err := tree.New(tc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := New(cfg, Deps{Index: ix, Logger: zerolog.Nop(), Registerer: prometheus.NewRegistry()}); err == nil ||
		!strings.Contains(err.Error(), "kubediscovery") {
		t.Errorf("got %v", err)
	}
}
