package router

// The canonical rendering (FormatMessages)
//
// A chat, responses or chat-style embeddings request renders to a byte string
// framed by five ASCII control bytes that JSON text almost never carries:
//
//	ESC 0x1B  escape: a content byte in 0x1B..0x1F is written as ESC, byte|0x40
//	FS  0x1C  starts the preamble segment
//	GS  0x1D  starts a content part or a tool call inside a message
//	RS  0x1E  starts a message
//	US  0x1F  starts a field inside a message, part or tool call
//
// Every piece of outside text (roles, names, ids, text, arguments) is written
// through the escape, so a raw marker byte in Units is always framing and the
// rendering is unambiguous without lengths. Tags after GS and US are single
// ASCII letters.
//
// The rendering decides the keys: a change that renders a request other
// than before raises tree.KeyVersion, so that nodes (and snapshots) of the
// old rendering and the new do not mix claims that would never match.
//
//	preamble  = FS canonical-JSON({"tools": [...], ...}) tool definitions and chat-template
//	                                                     options (chat_template, chat_template_kwargs,
//	                                                     documents, functions; for responses also
//	                                                     previous_response_id and conversation's
//	                                                     id, the stored state it continues);
//	                                                     only when any is set
//	message   = RS role [US 'n' name] [US 'i' tool_call_id] part* call*
//	part      = GS 't' text                              text, input_text, output_text
//	          | GS 'r' text                              refusal
//	          | GS 'I' hash                              image_url, input_image
//	          | GS 'A' hash                              input_audio
//	          | GS 'U' hash | GS 'V' hash                audio_url, video_url
//	          | GS 'F' hash                              file, input_file
//	          | GS 'x' type US hash                      any other part type
//	call      = GS 'c' id US name US arguments           tool_calls[i], function_call
//	item      = RS US 'y' type GS 'x' hash               responses item of an unknown type
//
// hash is 16 lowercase hex digits of a 64-bit hash (hash64) of the media
// reference (URL, data URI, base64 payload or file id) or, for unknown
// types, of the canonical JSON of the whole part; the payload itself never
// enters Units. Canonical JSON has object keys sorted bytewise, no
// whitespace, strings re-escaped minimally and numbers re-formatted from
// their float64 value.
//
// Absent, null and empty-string optional fields render alike (nothing), as
// do empty text parts; string content equals a single text part. Each
// message's end is a boundary (Prompt.Ends) and nothing is written after the
// last message, so the rendering of a conversation's first n messages is a
// prefix of the rendering of its first n+1. Responses items map onto the
// same grammar (see render_responses.go), so a conversation sent to either
// API renders alike message by message.
//
// The other formats carry no framing: FormatText is the prompt strings'
// bytes back to back, FormatTokens their token ids as 4-byte little-endian
// words; Ends alone marks the segments.

import (
	"bytes"
	"encoding/binary"
	"math/bits"
	"slices"
	"strconv"

	"github.com/valyala/fastjson"
)

const (
	markEsc      = 0x1B
	markPreamble = 0x1C
	markPart     = 0x1D
	markMsg      = 0x1E
	markField    = 0x1F
)

const (
	swarOnes = 0x0101010101010101
	swarLow7 = 0x7F7F7F7F7F7F7F7F
	swarHigh = 0x8080808080808080
)

// markerBits has the high bit of each byte of x set whose value is in
// 0x1B..0x1F (0x1A < b < 0x20), and no other bit. Exact: bytes >= 0x80 are
// excluded by the ^x term and the per-byte sums never carry or borrow.
func markerBits(x uint64) uint64 {
	y := x & swarLow7
	return (swarOnes*(127+0x20) - y) & ^x & (y + swarOnes*(127-0x1A)) & swarHigh
}

func isMarker(c byte) bool { return c >= markEsc && c <= markField }

// indexMarker returns the index of the first byte of s in 0x1B..0x1F, or -1.
func indexMarker(s []byte) int {
	i := 0
	for ; i+16 <= len(s); i += 16 {
		a := binary.LittleEndian.Uint64(s[i:])
		b := binary.LittleEndian.Uint64(s[i+8:])
		if markerBits(a)|markerBits(b) != 0 {
			if m := markerBits(a); m != 0 {
				return i + bits.TrailingZeros64(m)/8
			}
			return i + 8 + bits.TrailingZeros64(markerBits(b))/8
		}
	}
	for ; i < len(s); i++ {
		if isMarker(s[i]) {
			return i
		}
	}
	return -1
}

