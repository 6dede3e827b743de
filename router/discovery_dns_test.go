package router

// DNS discovery against an authoritative DNS server on loopback whose
// records the tests change as they go (discovery_test.go has the dynamic
// router rig they share with the other discovery tests).

import (
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// fakeDNS is an authoritative DNS server on loopback (UDP) whose records
// the test changes as it goes. answered, if set, is called with each
// question and the answer's records, before the answer is sent.
type fakeDNS struct {
	addr string
	srv  *dns.Server

	mu       sync.Mutex
	records  map[string][]dns.RR // by lower-case FQDN
	answered func(q dns.Question, rrs []dns.RR)
}

func newFakeDNS(t *testing.T) *fakeDNS {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeDNS{addr: pc.LocalAddr().String(), records: map[string][]dns.RR{}}
	f.srv = &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(f.serve)}
	started := make(chan struct{})
	f.srv.NotifyStartedFunc = func() { close(started) }
	go func() { _ = f.srv.ActivateAndServe() }()
	<-started
	t.Cleanup(func() { _ = f.srv.Shutdown() })
	return f
}

// set replaces the records of name (an FQDN) with rrs, given in zone-file
// syntax without the owner name ("A 127.0.0.2", "SRV 0 0 8000 b0.test.").
func (f *fakeDNS) set(t *testing.T, name string, rrs ...string) {
	t.Helper()
	var out []dns.RR
	for _, s := range rrs {
		rr, err := dns.NewRR(name + " 5 IN " + s)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, rr)
	}
	f.mu.Lock()
	f.records[strings.ToLower(name)] = out
	f.mu.Unlock()
}

func (f *fakeDNS) serve(w dns.ResponseWriter, req *dns.Msg) {
	m := new(dns.Msg)
	m.SetReply(req)
	m.Authoritative = true
	f.mu.Lock()
	var q dns.Question
	if len(req.Question) == 1 {
		q = req.Question[0]
		rrs, ok := f.records[strings.ToLower(q.Name)]
		if !ok {
			m.Rcode = dns.RcodeNameError
		}
		for _, rr := range rrs {
			if rr.Header().Rrtype == q.Qtype {
				m.Answer = append(m.Answer, rr)
			}
		}
	}
	hook := f.answered
	f.mu.Unlock()
	if hook != nil {
		hook(q, m.Answer)
	}
	_ = w.WriteMsg(m)
}

// TestDNSDiscoveryA: a backend added to a name's A records is picked up by
// the first look-up after the change (the DNS server counts how many
// answers named it while the router did not have it: one), and one removed
// drains with zero failed requests, the request in flight at it finishing.
func TestDNSDiscoveryA(t *testing.T) {
	fa, fb, port := twoLoopbackBackends(t)
	srv := newFakeDNS(t)
	const name = "vllm.llm.test."
	srv.set(t, name, "A 127.0.0.2")
	nameA, nameB := fmt.Sprintf("127.0.0.2:%d", port), fmt.Sprintf("127.0.0.3:%d", port)
	var rig atomic.Pointer[dynRig]
	var missed, stale atomic.Int64 // answers that named B while the router lacked it / lacked B while the router listed it
	srv.mu.Lock()
	srv.answered = func(q dns.Question, rrs []dns.RR) {
		g := rig.Load()
		if q.Qtype != dns.TypeA || g == nil {
			return
		}
		hasB := false
		for _, rr := range rrs {
			if a, ok := rr.(*dns.A); ok && a.A.String() == "127.0.0.3" {
				hasB = true
			}
		}
		known, _ := g.member(nameB)
		if hasB && !known {
			missed.Add(1)
		}
		if b := g.rt.backendByName(nameB); !hasB && known && b != nil && !b.removing.Load() {
			stale.Add(1)
		}
	}
	srv.mu.Unlock()
	g := newDynRig(t, func(c *Config, _ *Deps) {
		c.Discovery.Mode = DiscoveryDNS
		c.Discovery.Interval = 20 * time.Millisecond
		c.Discovery.DNS = DNSDiscoveryConfig{Name: name, Port: port, Server: srv.addr}
	})
	rig.Store(g)
	waitFor(t, "the first backend", func() bool { _, ok := g.member(nameA); return ok })
	if st, _, _ := g.call(http.MethodPost, "/v1/chat/completions", chat("m1", "sys", "hello")); st != 200 {
		t.Fatalf("status %d", st)
	}

	srv.set(t, name, "A 127.0.0.2", "A 127.0.0.3")
	waitFor(t, "the added backend in rotation", func() bool { _, ok := g.member(nameB); return ok })
	if n := missed.Load(); n != 1 {
		t.Errorf("%d answers named the new backend before the router had it, want 1 (the first look-up after the change adds it)", n)
	}
	drainWithInFlight(t, g, fb, nameB, nameA, func() { srv.set(t, name, "A 127.0.0.2") })
	if n := stale.Load(); n > 1 {
		t.Errorf("%d answers without the removed backend came before the router dropped it, want at most 1", n)
	}
	_ = fa
}

