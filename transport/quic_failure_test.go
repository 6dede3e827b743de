package transport

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Failure paths: peers that go away, do not exist, or stop reading.

func TestQUICRedialAfterRestart(t *testing.T) {
	defer checkGoroutines(t)()
	ca := testCA(t)
	reg := prometheus.NewRegistry()
	acfg := testConfig(t, ca, "a")
	acfg.Registerer = reg
	// Dialling a stopped node takes a handshake timeout (UDP has no
	// connection refused), so keep it short here.
	acfg.HandshakeTimeout = 500 * time.Millisecond
	acfg.DialTimeout = 500 * time.Millisecond
	a := startQUIC(t, acfg)
	bcfg := testConfig(t, ca, "b")
	b := startQUIC(t, bcfg)
	addr := b.Addr()
	ctx := context.Background()
	if err := a.Send(ctx, addr, []byte("one")); err != nil {
		t.Fatal(err)
	}
	recv(t, b.Inbound(), wait)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	// b's CONNECTION_CLOSE makes a forget the connection.
	waitFor(t, wait, "outbound connection dropped", func() bool {
		return metricValue(t, reg, "kvmesh_transport_connections", "direction", "outbound") == 0
	})
	// While b is down, Sends fail (dial error or backoff), they do not hang:
	// the failure is the dial's (DialTimeout), not the Send's own deadline
	// running out (SendTimeout, far longer), which counts as "cancelled".
	dialErrs := metricValue(t, reg, "kvmesh_transport_send_errors_total", "reason", reasonDial)
	if err := a.Send(ctx, addr, []byte("lost")); err == nil {
		t.Fatal("Send to a stopped node succeeded")
	}
	if v := metricValue(t, reg, "kvmesh_transport_send_errors_total", "reason", reasonDial); v != dialErrs+1 {
		t.Fatalf("send_errors_total{dial} went from %v to %v: the Send to a stopped node did not fail on the dial", dialErrs, v)
	}
	if v := metricValue(t, reg, "kvmesh_transport_send_errors_total", "reason", reasonCancelled); v != 0 {
		t.Fatalf("send_errors_total{cancelled} = %v: a Send to a stopped node waited for its deadline", v)
	}

	// Restart b on the same address with the same identity.
	bcfg.ListenAddr = addr
	b2 := startQUIC(t, bcfg)
	deadline := time.Now().Add(wait)
	for {
		err := a.Send(ctx, addr, []byte("two"))
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no successful Send after restart: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if m := recv(t, b2.Inbound(), wait); string(m.Data) != "two" || m.From != "a" {
		t.Fatalf("got %q from %q", m.Data, m.From)
	}
	if v := metricValue(t, reg, "kvmesh_transport_dials_total", "result", "ok"); v != 2 {
		t.Errorf("dials_total{ok} = %v, want 2 (first dial and re-dial)", v)
	}
	_ = a.Close()
	_ = b2.Close()
}

func TestQUICBackpressureAndCloseAbortsSends(t *testing.T) {
	defer checkGoroutines(t)()
	ca := testCA(t)
	bcfg := testConfig(t, ca, "slow-b")
	bcfg.InboundQueueLen = 1
	bcfg.MaxIncomingStreams = 2
	b := startQUIC(t, bcfg)
	acfg := testConfig(t, ca, "a")
	// A blocked Send can only end through Close's abort: its own deadline
	// is far beyond how long the test waits for it.
	acfg.SendTimeout = time.Hour
	a := startQUIC(t, acfg)

	// Nobody reads b's Inbound: after a handful of messages (queue, slots
	// and QUIC stream credit) Sends must block and time out, not pile up.
	var ok, timedOut int
	for i := 0; i < 20 && timedOut == 0; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := a.Send(ctx, b.Addr(), []byte{byte(i)})
		cancel()
		switch {
		case err == nil:
			ok++
		case errors.Is(err, context.DeadlineExceeded):
			timedOut++
		default:
			t.Fatalf("send %d: %v", i, err)
		}
	}
	if timedOut == 0 {
		t.Fatalf("20 Sends to a stalled consumer all succeeded; no backpressure")
	}
	if ok > 10 {
		t.Errorf("%d Sends succeeded before backpressure, want a handful", ok)
	}
	// Every successful Send is delivered once the consumer reads.
	for range ok {
		recv(t, b.Inbound(), wait)
	}

	// Close while a Send is blocked: it returns ErrClosed quickly.
	for len(b.Inbound()) < cap(b.Inbound()) { // refill the queue
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		err := a.Send(ctx, b.Addr(), []byte("fill"))
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	blocked := make(chan error, 1)
	go func() {
		var err error
		for err == nil {
			err = a.Send(context.Background(), b.Addr(), []byte("blocked"))
		}
		blocked <- err
	}()
	time.Sleep(100 * time.Millisecond)
	// Close gives the blocked Send DrainTimeout (200 ms), then aborts it:
	// both return, long before the Send's hour-long deadline.
	closed := make(chan error, 1)
	go func() { closed <- a.Close() }()
	select {
	case err := <-blocked:
		if !errors.Is(err, ErrClosed) {
			t.Errorf("blocked Send returned %v, want ErrClosed", err)
		}
	case <-time.After(wait):
		t.Fatal("blocked Send did not return after Close")
	}
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(wait):
		t.Fatal("Close did not return with a blocked Send")
	}
	_ = b.Close()
}

func TestQUICDialFailureSharedAndBackedOff(t *testing.T) {
	defer checkGoroutines(t)()
	ca := testCA(t)
	// An address where nothing listens: bind a UDP port, then free it.
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	dead := c.LocalAddr().String()
	_ = c.Close()

	reg := prometheus.NewRegistry()
	cfg := testConfig(t, ca, "a")
	cfg.Registerer = reg
	cfg.HandshakeTimeout = time.Second // nothing answers: every dial times out
	cfg.DialTimeout = time.Second
	cfg.DialBackoff = time.Hour // nothing below may dial a second time
	a := startQUIC(t, cfg)

	var wg sync.WaitGroup
	var failed sync.Map
	for i := range 10 {
		wg.Go(func() {
			if err := a.Send(context.Background(), dead, []byte("x")); err != nil {
				failed.Store(i, err)
			}
		})
	}
	wg.Wait()
	for i := range 10 {
		if _, ok := failed.Load(i); !ok {
			t.Fatalf("send %d to a dead address succeeded", i)
		}
	}
	// In backoff a Send fails at once: it starts no dial (counted below).
	if err := a.Send(context.Background(), dead, []byte("x")); err == nil {
		t.Fatal("send in backoff succeeded")
	}
	if v := metricValue(t, reg, "kvmesh_transport_dials_total", "result", "error"); v != 1 {
		t.Errorf("dials_total{error} = %v, want 1 (shared dial, then backoff)", v)
	}
	if v := metricValue(t, reg, "kvmesh_transport_send_errors_total", "reason", reasonDial); v != 11 {
		t.Errorf("send_errors_total{dial} = %v, want 11", v)
	}
	// A cancelled caller does not wait for anyone's dial.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := a.Send(ctx, "127.0.0.1:1", []byte("x")); !errors.Is(err, context.Canceled) {
		t.Errorf("send with cancelled ctx: %v, want context.Canceled", err)
	}
	_ = a.Close()
}
