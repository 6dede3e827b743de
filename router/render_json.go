package router

import (
	"encoding/binary"
	"math/bits"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/valyala/fastjson"
)

// Long text (message content, tool arguments) dominates a request body. Rather
// than let fastjson unescape it in place and then scan the result again for
// marker bytes, Render takes the raw JSON string and decodes it straight
// into Units, escaping markers in the same pass (appendDecoded). fastjson
// unescapes a string the first time its Type is asked for, so these values
// are inspected with peek, which never asks.

// peek returns v's type without triggering fastjson's lazy unescaping and,
// for a string, its raw (still escaped) JSON text. A nil v (absent member)
// reads as null. buf is scratch space; the returned raw may point into it.
//
// peek must see a string value before anything calls v.Type() on it: a
// string already unescaped by fastjson is re-quoted by MarshalTo in Go
// syntax, which appendDecoded does not read.
func peek(v *fastjson.Value, buf []byte) (t fastjson.Type, raw, newBuf []byte) {
	if v == nil {
		return fastjson.TypeNull, nil, buf
	}
	if v.GetObject() != nil {
		return fastjson.TypeObject, nil, buf
	}
	if v.GetArray() != nil {
		return fastjson.TypeArray, nil, buf
	}
	buf = v.MarshalTo(buf[:0]) // only scalars and empty arrays get here
	switch buf[0] {
	case '"':
		return fastjson.TypeString, buf[1 : len(buf)-1], buf
	case '[':
		return fastjson.TypeArray, nil, buf
	case 'n':
		return fastjson.TypeNull, nil, buf
	case 't':
		return fastjson.TypeTrue, nil, buf
	case 'f':
		return fastjson.TypeFalse, nil, buf
	}
	return fastjson.TypeNumber, nil, buf
}

// escOrMarkerBits flags (at least) the lowest byte of x that is a backslash
// or a marker byte: the backslash test may also flag bytes above a real
// match (borrow), never below it, so TrailingZeros finds the first match.
func escOrMarkerBits(x uint64) uint64 {
	t := x ^ (swarOnes * '\\')
	return ((t - swarOnes) & ^t & swarHigh) | markerBits(x)
}

func indexEscOrMarker(s []byte) int {
	i := 0
	for ; i+8 <= len(s); i += 8 {
		if m := escOrMarkerBits(binary.LittleEndian.Uint64(s[i:])); m != 0 {
			return i + bits.TrailingZeros64(m)/8
		}
	}
	for ; i < len(s); i++ {
		if s[i] == '\\' || isMarker(s[i]) {
			return i
		}
	}
	return -1
}

// appendDecoded appends the JSON string body raw, unescaped exactly as
// fastjson unescapes it (best effort: an invalid escape is kept verbatim, a
// lone surrogate stays as its \uXXXX text), with marker bytes escaped as
// appendEsc does. appendDecoded(d, raw) == appendEsc(d, fastjson-unescape(raw)).
func appendDecoded(dst, raw []byte) []byte {
	for {
		i := indexEscOrMarker(raw)
		if i < 0 {
			return append(dst, raw...)
		}
		dst = append(dst, raw[:i]...)
		if c := raw[i]; c != '\\' {
			dst = append(dst, markEsc, c|0x40)
			raw = raw[i+1:]
			continue
		}
		if i+1 >= len(raw) { // cannot end a parsed string; keep it like fastjson would
			return append(dst, '\\')
		}
		ch := raw[i+1]
		raw = raw[i+2:]
		switch ch {
		case '"', '\\', '/':
			dst = append(dst, ch)
		case 'b':
			dst = append(dst, '\b')
		case 'f':
			dst = append(dst, '\f')
		case 'n':
			dst = append(dst, '\n')
		case 'r':
			dst = append(dst, '\r')
		case 't':
			dst = append(dst, '\t')
		case 'u':
			x, ok := hex4(raw)
			if !ok {
				dst = append(dst, '\\', 'u')
				break
			}
			xs := raw[:4]
			raw = raw[4:]
			if !utf16.IsSurrogate(rune(x)) {
				dst = appendRuneEsc(dst, rune(x))
				break
			}
			if len(raw) < 6 || raw[0] != '\\' || raw[1] != 'u' {
				dst = append(dst, '\\', 'u')
				dst = append(dst, xs...)
				break
			}
			x1, ok := hex4(raw[2:])
			if !ok {
				dst = append(dst, '\\', 'u')
				dst = append(dst, xs...)
				break
			}
			dst = appendRuneEsc(dst, utf16.DecodeRune(rune(x), rune(x1)))
			raw = raw[6:]
		default:
			dst = append(dst, '\\')
			if isMarker(ch) {
				dst = append(dst, markEsc, ch|0x40)
			} else {
				dst = append(dst, ch)
			}
		}
	}
}

func appendRuneEsc(dst []byte, r rune) []byte {
	if r >= markEsc && r <= markField {
		return append(dst, markEsc, byte(r)|0x40)
	}
	return utf8.AppendRune(dst, r)
}

// hex4 parses exactly four hex digits at the start of s.
func hex4(s []byte) (uint16, bool) {
	if len(s) < 4 {
		return 0, false
	}
	var x uint16
	for _, c := range s[:4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		case c >= 'A' && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		x = x<<4 | uint16(c)
	}
	return x, true
}
