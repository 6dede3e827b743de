package transport

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
)

// Wire format of one message. Every message travels on its own QUIC
// unidirectional stream:
//
//	+---------+----------------------+-------------------+
//	| version | length (uint32, BE)  | payload (length)  |  FIN
//	+---------+----------------------+-------------------+
//	  1 byte         4 bytes
//
// The stream's FIN ends the message; the length prefix is there so that the
// receiver can refuse an oversized message before reading or allocating it,
// and can tell a truncated message (reset or FIN too early) from a whole one.
// Bytes after the payload are a protocol violation.
//
// Why a stream per message rather than length-prefixed frames on one long
// stream: QUIC streams are cheap (no round trip to open), a 1 MiB full-state
// chunk does not hold up the small deltas queued behind it (no head-of-line
// blocking), one bad message costs one stream reset instead of the
// connection, and there is no shared writer lock. The price, measured by
// BenchmarkFraming (raw quic-go, loopback, 200 B one-way, 2 shared vCPUs):
// ~8 us and 24 allocations per message for a stream each, against ~3 us
// and 3 for frames on one stream. At mesh's rates (a few hundred messages a
// second per peer) that is well under 1% of a core, so isolation wins.
const (
	frameVersion   = 1
	frameHeaderLen = 5
	// maxFrameLen is what the 32-bit length can carry; Config rejects a
	// MaxMessageBytes above it.
	maxFrameLen = 1<<32 - 1
	// growStart bounds the first allocation for a message: a message up to
	// this size is allocated at once; a larger one grows (doubling, never past
	// its declared length) as bytes actually arrive, so a peer that announces
	// 16 MiB and then stalls costs little memory. 64 KiB: a peer may hold
	// MaxInboundConnsPerPeer x MaxIncomingStreams streams (4 x 32) open with
	// a header each, and at 1 MiB those pinned 128 MiB for ReadTimeout from
	// 640 bytes sent; at 64 KiB 8 MiB. The mesh's deltas and load messages
	// are far smaller; a full-transfer chunk of a few MiB grows 6 times.
	growStart = 64 << 10
	// maxEmptyReads is how many (0, nil) reads in a row readFrame tolerates
	// (io.Reader discourages them; io.ReadFull uses the same idea).
	maxEmptyReads = 100
)

// headerPool holds frame headers so that neither Send nor readFrame
// allocates one per message (a slice handed to an io.Reader or to quic-go's
// Write escapes to the heap; both are done with it when the call returns).
var headerPool = sync.Pool{New: func() any { return new([frameHeaderLen]byte) }}

// errMalformed marks a frame that breaks the wire format (as opposed to one
// that is merely too large, or a stream that failed underneath).
var errMalformed = errors.New("transport: malformed frame")

// putFrameHeader writes the header for a payload of n bytes into h, which
// must be frameHeaderLen long.
func putFrameHeader(h []byte, n int) {
	h[0] = frameVersion
	binary.BigEndian.PutUint32(h[1:frameHeaderLen], uint32(n))
}

// parseFrameHeader validates a header and returns the payload length. It
// never trusts the length beyond max.
func parseFrameHeader(h []byte, max int) (int, error) {
	if len(h) < frameHeaderLen {
		return 0, fmt.Errorf("%w: header is %d bytes, want %d", errMalformed, len(h), frameHeaderLen)
	}
	if h[0] != frameVersion {
		return 0, fmt.Errorf("%w: unknown version %d", errMalformed, h[0])
	}
	n := binary.BigEndian.Uint32(h[1:frameHeaderLen])
	if uint64(n) > uint64(max) {
		return 0, fmt.Errorf("%w: %d bytes announced, limit %d", ErrMessageTooLarge, n, max)
	}
	return int(n), nil
}

// readFrame reads exactly one message from r, which must end (io.EOF) right
// after it. It allocates at most the announced length, and never more than
// max. Errors wrap errMalformed, ErrMessageTooLarge, or r's own error.
func readFrame(r io.Reader, max int) ([]byte, error) {
	hp := headerPool.Get().(*[frameHeaderLen]byte) // r.Read would move a local array to the heap
	defer headerPool.Put(hp)
	h := hp[:]
	empty := 0 // consecutive (0, nil) reads: a broken reader must not spin us
	for k := 0; k < frameHeaderLen; {
		m, err := r.Read(h[k:])
		k += m
		if k == frameHeaderLen {
			break // a final io.EOF here surfaces again below
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil, fmt.Errorf("%w: stream ended after %d header bytes", errMalformed, k)
			}
			return nil, err
		}
		if m == 0 {
			if empty++; empty > maxEmptyReads {
				return nil, io.ErrNoProgress
			}
			continue
		}
		empty = 0
	}
	n, err := parseFrameHeader(h, max)
	if err != nil {
		return nil, err
	}
	buf := make([]byte, 0, min(n, growStart))
	empty = 0
	for len(buf) < n {
		if len(buf) == cap(buf) {
			grown := make([]byte, len(buf), min(2*cap(buf), n))
			copy(grown, buf)
			buf = grown
		}
		k, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+k]
		if k == 0 && err == nil {
			if empty++; empty > maxEmptyReads {
				return nil, io.ErrNoProgress
			}
			continue
		}
		empty = 0
		if err != nil {
			if errors.Is(err, io.EOF) && len(buf) < n {
				return nil, fmt.Errorf("%w: stream ended after %d of %d payload bytes", errMalformed, len(buf), n)
			}
			if !errors.Is(err, io.EOF) {
				return nil, err
			}
		}
	}
	// The message must be followed by the end of the stream.
	var one [1]byte
	for range maxEmptyReads {
		k, err := r.Read(one[:])
		if k > 0 {
			return nil, fmt.Errorf("%w: bytes after the %d-byte payload", errMalformed, n)
		}
		if errors.Is(err, io.EOF) {
			return buf, nil
		}
		if err != nil {
			return nil, err
		}
	}
	return nil, io.ErrNoProgress
}
