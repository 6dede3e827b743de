package transport

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/quic-go/quic-go"
)

// frame encodes one message as it travels on the wire.
func frame(payload []byte) []byte {
	out := make([]byte, frameHeaderLen, frameHeaderLen+len(payload))
	putFrameHeader(out, len(payload))
	return append(out, payload...)
}

func TestQUICRoundTripThreeNodes(t *testing.T) {
	defer checkGoroutines(t)()
	ca := testCA(t)
	reg := prometheus.NewRegistry()
	names := []string{"node-a", "node-b", "node-c"}
	nodes := make([]*QUIC, len(names))
	for i, name := range names {
		cfg := testConfig(t, ca, name)
		// Shared registry: the second and third node reuse the collectors.
		cfg.Registerer = reg
		nodes[i] = startQUIC(t, cfg)
	}
	ctx := context.Background()
	for i, from := range nodes {
		for j, to := range nodes {
			if i == j {
				continue
			}
			msg := fmt.Appendf(nil, "%s->%s", names[i], names[j])
			if err := from.Send(ctx, to.Addr(), msg); err != nil {
				t.Fatalf("%s -> %s: %v", names[i], names[j], err)
			}
		}
	}
	for j, to := range nodes {
		got := map[string]string{}
		for range len(nodes) - 1 {
			m := recv(t, to.Inbound(), wait)
			got[m.From] = string(m.Data)
		}
		for i := range nodes {
			if i == j {
				continue
			}
			want := names[i] + "->" + names[j]
			if got[names[i]] != want {
				t.Errorf("%s got %q from %s, want %q", names[j], got[names[i]], names[i], want)
			}
		}
	}
	if v := metricValue(t, reg, "kvmesh_transport_messages_sent_total"); v != 6 {
		t.Errorf("messages_sent_total = %v, want 6", v)
	}
	if v := metricValue(t, reg, "kvmesh_transport_messages_received_total"); v != 6 {
		t.Errorf("messages_received_total = %v, want 6", v)
	}
	wantBytes := float64(6 * len("node-a->node-b"))
	if v := metricValue(t, reg, "kvmesh_transport_bytes_sent_total"); v != wantBytes {
		t.Errorf("bytes_sent_total = %v, want %v", v, wantBytes)
	}
	if v := metricValue(t, reg, "kvmesh_transport_bytes_received_total"); v != wantBytes {
		t.Errorf("bytes_received_total = %v, want %v", v, wantBytes)
	}
	if v := metricValue(t, reg, "kvmesh_transport_dials_total", "result", "ok"); v != 6 {
		t.Errorf("dials_total{ok} = %v, want 6 (one per ordered pair)", v)
	}
	waitFor(t, wait, "6 inbound connections", func() bool {
		return metricValue(t, reg, "kvmesh_transport_connections", "direction", "inbound") == 6
	})
	if v := metricValue(t, reg, "kvmesh_transport_connections", "direction", "outbound"); v != 6 {
		t.Errorf("connections{outbound} = %v, want 6", v)
	}
	// A second round reuses the cached connections.
	if err := nodes[0].Send(ctx, nodes[1].Addr(), []byte("again")); err != nil {
		t.Fatal(err)
	}
	if m := recv(t, nodes[1].Inbound(), wait); string(m.Data) != "again" {
		t.Fatalf("got %q", m.Data)
	}
	if v := metricValue(t, reg, "kvmesh_transport_dials_total"); v != 6 {
		t.Errorf("dials_total = %v after reuse, want still 6", v)
	}
	for _, n := range nodes {
		if err := n.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	}
	for _, name := range []string{"inbound", "outbound"} {
		if v := metricValue(t, reg, "kvmesh_transport_connections", "direction", name); v != 0 {
			t.Errorf("connections{%s} = %v after Close, want 0", name, v)
		}
	}
}

