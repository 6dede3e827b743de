package router

import (
	"encoding/binary"
	"math/bits"
	"slices"
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

// specialBits flags (at least) the lowest byte of x that is a backslash or
// below 0x20. Both tests may also flag bytes above a real match (borrows),
// never below one, so TrailingZeros finds the first match exactly.
func specialBits(x uint64) uint64 {
	t := x ^ (swarOnes * '\\')
	return ((t-swarOnes)&^t | (x-swarOnes*0x20)&^x) & swarHigh
}

// appendDecoded appends the JSON string body raw, unescaped exactly as
// fastjson unescapes it (best effort: an invalid escape is kept verbatim, a
// lone surrogate stays as its \uXXXX text), with marker bytes escaped as
// appendEsc does: appendDecoded(d, raw) == appendEsc(d, fastjson-unescape(raw)).
//
// It scans 8 bytes at a time for a backslash or a control byte (the latter
// only to catch raw marker bytes, which valid JSON never has) and copies the
// spans in between.
func appendDecoded(dst, raw []byte) []byte {
	dst = slices.Grow(dst, len(raw))
	i, start := 0, 0 // raw[start:i] is plain text not yet copied
	for {
		for i+8 <= len(raw) {
			if m := specialBits(binary.LittleEndian.Uint64(raw[i:])); m != 0 {
				i += bits.TrailingZeros64(m) >> 3
				goto found
			}
			i += 8
		}
		for i < len(raw) && raw[i] != '\\' && raw[i] >= 0x20 {
			i++
		}
		if i == len(raw) {
			return append(dst, raw[start:]...)
		}
	found:
		c := raw[i]
		if c != '\\' {
			if isMarker(c) {
				dst = append(dst, raw[start:i]...)
				dst = append(dst, markEsc, c|0x40)
				start = i + 1
			}
			i++
			continue
		}
		dst = append(dst, raw[start:i]...)
		if i+1 == len(raw) { // cannot end a parsed string; keep it like fastjson would
			return append(dst, '\\')
		}
		ch := raw[i+1]
		i += 2
		switch ch {
		case '"', '\\', '/':
			dst = append(dst, ch)
		case 'n':
			dst = append(dst, '\n')
		case 't':
			dst = append(dst, '\t')
		case 'r':
			dst = append(dst, '\r')
		case 'b':
			dst = append(dst, '\b')
		case 'f':
			dst = append(dst, '\f')
		case 'u':
			dst, i = appendUnicodeEscape(dst, raw, i)
		default:
			dst = append(dst, '\\')
			if isMarker(ch) {
				dst = append(dst, markEsc, ch|0x40)
			} else {
				dst = append(dst, ch)
			}
		}
		start = i
	}
}

// appendUnicodeEscape decodes the \uXXXX escape whose hex digits start at
// raw[i] (a surrogate pair takes a second \uXXXX) and returns where the
// text continues. Invalid sequences are kept as text, as fastjson keeps them.
func appendUnicodeEscape(dst, raw []byte, i int) ([]byte, int) {
	x, ok := hex4(raw[i:])
	if !ok {
		return append(dst, '\\', 'u'), i
	}
	xs := raw[i : i+4]
	i += 4
	if !utf16.IsSurrogate(rune(x)) {
		return appendRuneEsc(dst, rune(x)), i
	}
	if len(raw)-i < 6 || raw[i] != '\\' || raw[i+1] != 'u' {
		return append(append(dst, '\\', 'u'), xs...), i
	}
	x1, ok := hex4(raw[i+2:])
	if !ok {
		return append(append(dst, '\\', 'u'), xs...), i
	}
	return appendRuneEsc(dst, utf16.DecodeRune(rune(x), rune(x1))), i + 6
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