// TestDNSDiscoverySRV: SRV records name the backends (target:port) and
// give their ports; garbage records are skipped and counted, a name that
// vanishes (NXDOMAIN) empties the set, and a server that stops answering
// keeps the last list.
func TestDNSDiscoverySRV(t *testing.T) {
	f0, f1 := newFakeBackend(t, "b0"), newFakeBackend(t, "b1")
	p0, p1 := f0.srv.Listener.Addr().(*net.TCPAddr).Port, f1.srv.Listener.Addr().(*net.TCPAddr).Port
	srv := newFakeDNS(t)
	const name = "_http._tcp.vllm.llm.test."
	srv.set(t, "b0.llm.test.", "A 127.0.0.1")
	srv.set(t, "b1.llm.test.", "A 127.0.0.1")
	srv.set(t, "bogus.llm.test.", "A 0.0.0.0")
	srv.set(t, name, fmt.Sprintf("SRV 0 0 %d b0.llm.test.", p0),
		"SRV 0 0 0 b1.llm.test.",       // port 0: skipped
		"SRV 0 0 80 .",                 // no service: skipped
		"SRV 0 0 81 bogus.llm.test.",   // unspecified address: skipped
		"SRV 0 0 82 missing.llm.test.") // no address: skipped
	g := newDynRig(t, func(c *Config, _ *Deps) {
		c.Discovery.Mode = DiscoveryDNS
		c.Discovery.Interval = 20 * time.Millisecond
		c.Discovery.DNS = DNSDiscoveryConfig{Name: name, Server: srv.addr}
	})
	n0, n1 := fmt.Sprintf("b0.llm.test:%d", p0), fmt.Sprintf("b1.llm.test:%d", p1)
	waitFor(t, "b0", func() bool { _, s := g.member(n0); return s })
	if got := g.counter("kvmesh_router_discovery_skipped_entries_total"); got < 4 {
		t.Errorf("skipped entries %v, want at least 4", got)
	}
	if got := len(g.rt.Backends()); got != 1 {
		t.Errorf("%d backends, want 1 (garbage skipped)", got)
	}
	srv.set(t, name, fmt.Sprintf("SRV 0 0 %d b0.llm.test.", p0), fmt.Sprintf("SRV 0 0 %d b1.llm.test.", p1))
	waitFor(t, "b1", func() bool { _, s := g.member(n1); return s })
	if b := g.rt.backendByName(n1); b == nil || b.base != fmt.Sprintf("http://127.0.0.1:%d", p1) {
		t.Fatalf("b1 is %+v", b)
	}
	_, route, _ := g.call(http.MethodPost, "/v1/chat/completions", chat("m1", "sys", "x"))
	if b := routeField(route, "backend"); b != n0 && b != n1 {
		t.Errorf("routed to %q", b)
	}

	// The server stops answering: the list stays.
	errs := g.counter("kvmesh_router_discovery_errors_total")
	_ = srv.srv.Shutdown()
	waitFor(t, "a failed look-up", func() bool { return g.counter("kvmesh_router_discovery_errors_total") > errs })
	if got := len(g.rt.Backends()); got != 2 {
		t.Errorf("%d backends after failed look-ups, want the last 2", got)
	}
}

// TestDNSDiscoveryVanishedName: NXDOMAIN is an empty list (a Service
// scaled to zero): every backend drains.
func TestDNSDiscoveryVanishedName(t *testing.T) {
	f0 := newFakeBackend(t, "b0")
	p0 := f0.srv.Listener.Addr().(*net.TCPAddr).Port
	srv := newFakeDNS(t)
	const name = "_http._tcp.gone.test."
	srv.set(t, "b0.test.", "A 127.0.0.1")
	srv.set(t, name, fmt.Sprintf("SRV 0 0 %d b0.test.", p0))
	g := newDynRig(t, func(c *Config, _ *Deps) {
		c.Discovery.Mode = DiscoveryDNS
		c.Discovery.Interval = 20 * time.Millisecond
		c.Discovery.DNS = DNSDiscoveryConfig{Name: name, Server: srv.addr}
	})
	n0 := fmt.Sprintf("b0.test:%d", p0)
	waitFor(t, "b0", func() bool { _, s := g.member(n0); return s })
	if !g.rt.Ready() {
		t.Error("not ready with a backend")
	}
	srv.mu.Lock()
	delete(srv.records, name)
	srv.mu.Unlock()
	waitFor(t, "b0's removal", func() bool { return g.removed(n0) })
	if g.rt.Ready() {
		t.Error("ready without backends")
	}
	if st, _, _ := g.call(http.MethodPost, "/v1/chat/completions", chat("m1", "sys", "x")); st != http.StatusNotFound {
		t.Errorf("status %d without backends, want 404 (no backend serves the model)", st)
	}
}
