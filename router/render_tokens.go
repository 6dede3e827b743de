package router

import (
	"encoding/binary"
	"math"
	"slices"
)

// A large token-id prompt is the one body fastjson handles slowly: it builds
// a Value per number (about 20 ns each, 80 us for 4096 ids). For completions
// and embeddings bodies of at least tokenFastPathMin bytes, Render first looks
// for the top-level prompt (or input) member itself; when it is an array of
// plain decimal ids, or of such arrays, the ids are rendered directly and
// fastjson parses the rest of the body with that array replaced by 0. Any
// surprise (escaped keys, signs, fractions, mixed arrays, an empty array)
// abandons the fast path and the general one runs, so both give the same
// result; FuzzTokenFastPath checks that they do.

const tokenFastPathMin = 1 << 10

// tokenFastPath renders the ids of body's first top-level member named key
// and returns the body with that member's value replaced by 0 (it lives in
// r.spliced). ok is false, and r.p untouched, when the fast path does not apply.
func (r *renderer) tokenFastPath(body []byte, key string) (rest []byte, ok bool) {
	start, ok := findTopLevel(body, key)
	if !ok || body[start] != '[' {
		return nil, false
	}
	p := r.p
	units, ends, end, ok := appendIDArrays(p.Units[:0], p.Ends[:0], body, start)
	if !ok {
		return nil, false
	}
	p.Units, p.Ends, p.Format = units, ends, FormatTokens
	r.spliced = append(append(append(r.spliced[:0], body[:start]...), '0'), body[end:]...)
	return r.spliced, true
}

func isJSONSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func skipJSONSpace(b []byte, i int) int {
	for i < len(b) && isJSONSpace(b[i]) {
		i++
	}
	return i
}

// findTopLevel returns where the value of the first member named key of
// the JSON object in b starts. It gives up (ok false) on a key holding an
// escape, as fastjson's choice between duplicate keys then depends on escaping.
func findTopLevel(b []byte, key string) (start int, ok bool) {
	i := skipJSONSpace(b, 0)
	if i == len(b) || b[i] != '{' {
		return 0, false
	}
	i++
	for {
		i = skipJSONSpace(b, i)
		if i == len(b) || b[i] != '"' {
			return 0, false
		}
		j := i + 1
		for j < len(b) && b[j] != '"' && b[j] != '\\' {
			j++
		}
		if j == len(b) || b[j] == '\\' {
			return 0, false
		}
		name := b[i+1 : j]
		i = skipJSONSpace(b, j+1)
		if i == len(b) || b[i] != ':' {
			return 0, false
		}
		i = skipJSONSpace(b, i+1)
		if string(name) == key {
			return i, i < len(b)
		}
		if i, ok = skipValue(b, i); !ok {
			return 0, false
		}
		i = skipJSONSpace(b, i)
		if i == len(b) || b[i] != ',' {
			return 0, false
		}
		i++
	}
}

// skipValue returns the end of the JSON value starting at b[i]. It checks
// only what it needs to find the end; fastjson validates the body later.
func skipValue(b []byte, i int) (int, bool) {
	if i == len(b) {
		return 0, false
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for i < len(b) {
			switch b[i] {
			case '"':
				var ok bool
				if i, ok = skipString(b, i); !ok {
					return 0, false
				}
				continue
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1, true
				}
			}
			i++
		}
		return 0, false
	}
	j := i
	for j < len(b) && !isJSONSpace(b[j]) && b[j] != ',' && b[j] != '}' && b[j] != ']' {
		j++
	}
	return j, j > i
}

// skipString returns the end of the string whose opening quote is b[i].
func skipString(b []byte, i int) (int, bool) {
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '"':
			return j + 1, true
		case '\\':
			j++
		}
	}
	return 0, false
}

// appendIDArrays renders the array at v[start], "[id, ...]" or
// "[[id, ...], ...]", as Render's general path would, and returns where it
// ends; ok is false for anything else, including "[]".
func appendIDArrays(units []byte, ends []int, v []byte, start int) ([]byte, []int, int, bool) {
	units = slices.Grow(units, (len(v)-start)/2) // ids take 4 bytes, their text about 7
	i := skipJSONSpace(v, start+1)
	if i == len(v) || v[i] != '[' {
		units, i, ok := appendIDs(units, v, start+1, false)
		return units, append(ends, len(units)), i, ok
	}
	for {
		var ok bool
		if units, i, ok = appendIDs(units, v, i+1, true); !ok {
			return units, ends, 0, false
		}
		ends = append(ends, len(units))
		i = skipJSONSpace(v, i)
		if i < len(v) && v[i] == ']' {
			return units, ends, i + 1, true
		}
		if i == len(v) || v[i] != ',' {
			return units, ends, 0, false
		}
		if i = skipJSONSpace(v, i+1); i == len(v) || v[i] != '[' {
			return units, ends, 0, false
		}
	}
}

// appendIDs reads "id, id, ...]" from v[i:] (just past a '[') and returns the
// index after the ']'.
func appendIDs(units, v []byte, i int, emptyOK bool) ([]byte, int, bool) {
	i = skipJSONSpace(v, i)
	if i < len(v) && v[i] == ']' {
		return units, i + 1, emptyOK
	}
	for {
		var n uint64
		d := 0
		for ; i < len(v) && v[i] >= '0' && v[i] <= '9' && d <= 10; i, d = i+1, d+1 {
			n = n*10 + uint64(v[i]-'0')
		}
		if d == 0 || d > 10 || n > math.MaxUint32 {
			return units, i, false
		}
		units = binary.LittleEndian.AppendUint32(units, uint32(n))
		i = skipJSONSpace(v, i)
		if i == len(v) {
			return units, i, false
		}
		switch v[i] {
		case ']':
			return units, i + 1, true
		case ',':
			i = skipJSONSpace(v, i+1)
		default:
			return units, i, false
		}
	}
}