func TestQUICLargeMessageAndBufferReuse(t *testing.T) {
	ca := testCA(t)
	a := startQUIC(t, testConfig(t, ca, "a"))
	b := startQUIC(t, testConfig(t, ca, "b"))
	// 3 MiB: above growStart, so the receiver grows its buffer as data comes.
	big := bytes.Repeat([]byte("0123456789abcdef"), 3<<16)
	want := bytes.Clone(big)
	if err := a.Send(context.Background(), b.Addr(), big); err != nil {
		t.Fatal(err)
	}
	// The sender may reuse its buffer as soon as Send returns.
	for i := range big {
		big[i] = 'x'
	}
	m := recv(t, b.Inbound(), wait)
	if !bytes.Equal(m.Data, want) || m.From != "a" {
		t.Fatalf("got %d bytes from %q, want %d bytes from a", len(m.Data), m.From, len(want))
	}
	if cap(m.Data) != len(want) {
		t.Errorf("receive buffer cap %d, want exactly %d (no over-allocation)", cap(m.Data), len(want))
	}
	// Empty messages are messages too.
	if err := a.Send(context.Background(), b.Addr(), nil); err != nil {
		t.Fatal(err)
	}
	if m := recv(t, b.Inbound(), wait); len(m.Data) != 0 || m.From != "a" {
		t.Fatalf("empty message: got %d bytes from %q", len(m.Data), m.From)
	}
}

