package router

import (
	"encoding/binary"
	"math"

	"github.com/valyala/fastjson"
)

// textPrompt renders a completions "prompt" or an embeddings "input": a
// string, an array of strings, an array of token ids, or an array of token-id
// arrays. Strings render as their raw bytes (FormatText), ids as 4-byte
// little-endian words (FormatTokens); each string or id array is a segment
// with its own boundary in Ends. Empty segments give equal consecutive Ends.
func (r *renderer) textPrompt(obj *fastjson.Object, key string) error {
	p := r.p
	v := obj.Get(key)
	if isAbsent(v) {
		return badRequest(key, "missing required parameter: %s", key)
	}
	switch v.Type() {
	case fastjson.TypeString:
		s, _ := v.StringBytes()
		p.Format = FormatText
		p.Units = append(p.Units, s...)
		p.Ends = append(p.Ends, len(p.Units))
		return nil
	case fastjson.TypeArray:
	default:
		return badRequest(key, "%s must be a string, an array of strings or an array of token ids", key)
	}
	a, _ := v.Array()
	if len(a) == 0 {
		return badRequest(key, "%s must not be empty", key)
	}
	at := loc{list: key, i: -1, j: -1}
	switch a[0].Type() {
	case fastjson.TypeString:
		p.Format = FormatText
		for i, e := range a {
			if e.Type() != fastjson.TypeString {
				return badRequest(key, "%s[%d] must be a string like %s[0]", key, i, key)
			}
			s, _ := e.StringBytes()
			p.Units = append(p.Units, s...)
			p.Ends = append(p.Ends, len(p.Units))
		}
		return nil
	case fastjson.TypeNumber:
		p.Format = FormatTokens
		if err := r.appendTokens(a, at); err != nil {
			return err
		}
		p.Ends = append(p.Ends, len(p.Units))
		return nil
	case fastjson.TypeArray:
		p.Format = FormatTokens
		for i, e := range a {
			if e.Type() != fastjson.TypeArray {
				return badRequest(key, "%s[%d] must be an array of token ids like %s[0]", key, i, key)
			}
			ids, _ := e.Array()
			if err := r.appendTokens(ids, loc{list: key, i: i, j: -1}); err != nil {
				return err
			}
			p.Ends = append(p.Ends, len(p.Units))
		}
		return nil
	}
	return badRequest(key, "%s must be a string, an array of strings or an array of token ids", key)
}

// appendTokens appends each id of a as 4 little-endian bytes.
func (r *renderer) appendTokens(a []*fastjson.Value, at loc) error {
	p := r.p
	for j, e := range a {
		id, ok := r.tokenID(e)
		if !ok {
			return badRequest(at.param(""), "%s[%d] must be a token id (an integer in [0, 2^32))", at.param(""), j)
		}
		p.Units = binary.LittleEndian.AppendUint32(p.Units, id)
	}
	return nil
}

func (r *renderer) tokenID(v *fastjson.Value) (uint32, bool) {
	if v.Type() != fastjson.TypeNumber {
		return 0, false
	}
	// Fast path: plain decimal digits, read from the number's JSON text.
	r.tmp = v.MarshalTo(r.tmp[:0])
	if s := r.tmp; len(s) > 0 && len(s) <= 10 {
		var n uint64
		for _, c := range s {
			if c < '0' || c > '9' {
				goto slow
			}
			n = n*10 + uint64(c-'0')
		}
		return uint32(n), n <= math.MaxUint32
	}
slow:
	f, err := v.Float64() // 12.0 is still token 12
	if err != nil || f < 0 || f > math.MaxUint32 || f != math.Trunc(f) {
		return 0, false
	}
	return uint32(f), true
}
