package transport

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/quic-go/quic-go"
)

const evictedMetric = "kvmesh_transport_inbound_conns_evicted_total"

// rawPeer dials raw QUIC connections to a node with a cluster certificate
// for name, as a buggy or hostile peer would, and closes them at the end.
type rawPeer struct {
	t     *testing.T
	name  string
	tls   tlsPair
	mu    sync.Mutex
	conns []*quic.Conn
}

func newRawPeer(t *testing.T, ca *CA, name string) *rawPeer {
	t.Helper()
	nc, err := ca.Issue(name, nil, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	pair, err := buildTLS(ca.TLSConfig(nc), func(string, error) {})
	if err != nil {
		t.Fatal(err)
	}
	return &rawPeer{t: t, name: name, tls: pair}
}

// dial opens one more connection to addr. Safe for concurrent use; it
// reports errors with t.Error so that it may run off the test goroutine.
func (p *rawPeer) dial(addr string) *quic.Conn {
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	conn, err := quic.DialAddr(ctx, addr, p.tls.client, &quic.Config{})
	if err != nil {
		p.t.Errorf("%s: dial: %v", p.name, err)
		return nil
	}
	p.mu.Lock()
	p.conns = append(p.conns, conn)
	p.mu.Unlock()
	return conn
}

func (p *rawPeer) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		_ = c.CloseWithError(0, "")
	}
}

// deliver sends msg on conn and waits for node to receive it from p. Since
// a connection is admitted (and any eviction it causes is done) before its
// first stream is read, a delivered message also means that.
func (p *rawPeer) deliver(node *QUIC, conn *quic.Conn, msg string) {
	t := p.t
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	str, err := conn.OpenUniStreamSync(ctx)
	if err != nil {
		t.Fatalf("%s: open stream for %q: %v", p.name, msg, err)
	}
	if _, err := str.Write(frame([]byte(msg))); err != nil {
		t.Fatalf("%s: write %q: %v", p.name, msg, err)
	}
	_ = str.Close()
	if m := recv(t, node.Inbound(), wait); string(m.Data) != msg || m.From != p.name {
		t.Fatalf("got %q from %q, want %q from %q", m.Data, m.From, msg, p.name)
	}
}

func closed(c *quic.Conn) bool { return c.Context().Err() != nil }

// checkEvicted fails unless c was closed by the node with codeTooMany.
func checkEvicted(t *testing.T, c *quic.Conn) {
	t.Helper()
	cause := context.Cause(c.Context())
	var ae *quic.ApplicationError
	if !errors.As(cause, &ae) || !ae.Remote || ae.ErrorCode != codeTooMany {
		t.Fatalf("connection closed with %v, want a remote application error %d", cause, codeTooMany)
	}
	if ae.ErrorMessage != "too many connections from this peer" {
		t.Errorf("close reason %q", ae.ErrorMessage)
	}
}

// A peer over MaxInboundConnsPerPeer loses its oldest connection; its
// newer ones and other peers' connections carry on.
func TestQUICInboundConnCapClosesOldest(t *testing.T) {
	defer checkGoroutines(t)()
	ca := testCA(t)
	cfg, reg, logs := observedConfig(t, ca, "victim")
	cfg.MaxInboundConnsPerPeer = 2
	victim := startQUIC(t, cfg)
	mallory := newRawPeer(t, ca, "mallory")
	defer mallory.close()
	bob := newRawPeer(t, ca, "bob")
	defer bob.close()

	// One at a time, each delivering a message, so that the order in which
	// the node admits them is the order of the dials.
	m1 := mallory.dial(victim.Addr())
	mallory.deliver(victim, m1, "m1")
	m2 := mallory.dial(victim.Addr())
	mallory.deliver(victim, m2, "m2")
	b1 := bob.dial(victim.Addr())
	bob.deliver(victim, b1, "b1")
	b2 := bob.dial(victim.Addr())
	bob.deliver(victim, b2, "b2")
	if v := metricValue(t, reg, evictedMetric); v != 0 {
		t.Fatalf("%s = %v at the cap, want 0", evictedMetric, v)
	}

	m3 := mallory.dial(victim.Addr())
	mallory.deliver(victim, m3, "m3")
	waitFor(t, wait, "mallory's oldest connection closed", func() bool { return closed(m1) })
	checkEvicted(t, m1)
	for name, c := range map[string]*quic.Conn{"m2": m2, "m3": m3, "b1": b1, "b2": b2} {
		if closed(c) {
			t.Errorf("connection %s closed: %v", name, context.Cause(c.Context()))
		}
	}
	mallory.deliver(victim, m3, "m3 again")
	mallory.deliver(victim, m2, "m2 again")
	bob.deliver(victim, b1, "b1 again")
	if v := metricValue(t, reg, evictedMetric); v != 1 {
		t.Errorf("%s = %v, want 1", evictedMetric, v)
	}
	waitFor(t, wait, "inbound gauge at 4", func() bool {
		return metricValue(t, reg, "kvmesh_transport_connections", "direction", "inbound") == 4
	})
	port := fmt.Sprintf(`:%d"`, m1.LocalAddr().(*net.UDPAddr).Port)
	if l := logs.lines(`"level":"warn"`, `"peer_name":"mallory"`, `"remote":`, port); len(l) != 1 {
		t.Errorf("want 1 warn line naming mallory and the evicted connection's address, got %d:\n%s", len(l), logs.String())
	}
	mallory.close()
	bob.close()
	_ = victim.Close()
}

