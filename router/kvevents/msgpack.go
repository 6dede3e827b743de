package kvevents

import (
	"encoding/binary"
	"fmt"
	"math"
)

// reader is a bounded msgpack reader over one payload. Every length it
// reads is checked against the bytes left, so a hostile length can neither
// allocate nor loop beyond the input; nesting is bounded by maxDepth. The
// first error sticks: later reads return zero values and the caller checks
// r.err once.
type reader struct {
	b   []byte
	i   int
	err error
}

// maxDepth bounds nesting when skipping values we do not read (extra keys,
// unknown fields). vLLM's deepest value is 4 levels (batch, events, event,
// extra keys tuple); 32 leaves room for any future field.
const maxDepth = 32

// DecodeError is a payload that is not a valid event batch.
type DecodeError struct {
	Off int
	Msg string
}

func (e *DecodeError) Error() string { return fmt.Sprintf("kvevents: at byte %d: %s", e.Off, e.Msg) }

func (r *reader) fail(format string, args ...any) {
	if r.err == nil {
		r.err = &DecodeError{Off: r.i, Msg: fmt.Sprintf(format, args...)}
	}
}

func (r *reader) left() int { return len(r.b) - r.i }

func (r *reader) byte1() byte {
	if r.err != nil {
		return 0
	}
	if r.i >= len(r.b) {
		r.fail("unexpected end of payload")
		return 0
	}
	c := r.b[r.i]
	r.i++
	return c
}

func (r *reader) take(n int) []byte {
	if r.err != nil {
		return nil
	}
	if n < 0 || n > r.left() {
		r.fail("length %d exceeds the %d bytes left", n, r.left())
		return nil
	}
	p := r.b[r.i : r.i+n]
	r.i += n
	return p
}

func (r *reader) u16() int {
	p := r.take(2)
	if p == nil {
		return 0
	}
	return int(binary.BigEndian.Uint16(p))
}
func (r *reader) u32() uint32 {
	p := r.take(4)
	if p == nil {
		return 0
	}
	return binary.BigEndian.Uint32(p)
}
func (r *reader) u64() uint64 {
	p := r.take(8)
	if p == nil {
		return 0
	}
	return binary.BigEndian.Uint64(p)
}

// peek returns the next type byte without consuming it (0xc1, never valid,
// at the end or after an error).
func (r *reader) peek() byte {
	if r.err != nil || r.i >= len(r.b) {
		return 0xc1
	}
	return r.b[r.i]
}

// isNil consumes a nil if one is next.
func (r *reader) isNil() bool {
	if r.peek() == 0xc0 {
		r.i++
		return true
	}
	return false
}

// count checks a container length: each element takes at least one byte,
// so a length beyond the bytes left is a lie.
func (r *reader) count(n int, per int) int {
	if n < 0 || n > r.left()/per {
		r.fail("container of %d elements exceeds the %d bytes left", n, r.left())
		return 0
	}
	return n
}

// arrayLen reads an array header.
func (r *reader) arrayLen() int {
	c := r.byte1()
	switch {
	case c >= 0x90 && c <= 0x9f:
		return r.count(int(c&0x0f), 1)
	case c == 0xdc:
		return r.count(r.u16(), 1)
	case c == 0xdd:
		return r.count(int(r.u32()), 1)
	}
	if r.err == nil {
		r.i--
		r.fail("expected an array, found type byte 0x%02x", c)
	}
	return 0
}

// mapLen reads a map header (the number of key/value pairs).
func (r *reader) mapLen() int {
	c := r.byte1()
	switch {
	case c >= 0x80 && c <= 0x8f:
		return r.count(int(c&0x0f), 2)
	case c == 0xde:
		return r.count(r.u16(), 2)
	case c == 0xdf:
		return r.count(int(r.u32()), 2)
	}
	if r.err == nil {
		r.i--
		r.fail("expected a map, found type byte 0x%02x", c)
	}
	return 0
}

// strBytes reads a str (or bin) and returns its bytes, aliasing the payload.
func (r *reader) strBytes() []byte {
	c := r.byte1()
	switch {
	case c >= 0xa0 && c <= 0xbf:
		return r.take(int(c & 0x1f))
	case c == 0xd9 || c == 0xc4:
		return r.take(int(r.byte1()))
	case c == 0xda || c == 0xc5:
		return r.take(r.u16())
	case c == 0xdb || c == 0xc6:
		return r.take(int(r.u32()))
	}
	if r.err == nil {
		r.i--
		r.fail("expected a string, found type byte 0x%02x", c)
	}
	return nil
}

