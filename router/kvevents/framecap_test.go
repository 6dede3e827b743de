package kvevents

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"
)

// zmtpFrame appends one ZMTP frame (short or long form).
func zmtpFrame(dst []byte, flags byte, body []byte) []byte {
	if len(body) > 255 {
		dst = append(dst, flags|zmtpLong)
		dst = binary.BigEndian.AppendUint64(dst, uint64(len(body)))
	} else {
		dst = append(dst, flags, byte(len(body)))
	}
	return append(dst, body...)
}

// zmtpHello is a PUB peer's side of a ZMTP 3.0 handshake with the NULL
// mechanism: the greeting and a READY command.
func zmtpHello() []byte {
	g := make([]byte, zmtpGreeting)
	g[0], g[9], g[10] = 0xFF, 0x7F, 3
	copy(g[12:], "NULL")
	ready := append([]byte{5}, "READY"...)
	ready = append(ready, byte(len("Socket-Type")))
	ready = append(ready, "Socket-Type"...)
	ready = binary.BigEndian.AppendUint32(ready, 3)
	ready = append(ready, "PUB"...)
	return zmtpFrame(g, 0x04, ready)
}

func TestFrameGuardFollowsFraming(t *testing.T) {
	lim := frameLimits{maxBytes: 1000, maxFrames: 4}
	ok := zmtpHello()
	ok = zmtpFrame(ok, zmtpMore, []byte("topic"))
	ok = zmtpFrame(ok, zmtpMore, make([]byte, 8))
	ok = zmtpFrame(ok, 0, make([]byte, 900)) // long form; 913 bytes in the message
	ok = zmtpFrame(ok, 0, make([]byte, 1000))
	cases := []struct {
		name string
		wire []byte
		bad  bool
	}{
		{"within the limits", ok, false},
		{"one frame over", zmtpFrame(bytes.Clone(ok), 0, make([]byte, 1001)), true},
		{"a header declaring 2^50 bytes", append(zmtpHello(), zmtpLong, 0, 4, 0, 0, 0, 0, 0, 0), true},
		{"frames that add up past the limit", zmtpFrame(zmtpFrame(bytes.Clone(ok), zmtpMore, make([]byte, 600)), 0, make([]byte, 600)), true},
		{"too many frames", zmtpFrame(zmtpFrame(zmtpFrame(zmtpFrame(zmtpFrame(bytes.Clone(ok), zmtpMore, nil), zmtpMore, nil), zmtpMore, nil), zmtpMore, nil), 0, nil), true},
	}
	for _, c := range cases {
		for _, chunk := range []int{1, 2, 7, 64, 1 << 20} {
			g := newFrameGuard(lim)
			var err error
			for p := c.wire; len(p) > 0 && err == nil; {
				n := min(chunk, len(p))
				err = g.feed(p[:n])
				p = p[n:]
			}
			if bad := errors.Is(err, ErrFrameTooLarge); bad != c.bad {
				t.Errorf("%s, read %d bytes at a time: err %v", c.name, chunk, err)
			}
		}
	}
}

// TestListenSurvivesOversizedFrame: a peer of the listen socket that
// completes the handshake and declares a 2^50-byte frame loses its
// connection; before the guard the library allocated it and the process
// died. The engines' streams go on.
func TestListenSurvivesOversizedFrame(t *testing.T) {
	sink := newMemSink(t)
	cfg := testConfig()
	cfg.Listen = "tcp://127.0.0.1:0"
	m := startManager(t, cfg, []StreamConfig{{Backend: "a", Topic: "engine-a", Model: "m"}}, sink)
	addr := strings.TrimPrefix(m.ListenAddr(), "tcp://")
	for _, size := range []uint64{1 << 50, 1 << 40, uint64(cfg.MaxMessageBytes) + 1} {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		attack := append(zmtpHello(), zmtpLong)
		attack = binary.BigEndian.AppendUint64(attack, size)
		if _, err := c.Write(attack); err != nil {
			t.Fatal(err)
		}
		awaitClosed(t, c, fmt.Sprintf("a connection that declared %d bytes", size))
		c.Close()
	}
	p := startPublisher(t, PublisherConfig{Connect: m.ListenAddr(), Topic: "engine-a"})
	toks := tokens(16*3, 40)
	want := routerChain(t, "m", "", toks)
	waitFor(t, "the engine's stream after the attack", func() bool {
		p.Publish(storedBatch(toks, 0, 3))
		return sink.has("a", want)
	})
	if m.listenErrors.Load() == 0 {
		t.Fatal("the refused connections were not counted")
	}
}

// FuzzFrameGuard: any bytes, read in any pieces, get the same verdict as
// read at once, and no panic.
func FuzzFrameGuard(f *testing.F) {
	f.Add(zmtpHello(), uint8(3))
	f.Add(append(zmtpHello(), zmtpLong, 0, 4, 0, 0, 0, 0, 0, 0), uint8(1))
	f.Add(zmtpFrame(zmtpHello(), zmtpMore, make([]byte, 300)), uint8(9))
	f.Fuzz(func(t *testing.T, wire []byte, chunk uint8) {
		lim := frameLimits{maxBytes: 512, maxFrames: 4}
		whole := newFrameGuard(lim)
		want := whole.feed(wire)
		g := newFrameGuard(lim)
		var got error
		step := int(chunk%16) + 1
		for p := wire; len(p) > 0 && got == nil; {
			n := min(step, len(p))
			got = g.feed(p[:n])
			p = p[n:]
		}
		if (got == nil) != (want == nil) {
			t.Fatalf("in pieces of %d: %v; at once: %v", step, got, want)
		}
	})
}

// TestListenSurvivesSilentClient: a client that connects to the listen
// socket and sends nothing holds the library's accept loop only until
// HandshakeTimeout; an engine connecting after it gets through.
func TestListenSurvivesSilentClient(t *testing.T) {
	sink := newMemSink(t)
	cfg := testConfig()
	cfg.Listen = "tcp://127.0.0.1:0"
	cfg.HandshakeTimeout = 100 * time.Millisecond
	m := startManager(t, cfg, []StreamConfig{{Backend: "a", Topic: "engine-a", Model: "m"}}, sink)
	silent, err := net.Dial("tcp", strings.TrimPrefix(m.ListenAddr(), "tcp://"))
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	p := startPublisher(t, PublisherConfig{Connect: m.ListenAddr(), Topic: "engine-a"})
	toks := tokens(16*2, 50)
	want := routerChain(t, "m", "", toks)
	waitFor(t, "the engine behind a silent client", func() bool {
		p.Publish(storedBatch(toks, 0, 2))
		return sink.has("a", want)
	})
	awaitClosed(t, silent, "the silent connection")
}

// awaitClosed reads c until the node closes it (the greeting it sent first,
// then EOF or a reset); a read timing out means it stayed open.
func awaitClosed(t *testing.T, c net.Conn, what string) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
	buf := make([]byte, 4096)
	for {
		if _, err := c.Read(buf); err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatalf("%s stayed open", what)
			}
			return
		}
	}
}
