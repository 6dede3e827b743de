package kvevents

import (
	"context"
	"encoding/binary"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// readZMTPFrame reads one ZMTP frame (a command or a message part).
func readZMTPFrame(r io.Reader) error {
	_, err := zmtpFrameBody(r)
	return err
}

// zmtpFrameBody reads one ZMTP frame and returns its body: io.EOF when the
// stream ends before it, io.ErrUnexpectedEOF inside it.
func zmtpFrameBody(r io.Reader) ([]byte, error) {
	var h [9]byte
	if _, err := io.ReadFull(r, h[:2]); err != nil {
		return nil, err
	}
	size := uint64(h[1])
	if h[0]&zmtpLong != 0 {
		if _, err := io.ReadFull(r, h[2:9]); err != nil {
			return nil, err
		}
		size = binary.BigEndian.Uint64(h[1:9])
	}
	body := make([]byte, size)
	_, err := io.ReadFull(r, body)
	return body, err
}

// flakyPublisher is a PUB peer on loopback that completes each connection's
// handshake, waits for the subscription, sends what script(i) gives for
// the i-th connection and then a frame header over every limit, which
// ends the connection (an engine resending a message over
// MaxMessageBytes).
func flakyPublisher(t *testing.T, script func(i int) []byte) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { l.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			c, err := l.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(20 * time.Second))
				if _, err := c.Write(zmtpHello()); err != nil {
					return
				}
				// The subscriber's greeting, READY, and subscription.
				if _, err := io.CopyN(io.Discard, c, zmtpGreeting); err != nil || readZMTPFrame(c) != nil || readZMTPFrame(c) != nil {
					return
				}
				out := append(script(i), zmtpLong)
				out = binary.BigEndian.AppendUint64(out, 1<<50)
				_, _ = c.Write(out)
				_, _ = io.Copy(io.Discard, c) // until the subscriber closes
			}()
		}
	}()
	return "tcp://" + l.Addr().String()
}

// zmtpMessage is the wire form of an event message [topic, seq, payload].
func zmtpMessage(topic string, seq int64, b *Batch) []byte {
	out := zmtpFrame(nil, zmtpMore, []byte(topic))
	out = zmtpFrame(out, zmtpMore, AppendSeq(nil, seq))
	return zmtpFrame(out, 0, AppendBatch(nil, b, EncodingArray))
}

// TestDialBacksOffConnectionsThatFail: a publisher whose every connection
// ends before it delivers a message is reconnected after waits that double
// up to maxDialBackoff (each reconnection resyncs, which invalidates the
// backend mesh-wide with a replay socket); a connection that delivered a
// message resets the wait to DialRetry. The waits are recorded, not slept.
func TestDialBacksOffConnectionsThatFail(t *testing.T) {
	const healthy = 6 // the connection that delivers a message
	ep := flakyPublisher(t, func(i int) []byte {
		if i == healthy {
			return zmtpMessage("kv", int64(i), &Batch{DPRank: -1})
		}
		return nil
	})
	cfg := testConfig()
	cfg.DialRetry = 10 * time.Millisecond
	sink := newMemSink(t)
	m := startManager(t, cfg, []StreamConfig{{Backend: "e0", Endpoint: ep, Topic: "kv", Model: "m"}}, sink)
	const conns = 20
	waits := make(chan time.Duration, conns)
	m.wait = func(ctx context.Context, d time.Duration) {
		select {
		case waits <- d:
		default:
			<-ctx.Done() // enough recorded
		}
	}
	m.SetOwned([]string{"e0"})
	var got []time.Duration
	for len(got) < conns {
		select {
		case d := <-waits:
			got = append(got, d)
		case <-time.After(20 * time.Second):
			t.Fatalf("%d reconnections, want %d: %v", len(got), conns, got)
		}
	}
	m.Close()
	base := cfg.DialRetry
	for i, d := range got {
		if i == healthy {
			base = cfg.DialRetry
		}
		if d < base/2 || d > base {
			t.Fatalf("wait %d after connection %d: %v, want in [%v, %v] (all: %v)", i, i, d, base/2, base, got)
		}
		base = min(2*base, maxDialBackoff)
	}
	if got[conns-1] < maxDialBackoff/2 {
		t.Fatalf("the waits did not reach the cap: %v", got)
	}
	if cc, _, _ := m.consumers["e0"].snapshot(); cc.applied != 1 {
		t.Fatalf("%d messages applied, want 1 (connection %d's)", cc.applied, healthy)
	}
}