func TestQUICRejectsForeignCA(t *testing.T) {
	defer checkGoroutines(t)()
	ca := testCA(t)
	other, err := GenerateCA("other-ca", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	cfg := testConfig(t, ca, "good")
	cfg.Registerer = reg
	good := startQUIC(t, cfg)
	intruder := startQUIC(t, testConfig(t, other, "intruder"))

	t.Run("intruder node dials us", func(t *testing.T) {
		// The intruder's own check refuses our certificate first.
		if err := intruder.Send(context.Background(), good.Addr(), []byte("let me in")); err == nil {
			t.Fatal("intruder's Send succeeded")
		}
		expectNone(t, good.Inbound(), 200*time.Millisecond)
	})
	t.Run("hostile client that skips verification", func(t *testing.T) {
		// A client that accepts any server certificate and presents one from
		// another CA (or none): only our server-side check stands in its way.
		foreign, err := other.Issue("node-a", nil, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		for i, certs := range [][]tls.Certificate{{foreign.Certificate}, nil} {
			tlsConf := &tls.Config{
				Certificates:       certs,
				InsecureSkipVerify: true,
				NextProtos:         []string{ALPN},
				MinVersion:         tls.VersionTLS13,
			}
			ctx, cancel := context.WithTimeout(context.Background(), wait)
			conn, err := quic.DialAddr(ctx, good.Addr(), tlsConf, &quic.Config{})
			cancel()
			if err == nil {
				// TLS 1.3: the client may finish before the server's verdict.
				if str, err := conn.OpenUniStream(); err == nil {
					_, _ = str.Write(frame([]byte("spoofed")))
					_ = str.Close()
				}
				select {
				case <-conn.Context().Done():
				case <-time.After(wait):
					t.Fatalf("client %d: server did not close the connection", i)
				}
				_ = conn.CloseWithError(0, "")
			}
			expectNone(t, good.Inbound(), 200*time.Millisecond)
			if v := metricValue(t, reg, "kvmesh_transport_peer_rejections_total", "side", "server"); v != float64(i+1) {
				t.Errorf("client %d: peer_rejections_total{server} = %v, want %d", i, v, i+1)
			}
		}
		if v := metricValue(t, reg, "kvmesh_transport_connections", "direction", "inbound"); v != 0 {
			t.Errorf("connections{inbound} = %v, want 0", v)
		}
	})
	t.Run("we dial the intruder", func(t *testing.T) {
		err := good.Send(context.Background(), intruder.Addr(), []byte("hello?"))
		if err == nil {
			t.Fatal("Send to a server with a foreign certificate succeeded")
		}
		expectNone(t, intruder.Inbound(), 300*time.Millisecond)
		if v := metricValue(t, reg, "kvmesh_transport_peer_rejections_total", "side", "client"); v != 1 {
			t.Errorf("peer_rejections_total{client} = %v, want 1", v)
		}
		if v := metricValue(t, reg, "kvmesh_transport_dials_total", "result", "error"); v != 1 {
			t.Errorf("dials_total{error} = %v, want 1", v)
		}
		if v := metricValue(t, reg, "kvmesh_transport_send_errors_total", "reason", reasonDial); v != 1 {
			t.Errorf("send_errors_total{dial} = %v, want 1", v)
		}
	})
	_ = intruder.Close()
	_ = good.Close()
}

func TestQUICOversizedMessageRejected(t *testing.T) {
	ca := testCA(t)
	var logs logBuffer
	reg := prometheus.NewRegistry()
	bcfg := testConfig(t, ca, "small-b")
	bcfg.MaxMessageBytes = 1024
	bcfg.Logger = logs.logger()
	bcfg.Registerer = reg
	b := startQUIC(t, bcfg)
	acfg := testConfig(t, ca, "big-a")
	acfg.MaxMessageBytes = 1 << 20 // a misconfigured peer with a larger limit
	a := startQUIC(t, acfg)
	c := startQUIC(t, testConfig(t, ca, "c"))
	ctx := context.Background()

	// Sender-side limit.
	if err := b.Send(ctx, a.Addr(), make([]byte, 1025)); !errors.Is(err, ErrMessageTooLarge) {
		t.Fatalf("Send over own limit: err = %v, want ErrMessageTooLarge", err)
	}
	// Receiver-side limit: a's Send may return before b refuses the stream
	// (best effort), but b must never deliver it.
	_ = a.Send(ctx, b.Addr(), make([]byte, 4096))
	waitFor(t, wait, "receive_errors_total{too_large}", func() bool {
		return metricValue(t, reg, "kvmesh_transport_receive_errors_total", "reason", reasonTooLarge) == 1
	})
	if l := logs.lines(`"level":"error"`, "too_large", "big-a"); len(l) != 1 {
		t.Errorf("want one error log line naming the peer, got %q", l)
	}
	// The connection from a and the node keep working.
	if err := a.Send(ctx, b.Addr(), []byte("small")); err != nil {
		t.Fatal(err)
	}
	if m := recv(t, b.Inbound(), wait); string(m.Data) != "small" || m.From != "big-a" {
		t.Fatalf("got %q from %q", m.Data, m.From)
	}
	if err := c.Send(ctx, b.Addr(), []byte("from c")); err != nil {
		t.Fatal(err)
	}
	if m := recv(t, b.Inbound(), wait); string(m.Data) != "from c" {
		t.Fatalf("got %q", m.Data)
	}
	// Exactly at the limit is fine.
	if err := a.Send(ctx, b.Addr(), make([]byte, 1024)); err != nil {
		t.Fatal(err)
	}
	if m := recv(t, b.Inbound(), wait); len(m.Data) != 1024 {
		t.Fatalf("got %d bytes, want 1024", len(m.Data))
	}
	expectNone(t, b.Inbound(), 100*time.Millisecond)
}

func TestQUICConcurrentSendersShareOneDial(t *testing.T) {
	defer checkGoroutines(t)()
	ca := testCA(t)
	reg := prometheus.NewRegistry()
	acfg := testConfig(t, ca, "a")
	acfg.Registerer = reg
	a := startQUIC(t, acfg)
	c := startQUIC(t, testConfig(t, ca, "c"))
	b := startQUIC(t, testConfig(t, ca, "b"))

	const senders, each = 8, 40
	var wg sync.WaitGroup
	errs := make(chan error, 2*senders*each)
	for _, src := range []*QUIC{a, c} {
		for s := range senders {
			wg.Go(func() {
				for i := range each {
					msg := fmt.Appendf(nil, "%d/%d", s, i)
					if err := src.Send(context.Background(), b.Addr(), msg); err != nil {
						errs <- err
					}
				}
			})
		}
	}
	got := map[string]int{}
	for range 2 * senders * each {
		m := recv(t, b.Inbound(), wait)
		got[m.From+":"+string(m.Data)]++
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for _, from := range []string{"a", "c"} {
		for s := range senders {
			for i := range each {
				if k := got[fmt.Sprintf("%s:%d/%d", from, s, i)]; k != 1 {
					t.Fatalf("message %s:%d/%d received %d times", from, s, i, k)
				}
			}
		}
	}
	if v := metricValue(t, reg, "kvmesh_transport_dials_total"); v != 1 {
		t.Errorf("a dialled b %v times, want 1", v)
	}
	_ = a.Close()
	_ = b.Close()
	_ = c.Close()
}

func TestQUICCloseSemantics(t *testing.T) {
	defer checkGoroutines(t)()
	ca := testCA(t)
	a := startQUIC(t, testConfig(t, ca, "a"))
	b := startQUIC(t, testConfig(t, ca, "b"))
	if err := a.Send(context.Background(), b.Addr(), []byte("x")); err != nil {
		t.Fatal(err)
	}
	recv(t, b.Inbound(), wait)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, open := <-b.Inbound(); open {
		t.Fatal("Inbound still open after Close")
	}
	if err := b.Send(context.Background(), a.Addr(), []byte("x")); !errors.Is(err, ErrClosed) {
		t.Fatalf("Send after Close: %v, want ErrClosed", err)
	}
	_ = a.Close()
}

func TestNewQUICConfigErrors(t *testing.T) {
	ca := testCA(t)
	good := testConfig(t, ca, "n1")
	other, err := GenerateCA("other", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	foreign, err := other.Issue("n1", nil, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string]func(c *Config){
		"no TLS":              func(c *Config) { c.TLS = nil },
		"no CA pool":          func(c *Config) { c.TLS = c.TLS.Clone(); c.TLS.RootCAs, c.TLS.ClientCAs = nil, nil },
		"zero max message":    func(c *Config) { c.MaxMessageBytes = 0 },
		"huge max message":    func(c *Config) { c.MaxMessageBytes = 1 << 33 },
		"zero idle timeout":   func(c *Config) { c.MaxIdleTimeout = 0 },
		"zero streams":        func(c *Config) { c.MaxIncomingStreams = 0 },
		"zero conns per peer": func(c *Config) { c.MaxInboundConnsPerPeer = 0 },
		"wrong node name":     func(c *Config) { c.NodeName = "n2" },
		"foreign cert":        func(c *Config) { c.TLS = c.TLS.Clone(); c.TLS.Certificates = []tls.Certificate{foreign.Certificate} },
		"bad listen address":  func(c *Config) { c.ListenAddr = "not an address" },
	}
	for name, mod := range cases {
		t.Run(name, func(t *testing.T) {
			cfg := good
			mod(&cfg)
			if q, err := NewQUIC(cfg); err == nil {
				_ = q.Close()
				t.Fatal("NewQUIC accepted a bad config")
			}
		})
	}
	cfg := good
	cfg.NodeName = "n1"
	cfg.AdvertiseAddr = "n1.example:7947"
	q := startQUIC(t, cfg)
	if q.Addr() != "n1.example:7947" {
		t.Errorf("Addr() = %q, want the advertised address", q.Addr())
	}
}

// Under steady traffic nothing accumulates: per-message goroutines end,
// the connection is reused, and the heap does not grow with the count.
func TestQUICSteadyLoadNoGrowth(t *testing.T) {
	ca := testCA(t)
	a := startQUIC(t, testConfig(t, ca, "a"))
	b := startQUIC(t, testConfig(t, ca, "b"))
	// 4 KiB: anything kept per message would show as 8 MiB of heap.
	msg := make([]byte, 4096)
	round := func(n int) {
		t.Helper()
		var wg sync.WaitGroup
		for s := range 4 {
			wg.Go(func() {
				for range n / 4 {
					if err := a.Send(context.Background(), b.Addr(), msg); err != nil {
						t.Errorf("sender %d: %v", s, err)
						return
					}
				}
			})
		}
		for range n {
			recv(t, b.Inbound(), wait)
		}
		wg.Wait()
	}
	settle := func() (int, uint64) {
		var ms runtime.MemStats
		time.Sleep(50 * time.Millisecond)
		runtime.GC()
		runtime.ReadMemStats(&ms)
		return runtime.NumGoroutine(), ms.HeapAlloc
	}
	round(200) // warm up connections and pools
	g0, h0 := settle()
	round(2000)
	waitFor(t, wait, "per-message goroutines to end", func() bool {
		return runtime.NumGoroutine() <= g0
	})
	_, h1 := settle()
	if h1 > h0+4<<20 {
		t.Errorf("heap grew from %d to %d bytes over 2000 messages", h0, h1)
	}
	a.mu.Lock()
	peers := len(a.peers)
	a.mu.Unlock()
	b.mu.Lock()
	in := len(b.inConns)
	b.mu.Unlock()
	if peers != 1 || in != 1 {
		t.Errorf("a has %d outbound peers, b %d inbound connections; want 1 and 1", peers, in)
	}
}
