package kvevents

import (
	"context"
	"io"
	"log"
	"net"
	"sync"
	"testing"
	"time"
)

// silentListener accepts TCP connections on loopback and never answers
// (a hung engine, a wrong port): the ZMTP greeting never comes. accepted
// is signalled at each connection.
func silentListener(t *testing.T) (endpoint string, accepted <-chan struct{}) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan struct{}, 64)
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	}()
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return "tcp://" + l.Addr().String(), ch
}

// returns runs f and fails the test if it has not returned within a
// generous bound (it is meant to return at once; the bound only turns a
// hang into a failure).
func returns(t *testing.T, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatalf("%s never returned", what)
	}
}

func waitAccepted(t *testing.T, accepted <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-accepted:
	case <-time.After(20 * time.Second):
		t.Fatalf("%s never connected", what)
	}
}

// TestReplayFromSilentPeer: a replay socket that accepts the connection
// and never answers does not hold Replay past its context (the library
// runs the handshake with no deadline and does not close the connection
// when the context ends), nor past HandshakeTimeout without one.
func TestReplayFromSilentPeer(t *testing.T) {
	ep, _ := silentListener(t)
	cfg := testConfig()
	cfg.HandshakeTimeout = time.Hour // only the context can end it
	r := &zmqReplayer{endpoint: ep, limits: cfg.limits(), zlog: log.New(io.Discard, "", 0)}
	returns(t, "a replay from a silent peer, its context ended", func() {
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		if err := r.Replay(ctx, 0, func(int64, []byte) bool { return true }); err == nil {
			t.Error("a replay from a silent peer succeeded")
		}
	})
	cfg.HandshakeTimeout = 50 * time.Millisecond // and the handshake's deadline alone
	r.limits = cfg.limits()
	returns(t, "a replay from a silent peer, past the handshake timeout", func() {
		if err := r.Replay(context.Background(), 0, func(int64, []byte) bool { return true }); err == nil {
			t.Error("a replay from a silent peer succeeded")
		}
	})
}

// TestSilentPeerHoldsNoHandoverOrClose: a stream whose replay socket (or
// publisher) accepts connections and never answers can still be handed
// over, and the Manager closed.
func TestSilentPeerHoldsNoHandoverOrClose(t *testing.T) {
	cfg := testConfig()
	cfg.HandshakeTimeout = time.Hour
	cfg.ReplayTimeout = time.Hour // neither bound helps: the cancellation must
	// A live publisher and a silent replay socket: the resync's replay hangs
	// under the consumer's lock; the handover must not wait for it.
	sink := newMemSink(t)
	pub := startPublisher(t, PublisherConfig{Endpoint: "tcp://127.0.0.1:0", Topic: "kv"})
	replayEP, replayAccepted := silentListener(t)
	m := startManager(t, cfg, []StreamConfig{{Backend: "e0", Endpoint: pub.Addr(), ReplayEndpoint: replayEP, Topic: "kv", Model: "m"}}, sink)
	m.SetOwned([]string{"e0"})
	waitAccepted(t, replayAccepted, "the resync's replay")
	returns(t, "a handover during a replay from a silent peer", func() { m.SetOwned(nil) })
	returns(t, "Close after it", func() { m.Close() })

	// A silent publisher: the stream's own dial hangs.
	pubEP, pubAccepted := silentListener(t)
	m2 := startManager(t, cfg, []StreamConfig{{Backend: "e1", Endpoint: pubEP, Topic: "kv", Model: "m"}}, newMemSink(t))
	m2.SetOwned([]string{"e1"})
	waitAccepted(t, pubAccepted, "the stream")
	returns(t, "Close with a silent publisher", func() { m2.Close() })
}
