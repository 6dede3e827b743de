package kvevents

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"testing"
	"time"
)

// countingConn serves a byte stream whose bytes have all arrived, counting
// the reads it is asked for; its last read returns io.EOF with the last
// bytes, as a connection the peer closed may.
type countingConn struct {
	net.Conn
	r     *bytes.Reader
	reads int
	// chunks, when set, caps each read in turn (cycling): the bytes arrive
	// in pieces of those sizes.
	chunks []byte
}

func (c *countingConn) Read(p []byte) (int, error) {
	if len(c.chunks) > 0 {
		p = p[:min(len(p), 1+int(c.chunks[c.reads%len(c.chunks)]))]
	}
	c.reads++
	n, err := c.r.Read(p)
	if err == nil && c.r.Len() == 0 {
		err = io.EOF
	}
	return n, err
}

func (c *countingConn) SetReadDeadline(time.Time) error { return nil }
func (c *countingConn) Close() error                    { return nil }

// readFrames reads the stream as the ZMQ library does, a read for each
// frame's header and one for its body, and returns the frames' bodies up
// to the end of the stream (err nil) or the first failed read.
func readFrames(r io.Reader) (frames [][]byte, err error) {
	greeting := make([]byte, zmtpGreeting)
	if _, err := io.ReadFull(r, greeting); err != nil {
		return nil, err
	}
	for {
		body, err := zmtpFrameBody(r)
		if errors.Is(err, io.EOF) {
			return frames, nil
		} else if err != nil {
			return frames, err
		}
		frames = append(frames, body)
	}
}

func TestGuardedConnReadsAheadAfterTheHandshake(t *testing.T) {
	stream := zmtpHello()
	var want [][]byte
	want = append(want, stream[zmtpGreeting+2:]) // the READY command's body
	for i := range 20 {
		topic, seq, payload := []byte("kv@e0"), make([]byte, 8), bytes.Repeat([]byte{byte(i)}, 100+40*i)
		binary.BigEndian.PutUint64(seq, uint64(i))
		stream = zmtpFrame(stream, zmtpMore, topic)
		stream = zmtpFrame(stream, zmtpMore, seq)
		stream = zmtpFrame(stream, 0, payload)
		want = append(want, topic, seq, payload)
	}
	cc := &countingConn{r: bytes.NewReader(stream)}
	gc := newGuardedConn(cc, frameLimits{maxBytes: 1 << 20, maxFrames: 8, handshake: time.Second})
	got, err := readFrames(gc)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("%d frames, want %d", len(got), len(want))
	}
	for i := range want {
		if !bytes.Equal(got[i], want[i]) {
			t.Fatalf("frame %d is %q, want %q", i, got[i], want[i])
		}
	}
	if gc.handshake {
		t.Fatal("the handshake never ended")
	}
	// The greeting and the READY command are read as the library asks (3
	// reads: greeting, header, body); the 60 frames after them (about 7 KB)
	// take one read of the connection, not two each.
	if cc.reads > 4 {
		t.Fatalf("%d reads of the connection for %d frames", cc.reads, len(want))
	}
}

// Frames longer than the buffer are read straight into the library's
// buffer, between frames read ahead.
func TestGuardedConnReadAheadLongFrames(t *testing.T) {
	stream := zmtpHello()
	want := [][]byte{stream[zmtpGreeting+2:]}
	for i, size := range []int{10, readAhead - 5, 3, readAhead + 7, 100 << 10, 1, 0, 2 * readAhead} {
		body := bytes.Repeat([]byte{byte('a' + i)}, size)
		stream = zmtpFrame(stream, 0, body)
		want = append(want, body)
	}
	for _, chunks := range [][]byte{nil, {0}, {255, 7, 200}} {
		cc := &countingConn{r: bytes.NewReader(stream), chunks: chunks}
		gc := newGuardedConn(cc, frameLimits{maxBytes: 1 << 20, maxFrames: 8, handshake: time.Second})
		got, err := readFrames(gc)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(want) {
			t.Fatalf("chunks %v: %d frames, want %d", chunks, len(got), len(want))
		}
		for i := range want {
			if !bytes.Equal(got[i], want[i]) {
				t.Fatalf("chunks %v: frame %d differs (%d bytes, want %d)", chunks, i, len(got[i]), len(want[i]))
			}
		}
		if n, err := gc.Read(nil); n != 0 || err != nil {
			t.Fatalf("an empty read gave %d, %v", n, err)
		}
	}
}

