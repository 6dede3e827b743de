package transport

import (
	"bytes"
	"errors"
	"io"
	"runtime"
	"testing"
	"testing/iotest"
)

func TestReadFrame(t *testing.T) {
	const max = 64
	hdr := func(version byte, n uint32) []byte {
		return []byte{version, byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}
	}
	cases := []struct {
		name    string
		in      []byte
		want    []byte
		wantErr error
	}{
		{"empty payload", frame(nil), []byte{}, nil},
		{"small", frame([]byte("hello")), []byte("hello"), nil},
		{"exactly max", frame(bytes.Repeat([]byte{7}, max)), bytes.Repeat([]byte{7}, max), nil},
		{"over max", frame(bytes.Repeat([]byte{7}, max+1)), nil, ErrMessageTooLarge},
		{"huge announced", append(hdr(1, 1<<32-1), 1, 2, 3), nil, ErrMessageTooLarge},
		{"nothing at all", nil, nil, errMalformed},
		{"short header", []byte{1, 0, 0}, nil, errMalformed},
		{"bad version", append(hdr(2, 1), 'x'), nil, errMalformed},
		{"version zero", append(hdr(0, 1), 'x'), nil, errMalformed},
		{"truncated payload", append(hdr(1, 10), "abc"...), nil, errMalformed},
		{"trailing bytes", append(frame([]byte("ok")), '!'), nil, errMalformed},
		{"two frames", append(frame([]byte("a")), frame([]byte("b"))...), nil, errMalformed},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// One byte per Read exercises every partial-read path.
			for _, r := range []io.Reader{bytes.NewReader(tc.in), iotest.OneByteReader(bytes.NewReader(tc.in))} {
				got, err := readFrame(r, max)
				if tc.wantErr != nil {
					if !errors.Is(err, tc.wantErr) {
						t.Fatalf("err = %v, want %v", err, tc.wantErr)
					}
					if got != nil {
						t.Fatalf("got %q alongside an error", got)
					}
					continue
				}
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, tc.want) || got == nil {
					t.Fatalf("got %q, want %q", got, tc.want)
				}
			}
		})
	}
}

func TestReadFrameUnderlyingErrors(t *testing.T) {
	boom := errors.New("boom")
	in := frame([]byte("payload"))
	// The reader's own error wins, at every point of the frame.
	for cut := 0; cut <= len(in); cut++ {
		r := io.MultiReader(bytes.NewReader(in[:cut]), iotest.ErrReader(boom))
		if _, err := readFrame(r, 64); !errors.Is(err, boom) {
			t.Fatalf("cut at %d: err = %v, want boom", cut, err)
		}
	}
	// A reader that keeps returning (0, nil) must not spin forever.
	if _, err := readFrame(zeroReader{}, 64); !errors.Is(err, io.ErrNoProgress) {
		t.Fatalf("header: err = %v, want io.ErrNoProgress", err)
	}
	r := io.MultiReader(bytes.NewReader(frame([]byte("x"))[:6]), zeroReader{})
	if _, err := readFrame(r, 64); !errors.Is(err, io.ErrNoProgress) {
		t.Fatalf("trailer: err = %v, want io.ErrNoProgress", err)
	}
	r = io.MultiReader(bytes.NewReader(frame([]byte("xyz"))[:6]), zeroReader{})
	if _, err := readFrame(r, 64); !errors.Is(err, io.ErrNoProgress) {
		t.Fatalf("payload: err = %v, want io.ErrNoProgress", err)
	}
}

type zeroReader struct{}

func (zeroReader) Read([]byte) (int, error) { return 0, nil }

// A peer announcing a huge message and sending little must cost little.
func TestReadFrameAllocatesByArrival(t *testing.T) {
	in := append([]byte{frameVersion, 0, 0xF0, 0, 0}, "just a few bytes"...) // announces 15 MiB
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := readFrame(bytes.NewReader(in), DefaultMaxMessageBytes)
	runtime.ReadMemStats(&after)
	if !errors.Is(err, errMalformed) {
		t.Fatalf("err = %v, want errMalformed", err)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 2*growStart {
		t.Fatalf("allocated %d bytes for a 16-byte truncated message, want <= %d", alloc, 2*growStart)
	}

	// A whole large message arriving in small pieces ends in a buffer of
	// exactly its size.
	payload := bytes.Repeat([]byte("kvmesh"), (3*growStart)/6+1)
	got, err := readFrame(iotest.HalfReader(bytes.NewReader(frame(payload))), DefaultMaxMessageBytes)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, payload) || cap(got) != len(payload) {
		t.Fatalf("got %d bytes (cap %d), want %d", len(got), cap(got), len(payload))
	}
}

// FuzzReadFrame feeds arbitrary bytes, as a hostile peer would send on a
// stream, to the receive-side decoder: it must never panic or return more
// than max bytes, must accept exactly the well-formed frames, and what it
// accepts must re-encode to the input.
func FuzzReadFrame(f *testing.F) {
	f.Add(frame([]byte("hello")), uint16(64))
	f.Add(frame(nil), uint16(0))
	f.Add(frame(bytes.Repeat([]byte{1}, 65)), uint16(64))
	f.Add([]byte{1, 0xFF, 0xFF, 0xFF, 0xFF, 1, 2}, uint16(64))
	f.Add([]byte{2, 0, 0, 0, 1, 'x'}, uint16(64))
	f.Add([]byte{1, 0, 0}, uint16(64))
	f.Add(append(frame([]byte("ok")), "trailing"...), uint16(64))
	f.Fuzz(func(t *testing.T, in []byte, max uint16) {
		got, err := readFrame(bytes.NewReader(in), int(max))
		if err != nil {
			if got != nil {
				t.Fatal("data returned with an error")
			}
			if !errors.Is(err, errMalformed) && !errors.Is(err, ErrMessageTooLarge) {
				t.Fatalf("unexpected error class: %v", err)
			}
			return
		}
		if len(got) > int(max) {
			t.Fatalf("accepted %d bytes over max %d", len(got), max)
		}
		if !bytes.Equal(frame(got), in) {
			t.Fatalf("accepted input %x does not re-encode to itself", in)
		}
	})
}
