package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/rs/zerolog"

	"github.com/kvmesh/kvmesh/router"
)

// backendNames returns the names GET /admin/backends lists, with "~" after
// those draining.
func backendNames(t *testing.T, admin string) []string {
	t.Helper()
	var list []router.BackendStatus
	if err := json.Unmarshal([]byte(get(t, "http://"+admin+"/admin/backends")), &list); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, b := range list {
		n := b.Name
		if b.Draining {
			n += "~"
		}
		out = append(out, n)
	}
	return out
}

func waitForBackends(t *testing.T, admin, want string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second) // a liveness bound
	for {
		got := strings.Join(backendNames(t, admin), ",")
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("backends %q, want %q", got, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// SIGHUP reloads the config file's backend list: a backend added joins, one
// removed drains and goes, and a file that no longer loads changes nothing.
func TestServeReloadsBackendsOnSIGHUP(t *testing.T) {
	b1, b2 := fakeBackend(t, 0), fakeBackend(t, 0)
	path := filepath.Join(t.TempDir(), "kvmesh.yaml")
	write := func(s string) {
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// The test's own subscription keeps SIGHUP handled for its whole length
	// and tells when each one sent was delivered: a SIGHUP still in flight
	// when the node stops (its subscription gone) would kill the test
	// binary.
	sent := make(chan os.Signal, 4)
	signal.Notify(sent, syscall.SIGHUP)
	defer signal.Stop(sent)
	hup := func() {
		t.Helper()
		if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		select {
		case <-sent:
		case <-time.After(time.Minute):
			t.Fatal("SIGHUP not delivered")
		}
	}
	write(fmt.Sprintf("router:\n  backends:\n    - {name: b1, url: %q}\n", b1.URL))
	s, cancel, done := startServe(t, "--config", path, "--shutdown-timeout", "5s", "--backend-remove-grace", "0")
	defer func() { cancel(); <-done }()
	waitForBackends(t, s.Admin, "b1")

	write(fmt.Sprintf("router:\n  backends:\n    - {name: b1, url: %q}\n    - {name: b2, url: %q}\n", b1.URL, b2.URL))
	hup()
	waitForBackends(t, s.Admin, "b1,b2")

	write(fmt.Sprintf("router:\n  backends:\n    - {name: b2, url: %q}\n", b2.URL))
	hup()
	waitForBackends(t, s.Admin, "b2")
	metrics := get(t, "http://"+s.Admin+"/metrics")
	if !strings.Contains(metrics, "kvmesh_router_discovery_backends_removed_total 1") {
		t.Error("the removal is not counted")
	}

	// A broken file: logged, nothing changes.
	write("router:\n  backendz: []\n")
	cfg, err := loadServeConfig([]string{"--config", path}, env(nil), io.Discard)
	if err == nil || cfg != nil {
		t.Fatal("the broken file loads")
	}
	hup()
	waitForBackends(t, s.Admin, "b2")
	// The refusal shows in the metrics too, not only in the log.
	eventually(t, "the failed reload counted", func() bool {
		m := get(t, "http://"+s.Admin+"/metrics")
		return strings.Contains(m, `kvmesh_config_reloads_total{result="error"} 1`) &&
			strings.Contains(m, "kvmesh_config_last_reload_successful 0")
	})
	if m := get(t, "http://"+s.Admin+"/metrics"); !strings.Contains(m, `kvmesh_config_reloads_total{result="ok"} 2`) {
		t.Error("the two good reloads are not counted")
	}
}

// reloadBackends applies the reloaded list in static mode only.
func TestReloadBackendsModes(t *testing.T) {
	var got [][]router.BackendConfig
	rt := setterFunc(func(l []router.BackendConfig) error { got = append(got, l); return nil })
	cfg := DefaultServeConfig()
	cfg.Router.Discovery.Mode = router.DiscoveryDNS
	reloadBackends(&cfg, rt, zerolog.Nop())
	cfg.Router.Discovery.Mode = router.DiscoveryStatic
	reloadBackends(&cfg, rt, zerolog.Nop()) // no reload function
	cfg.reload = func() (*ServeConfig, error) {
		nc := DefaultServeConfig()
		nc.Router.Discovery.Mode = router.DiscoveryKubernetes
		return &nc, nil
	}
	reloadBackends(&cfg, rt, zerolog.Nop()) // a mode change needs a restart
	if len(got) != 0 {
		t.Fatalf("applied %v", got)
	}
	cfg.reload = func() (*ServeConfig, error) {
		nc := DefaultServeConfig()
		nc.Router.Backends = []router.BackendConfig{{Name: "x", URL: "http://x:1"}}
		return &nc, nil
	}
	reloadBackends(&cfg, rt, zerolog.Nop())
	if len(got) != 1 || got[0][0].Name != "x" {
		t.Fatalf("applied %v", got)
	}
}

type setterFunc func([]router.BackendConfig) error

func (f setterFunc) SetBackends(l []router.BackendConfig) error { return f(l) }

// The discovery settings come from flags, variables and the file like the
// others; a mode without its source is refused with the flag to set.
func TestDiscoveryFlags(t *testing.T) {
	cfg, err := loadServeConfig([]string{"--discovery", "dns", "--dns-name", "_http._tcp.vllm.llm.svc.cluster.local",
		"--discovery-interval", "5s", "--backend-drain-timeout", "1m", "--discovery-models", "a,b", "--dns-family", "ipv6"}, env(map[string]string{"KVMESH_DNS_SERVER": "10.0.0.10:53"}), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	d := cfg.Router.Discovery
	if d.Mode != "dns" || d.DNS.Name != "_http._tcp.vllm.llm.svc.cluster.local" || d.DNS.Server != "10.0.0.10:53" ||
		d.Interval != 5*time.Second || d.DrainTimeout != time.Minute || strings.Join(d.Models, ",") != "a,b" || d.DNS.Family != "ipv6" {
		t.Errorf("discovery %+v", d)
	}
	_, err = loadServeConfig([]string{"--discovery", "kubernetes"}, env(nil), io.Discard)
	if err == nil || !strings.Contains(err.Error(), "--kube-selector") {
		t.Errorf("kubernetes without a selector: %v", err)
	}
	_, err = loadServeConfig([]string{"--discovery", "dns", "--dns-name", "x", "--backends", "http://a:1"}, env(nil), io.Discard)
	if err == nil || !strings.Contains(err.Error(), "must be empty") {
		t.Errorf("dns with backends: %v", err)
	}
	path := filepath.Join(t.TempDir(), "k.yaml")
	if err := os.WriteFile(path, []byte("router:\n  discovery:\n    mode: kubernetes\n    kubernetes: {selector: app=vllm, port: http, model_label: model}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err = loadServeConfig([]string{"--config", path}, env(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if k := cfg.Router.Discovery.Kubernetes; k.Selector != "app=vllm" || k.Port != "http" || k.ModelLabel != "model" {
		t.Errorf("kubernetes %+v", k)
	}
}

// serve with --discovery dns finds its backends in DNS (a server on
// loopback) and follows the records.
func TestServeDNSDiscovery(t *testing.T) {
	b0, b1 := fakeBackend(t, 0), fakeBackend(t, 0)
	port := func(u string) string { return u[strings.LastIndexByte(u, ':')+1:] }
	var mu sync.Mutex
	srv := map[string][]string{ // SRV targets of the name
		"_http._tcp.vllm.test.": {"0 0 " + port(b0.URL) + " b0.test."},
	}
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ds := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, req *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(req)
		q := req.Question[0]
		mu.Lock()
		defer mu.Unlock()
		switch {
		case q.Qtype == dns.TypeSRV && srv[q.Name] != nil:
			for _, r := range srv[q.Name] {
				rr, _ := dns.NewRR(q.Name + " 5 IN SRV " + r)
				m.Answer = append(m.Answer, rr)
			}
		case q.Qtype == dns.TypeA && strings.HasSuffix(q.Name, ".test.") && !strings.HasPrefix(q.Name, "_"):
			rr, _ := dns.NewRR(q.Name + " 5 IN A 127.0.0.1")
			m.Answer = append(m.Answer, rr)
		case q.Qtype == dns.TypeAAAA:
		default:
			m.Rcode = dns.RcodeNameError
		}
		_ = w.WriteMsg(m)
	})}
	started := make(chan struct{})
	ds.NotifyStartedFunc = func() { close(started) }
	go func() { _ = ds.ActivateAndServe() }()
	<-started
	defer ds.Shutdown()

	s, cancel, done := startServe(t, "--discovery", "dns", "--dns-name", "_http._tcp.vllm.test.", "--dns-server", pc.LocalAddr().String(),
		"--discovery-interval", "50ms", "--shutdown-timeout", "5s", "--backend-remove-grace", "0")
	defer func() { cancel(); <-done }()
	n0, n1 := "b0.test:"+port(b0.URL), "b1.test:"+port(b1.URL)
	waitForBackends(t, s.Admin, n0)
	resp, err := http.Post("http://"+s.API+"/v1/chat/completions", "application/json", strings.NewReader(chatBody))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(resp.Header.Get("X-Kvmesh-Route"), "backend="+n0) {
		t.Fatalf("status %d, route %q", resp.StatusCode, resp.Header.Get("X-Kvmesh-Route"))
	}
	mu.Lock()
	srv["_http._tcp.vllm.test."] = []string{"0 0 " + port(b1.URL) + " b1.test."}
	mu.Unlock()
	waitForBackends(t, s.Admin, n1)
}

// A reload that changes settings it cannot apply live names them in a
// warning (values left out: the file holds secrets); the backend list
// alone is applied and named nowhere.
func TestReloadNamesSettingsNotApplied(t *testing.T) {
	rt := setterFunc(func([]router.BackendConfig) error { return nil })
	cfg := DefaultServeConfig()
	cfg.reload = func() (*ServeConfig, error) {
		nc := DefaultServeConfig()
		nc.Router.Backends = []router.BackendConfig{{Name: "x", URL: "http://x:1"}}
		nc.Router.Admission.MaxInFlight = 64
		nc.Mesh.GossipKey = "c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0LTMyYg=="
		return &nc, nil
	}
	var logs bytes.Buffer
	reloadBackends(&cfg, rt, zerolog.New(&logs))
	out := logs.String()
	if !strings.Contains(out, `"not_applied":["mesh.gossip_key","router.admission.max_in_flight"]`) {
		t.Errorf("log does not name exactly the two settings:\n%s", out)
	}
	if strings.Contains(out, "c2VjcmV0") || strings.Contains(out, "router.backends") {
		t.Errorf("log shows a secret or the applied backends:\n%s", out)
	}
	// Only the backends changed: no warning.
	cfg.reload = func() (*ServeConfig, error) {
		nc := DefaultServeConfig()
		nc.Router.Backends = []router.BackendConfig{{Name: "y", URL: "http://y:1"}}
		return &nc, nil
	}
	logs.Reset()
	reloadBackends(&cfg, rt, zerolog.New(&logs))
	if strings.Contains(logs.String(), "not_applied") {
		t.Errorf("a backends-only reload warned:\n%s", logs.String())
	}
}