func TestGuardedConnReadAheadKeepsTheGuard(t *testing.T) {
	// A whole message, then one whose second frame is over the limit: one
	// read of the connection takes in both. The first message and the
	// second's first frame are read; the oversized header is not.
	stream := zmtpHello()
	stream = zmtpFrame(stream, zmtpMore, []byte("kv@e0"))
	stream = zmtpFrame(stream, 0, []byte("batch"))
	stream = zmtpFrame(stream, zmtpMore, []byte("kv@e0"))
	stream = zmtpFrame(stream, 0, make([]byte, 300)) // over maxBytes
	stream = zmtpFrame(stream, 0, []byte("next"))
	cc := &countingConn{r: bytes.NewReader(stream)}
	gc := newGuardedConn(cc, frameLimits{maxBytes: 200, maxFrames: 8, handshake: time.Second})
	got, err := readFrames(gc)
	if !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("read past an oversized frame's header: %v, want ErrFrameTooLarge", err)
	}
	want := []string{"READY", "kv@e0", "batch", "kv@e0"}
	if len(got) != len(want) {
		t.Fatalf("%d frames before the error, want %d", len(got), len(want))
	}
	for i, w := range want[1:] {
		if string(got[i+1]) != w {
			t.Fatalf("frame %d is %q, want %q", i+1, got[i+1], w)
		}
	}
	var b [2]byte
	if _, err := gc.Read(b[:]); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("read after the guard failed: %v", err)
	}
}

// FuzzGuardedConnReadAhead: whatever the peer sends after its handshake, in
// whatever pieces it arrives, the library reads through the read-ahead the
// same frames as from the bytes before the header the guard refuses, and
// then the guard's error.
func FuzzGuardedConnReadAhead(f *testing.F) {
	f.Add([]byte{1, 5, 'k', 'v', '@', 'e', '0', 0, 3, 'a', 'b', 'c'}, []byte{3})
	f.Add([]byte{1, 5, 'k', 'v', '@', 'e', '0', 2, 0, 0, 0, 0, 0, 0, 1, 0}, []byte{0, 200})
	f.Add([]byte{0, 250}, []byte{})
	f.Fuzz(func(t *testing.T, tail, chunks []byte) {
		lim := frameLimits{maxBytes: 300, maxFrames: 3, handshake: time.Second}
		stream := append(zmtpHello(), tail...)
		ref := newFrameGuard(lim)
		valid, refErr := ref.feedValid(stream)
		want, wantErr := readFrames(bytes.NewReader(stream[:valid]))
		gc := newGuardedConn(&countingConn{r: bytes.NewReader(stream), chunks: chunks}, lim)
		got, err := readFrames(gc)
		if refErr != nil {
			wantErr = refErr
			if !errors.Is(err, ErrFrameTooLarge) {
				t.Fatalf("the guard refused a header, the reads ended with %v", err)
			}
		} else if (err == nil) != (wantErr == nil) {
			t.Fatalf("read error %v, want %v", err, wantErr)
		}
		if len(got) != len(want) {
			t.Fatalf("%d frames, want %d (error %v)", len(got), len(want), wantErr)
		}
		for i := range want {
			if !bytes.Equal(got[i], want[i]) {
				t.Fatalf("frame %d is %q, want %q", i, got[i], want[i])
			}
		}
	})
}