// Connections of one peer that arrive together cannot all see room: after
// n concurrent dials exactly the cap stay open, n-cap are evicted.
func TestQUICInboundConnCapConcurrentDials(t *testing.T) {
	defer checkGoroutines(t)()
	const limit, n = 2, 6
	ca := testCA(t)
	reg := prometheus.NewRegistry()
	cfg := testConfig(t, ca, "victim")
	cfg.Registerer = reg
	cfg.MaxInboundConnsPerPeer = limit
	victim := startQUIC(t, cfg)
	mallory := newRawPeer(t, ca, "mallory")
	defer mallory.close()

	conns := make([]*quic.Conn, n)
	var wg sync.WaitGroup
	for i := range conns {
		wg.Go(func() { conns[i] = mallory.dial(victim.Addr()) })
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	// Every connection is admitted once its handshake is done, and each
	// admission past the cap evicts one.
	waitFor(t, wait, "n-cap evictions", func() bool { return metricValue(t, reg, evictedMetric) == n-limit })
	var open []*quic.Conn
	waitFor(t, wait, "evicted connections closed at the peer", func() bool {
		open = open[:0]
		for _, c := range conns {
			if !closed(c) {
				open = append(open, c)
			}
		}
		return len(open) == limit
	})
	for _, c := range conns {
		if closed(c) {
			checkEvicted(t, c)
		}
	}
	waitFor(t, wait, "inbound gauge at the cap", func() bool {
		return metricValue(t, reg, "kvmesh_transport_connections", "direction", "inbound") == limit
	})
	for i, c := range open {
		mallory.deliver(victim, c, fmt.Sprintf("survivor %d", i))
	}
	if v := metricValue(t, reg, evictedMetric); v != n-limit {
		t.Errorf("%s = %v, want %d", evictedMetric, v, n-limit)
	}
	mallory.close()
	_ = victim.Close()
}

// A peer that comes back while its old connection lingers gets through even
// at a cap of 1, and a transport whose connection was evicted re-dials.
func TestQUICInboundConnCapRestartedPeerGetsThrough(t *testing.T) {
	defer checkGoroutines(t)()
	ca := testCA(t)
	reg, areg := prometheus.NewRegistry(), prometheus.NewRegistry()
	cfg := testConfig(t, ca, "victim")
	cfg.Registerer = reg
	cfg.MaxInboundConnsPerPeer = 1
	victim := startQUIC(t, cfg)
	acfg := testConfig(t, ca, "a")
	acfg.Registerer = areg
	a := startQUIC(t, acfg)
	ctx := context.Background()
	if err := a.Send(ctx, victim.Addr(), []byte("before")); err != nil {
		t.Fatal(err)
	}
	recv(t, victim.Inbound(), wait)

	// "a restarted": a new connection with a's identity, the old one open.
	again := newRawPeer(t, ca, "a")
	defer again.close()
	again.deliver(victim, again.dial(victim.Addr()), "after restart")
	waitFor(t, wait, "a's old connection dropped", func() bool {
		return metricValue(t, areg, "kvmesh_transport_connections", "direction", "outbound") == 0
	})
	if v := metricValue(t, reg, evictedMetric); v != 1 {
		t.Errorf("%s = %v, want 1", evictedMetric, v)
	}
	if err := a.Send(ctx, victim.Addr(), []byte("re-dialled")); err != nil {
		t.Fatal(err)
	}
	if m := recv(t, victim.Inbound(), wait); string(m.Data) != "re-dialled" || m.From != "a" {
		t.Fatalf("got %q from %q", m.Data, m.From)
	}
	if v := metricValue(t, areg, "kvmesh_transport_dials_total", "result", "ok"); v != 2 {
		t.Errorf("dials_total{ok} = %v, want 2", v)
	}
	again.close()
	_ = a.Close()
	_ = victim.Close()
}