// appendEsc appends s escaped so that it contains no raw marker byte.
func appendEsc(dst, s []byte) []byte {
	for {
		i := indexMarker(s)
		if i < 0 {
			return append(dst, s...)
		}
		dst = append(dst, s[:i]...)
		dst = append(dst, markEsc, s[i]|0x40)
		s = s[i+1:]
	}
}

// hash64 is a fast 64-bit non-cryptographic hash (multiply-fold over 16-byte
// stripes). It only has to tell media references apart and be identical on
// every router node, which rules out the per-process seeded hash/maphash.
func hash64(b []byte, seed uint64) uint64 {
	const (
		k0 = 0x9E3779B97F4A7C15
		k1 = 0xC2B2AE3D27D4EB4F
		k2 = 0x165667B19E3779F9
	)
	h := seed ^ k0 ^ uint64(len(b))*k1
	for len(b) >= 16 {
		h = fold(binary.LittleEndian.Uint64(b)^k1^h, binary.LittleEndian.Uint64(b[8:])^k2)
		b = b[16:]
	}
	var a, c uint64
	switch {
	case len(b) >= 8:
		a = binary.LittleEndian.Uint64(b)
		c = binary.LittleEndian.Uint64(b[len(b)-8:])
	case len(b) >= 4:
		a = uint64(binary.LittleEndian.Uint32(b))
		c = uint64(binary.LittleEndian.Uint32(b[len(b)-4:]))
	case len(b) > 0:
		a = uint64(b[0])<<16 | uint64(b[len(b)/2])<<8 | uint64(b[len(b)-1])
	}
	h = fold(a^k1^h, c^k2)
	return fold(h^k0, uint64(len(b))^k2)
}

func fold(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	return hi ^ lo
}

// appendHash appends GS tag and the hex digits of h.
func appendHash(dst []byte, tag byte, h uint64) []byte {
	return appendHex(append(dst, markPart, tag), h)
}

// appendHex appends h as 16 lowercase hex digits.
func appendHex(dst []byte, h uint64) []byte {
	const hexDigits = "0123456789abcdef"
	for shift := 60; shift >= 0; shift -= 4 {
		dst = append(dst, hexDigits[(h>>uint(shift))&0xF])
	}
	return dst
}

type sortedKV struct {
	k []byte
	v *fastjson.Value
}

// appendCanonical appends the canonical JSON of v (see the format comment).
// It uses r.kvs as a stack, so it does not allocate once that has grown.
func (r *renderer) appendCanonical(dst []byte, v *fastjson.Value) []byte {
	switch v.Type() {
	case fastjson.TypeObject:
		o, _ := v.Object()
		base := len(r.kvs)
		o.Visit(func(k []byte, v *fastjson.Value) { r.kvs = append(r.kvs, sortedKV{k, v}) })
		slices.SortStableFunc(r.kvs[base:], func(a, b sortedKV) int { return bytes.Compare(a.k, b.k) })
		dst = append(dst, '{')
		n := len(r.kvs)
		for i := base; i < n; i++ {
			if i > base {
				dst = append(dst, ',')
			}
			kv := r.kvs[i] // re-read: nested objects may have grown r.kvs
			dst = appendJSONString(dst, kv.k)
			dst = append(dst, ':')
			dst = r.appendCanonical(dst, kv.v)
		}
		clear(r.kvs[base:])
		r.kvs = r.kvs[:base]
		return append(dst, '}')
	case fastjson.TypeArray:
		a, _ := v.Array()
		dst = append(dst, '[')
		for i, e := range a {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = r.appendCanonical(dst, e)
		}
		return append(dst, ']')
	case fastjson.TypeString:
		s, _ := v.StringBytes()
		return appendJSONString(dst, s)
	case fastjson.TypeNumber:
		f, err := v.Float64()
		if err != nil { // fastjson keeps odd number text such as "1-2"; keep it verbatim
			return v.MarshalTo(dst)
		}
		return strconv.AppendFloat(dst, f, 'g', -1, 64)
	case fastjson.TypeTrue:
		return append(dst, "true"...)
	case fastjson.TypeFalse:
		return append(dst, "false"...)
	}
	return append(dst, "null"...)
}

// appendJSONString appends s as a JSON string, escaping only '"', '\\' and
// bytes below 0x20; other bytes (UTF-8 or not) are kept as they are.
func appendJSONString(dst, s []byte) []byte {
	const hexDigits = "0123456789abcdef"
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		dst = append(dst, s[start:i]...)
		switch c {
		case '"', '\\':
			dst = append(dst, '\\', c)
		case '\n':
			dst = append(dst, '\\', 'n')
		case '\t':
			dst = append(dst, '\\', 't')
		case '\r':
			dst = append(dst, '\\', 'r')
		default:
			dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
		}
		start = i + 1
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