// intVal reads any msgpack integer as an int64 (uint64 values above
// MaxInt64 are an error: nothing we read can be that large).
func (r *reader) intVal() int64 {
	c := r.byte1()
	switch {
	case c <= 0x7f:
		return int64(c)
	case c >= 0xe0:
		return int64(int8(c))
	}
	switch c {
	case 0xcc:
		return int64(r.byte1())
	case 0xcd:
		return int64(r.u16())
	case 0xce:
		return int64(r.u32())
	case 0xcf:
		v := r.u64()
		if v > math.MaxInt64 {
			r.fail("integer %d out of range", v)
			return 0
		}
		return int64(v)
	case 0xd0:
		return int64(int8(r.byte1()))
	case 0xd1:
		return int64(int16(r.u16()))
	case 0xd2:
		return int64(int32(r.u32()))
	case 0xd3:
		return int64(r.u64())
	}
	if r.err == nil {
		r.i--
		r.fail("expected an integer, found type byte 0x%02x", c)
	}
	return 0
}

// floatVal reads a float (or an integer, which a producer may use for a
// whole-second timestamp).
func (r *reader) floatVal() float64 {
	switch r.peek() {
	case 0xca:
		r.i++
		return float64(math.Float32frombits(r.u32()))
	case 0xcb:
		r.i++
		return math.Float64frombits(r.u64())
	}
	return float64(r.intVal())
}

// hashVal reads an engine block hash: an integer (vLLM's builtin hashes) or
// bytes (sha256 variants), folded into a Hash.
func (r *reader) hashVal() Hash {
	c := r.peek()
	if (c >= 0xa0 && c <= 0xbf) || c == 0xc4 || c == 0xc5 || c == 0xc6 || c == 0xd9 || c == 0xda || c == 0xdb {
		return hashBytes(r.strBytes())
	}
	if c == 0xcf { // a uint64 above MaxInt64 is a valid 64-bit hash
		r.i++
		return Hash(r.u64())
	}
	return Hash(uint64(r.intVal()))
}

// skip consumes one value of any type.
func (r *reader) skip(depth int) {
	if depth > maxDepth {
		r.fail("nesting deeper than %d", maxDepth)
		return
	}
	c := r.byte1()
	if r.err != nil {
		return
	}
	switch {
	case c <= 0x7f || c >= 0xe0 || c == 0xc0 || c == 0xc2 || c == 0xc3:
		return
	case c >= 0x80 && c <= 0x8f:
		r.skipN(2*int(c&0x0f), depth)
		return
	case c >= 0x90 && c <= 0x9f:
		r.skipN(int(c&0x0f), depth)
		return
	case c >= 0xa0 && c <= 0xbf:
		r.take(int(c & 0x1f))
		return
	}
	switch c {
	case 0xc4, 0xd9:
		r.take(int(r.byte1()))
	case 0xc5, 0xda:
		r.take(r.u16())
	case 0xc6, 0xdb:
		r.take(int(r.u32()))
	case 0xc7:
		n := int(r.byte1())
		r.take(1 + n)
	case 0xc8:
		n := r.u16()
		r.take(1 + n)
	case 0xc9:
		n := int(r.u32())
		r.take(1 + n)
	case 0xca:
		r.take(4)
	case 0xcb:
		r.take(8)
	case 0xcc, 0xd0:
		r.take(1)
	case 0xcd, 0xd1:
		r.take(2)
	case 0xce, 0xd2:
		r.take(4)
	case 0xcf, 0xd3:
		r.take(8)
	case 0xd4:
		r.take(2)
	case 0xd5:
		r.take(3)
	case 0xd6:
		r.take(5)
	case 0xd7:
		r.take(9)
	case 0xd8:
		r.take(17)
	case 0xdc:
		r.skipN(r.count(r.u16(), 1), depth)
	case 0xdd:
		r.skipN(r.count(int(r.u32()), 1), depth)
	case 0xde:
		r.skipN(2*r.count(r.u16(), 2), depth)
	case 0xdf:
		r.skipN(2*r.count(int(r.u32()), 2), depth)
	default: // 0xc1
		r.i--
		r.fail("invalid type byte 0x%02x", c)
	}
}

func (r *reader) skipN(n, depth int) {
	if r.count(n, 1) != n {
		return
	}
	for k := 0; k < n && r.err == nil; k++ {
		r.skip(depth + 1)
	}
}
