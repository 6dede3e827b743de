package router

import (
	"errors"
	"fmt"
)

// The wire format of remote tokenization (vLLM's POST /tokenize, which
// SGLang and kvmesh-sim serve too): the request body is built from the
// client's body, the answer's token ids are read back. Both functions are
// pure; the answer comes from outside and is read defensively (bounded,
// never a panic: FuzzTokenizeAnswer).

// chatTokenizeKeys are the members of a chat request that decide its prompt
// tokens, as vLLM's TokenizeChatRequest accepts them. Everything else
// (sampling parameters, stream, cache_salt...) is left out: vLLM would log
// a warning for every field it ignores.
var chatTokenizeKeys = [...]string{"messages", "add_generation_prompt", "continue_final_message", "add_special_tokens",
	"chat_template", "chat_template_kwargs", "tools", "mm_processor_kwargs"}

// errTokenizeUnsupported: the request cannot be tokenized remotely (an
// endpoint or prompt shape /tokenize does not take); it is keyed by bytes.
var errTokenizeUnsupported = errors.New("tokenize: request shape not supported")

// chatKeyRendered says which chatTokenizeKeys the canonical rendering
// holds (the messages, and in its preamble the template, its arguments and
// the tools); the others change the tokens without changing the rendering,
// so they are hashed apart.
var chatKeyRendered = [len(chatTokenizeKeys)]bool{true, false, false, false, true, true, true, false}

// appendTokenizeBody appends to dst the /tokenize body for a routed
// request body of endpoint ep: for chat, the model and the members that
// shape the templated prompt (the first occurrence of each, as Render reads
// them); for completions, the model and a string prompt (or a one-string
// array, unwrapped). body must be a JSON object that Render accepted. opts
// hashes the members that change the tokens but not the canonical
// rendering (add_generation_prompt, add_special_tokens...): a cache of
// tokens by rendering must key by it too.
func appendTokenizeBody(dst []byte, ep Endpoint, body []byte) (_ []byte, opts uint64, err error) {
	start := len(dst)
	var model []byte
	switch ep {
	case EndpointChat:
		var seen [len(chatTokenizeKeys)]bool
		var haveMessages, dup bool
		dst = append(dst, '{')
		ok := eachTopLevel(body, func(name, value []byte) {
			if string(name) == "model" {
				if model == nil {
					model = value
				}
				return
			}
			for i, k := range chatTokenizeKeys {
				// A repeated option the rendering does not hold (Render
				// refuses the others repeated): the engine keeps its last
				// copy, and tokens keyed by the first would be wrong.
				dup = dup || string(name) == k && seen[i] && !chatKeyRendered[i]
				if string(name) == k && !seen[i] {
					seen[i] = true
					haveMessages = haveMessages || i == 0
					if !chatKeyRendered[i] {
						opts = hash64(value, opts^uint64(i+1))
					}
					dst = append(dst, '"')
					dst = append(dst, k...)
					dst = append(dst, '"', ':')
					dst = append(dst, value...)
					dst = append(dst, ',')
				}
			}
		})
		if !ok || dup || !haveMessages || len(model) == 0 || model[0] != '"' {
			return dst[:start], 0, errTokenizeUnsupported
		}
	case EndpointCompletions:
		var prompt, special []byte
		dup := false
		ok := eachTopLevel(body, func(name, value []byte) {
			switch string(name) {
			case "model":
				if model == nil {
					model = value
				}
			case "prompt":
				if prompt == nil {
					prompt = value
				}
			case "add_special_tokens":
				dup = dup || special != nil // the engine keeps the last copy
				if special == nil {
					special = value
				}
			}
		})
		if ok && len(prompt) > 0 && prompt[0] == '[' {
			prompt = singleString(prompt)
		}
		if !ok || dup || len(prompt) == 0 || prompt[0] != '"' || len(model) == 0 || model[0] != '"' {
			return dst[:start], 0, errTokenizeUnsupported
		}
		dst = append(dst, `{"prompt":`...)
		dst = append(dst, prompt...)
		dst = append(dst, ',')
		if special != nil {
			opts = hash64(special, 1)
			dst = append(dst, `"add_special_tokens":`...)
			dst = append(dst, special...)
			dst = append(dst, ',')
		}
	default:
		return dst, 0, errTokenizeUnsupported
	}
	dst = append(dst, `"model":`...)
	dst = append(dst, model...)
	return append(dst, '}'), opts, nil
}

// singleString returns the only element of a JSON array holding exactly
// one string, else nil.
func singleString(v []byte) []byte {
	i := skipJSONSpace(v, 1)
	if i == len(v) || v[i] != '"' {
		return nil
	}
	end, ok := skipString(v, i)
	if !ok {
		return nil
	}
	if j := skipJSONSpace(v, end); j == len(v)-1 && v[j] == ']' {
		return v[i:end]
	}
	return nil
}

// eachTopLevel calls fn with the name (without quotes) and the raw value of
// each member of the JSON object b, in order. It reports false, having
// called fn for the members before, when b is not an object it can walk or
// a member's name holds an escape (whose meaning would need decoding; the
// renderer may have read it differently).
func eachTopLevel(b []byte, fn func(name, value []byte)) bool {
	return walkTopLevel(b, func(name []byte, b []byte, i int) int {
		end, ok := skipValue(b, i)
		if !ok {
			return -1
		}
		fn(name, b[i:end])
		return end
	})
}

// walkTopLevel walks the members of the JSON object b as eachTopLevel
// does, but leaves each value to fn: fn gets the member's name and the
// value's start in b, and returns where the value ends, or -1 to stop the
// walk as malformed. A caller that parses a large value anyway reads it
// once instead of skipping it first.
func walkTopLevel(b []byte, fn func(name []byte, b []byte, i int) int) bool {
	i := skipJSONSpace(b, 0)
	if i == len(b) || b[i] != '{' {
		return false
	}
	i = skipJSONSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return true
	}
	for {
		if i == len(b) || b[i] != '"' {
			return false
		}
		j := i + 1
		for j < len(b) && b[j] != '"' && b[j] != '\\' {
			j++
		}
		if j == len(b) || b[j] == '\\' {
			return false
		}
		name := b[i+1 : j]
		i = skipJSONSpace(b, j+1)
		if i == len(b) || b[i] != ':' {
			return false
		}
		i = skipJSONSpace(b, i+1)
		end := fn(name, b, i)
		if end < 0 {
			return false
		}
		i = skipJSONSpace(b, end)
		if i == len(b) {
			return false
		}
		switch b[i] {
		case ',':
			i = skipJSONSpace(b, i+1)
		case '}':
			return true
		default:
			return false
		}
	}
}

// parseTokenizeAnswer reads a /tokenize answer, {"count": n,
// "max_model_len": m, "tokens": [id, ...], "token_strs": ...}, appending
// its token ids to dst[:0]. An answer without "tokens", with an id that is
// not a whole number in [0, 2^32), with more than maxTokens ids, or whose
// "count" disagrees with the ids is an error. Members it does not know are
// skipped.
func parseTokenizeAnswer(b []byte, dst []uint32, maxTokens int) ([]uint32, error) {
	dst = dst[:0]
	var (
		have     bool
		count    = -1
		innerErr error
	)
	ok := walkTopLevel(b, func(name []byte, b []byte, i int) int {
		if innerErr != nil {
			return -1
		}
		if string(name) == "tokens" { // read once, not skipped first: it is nearly all of the answer
			if have {
				innerErr = errors.New("tokenize answer: two \"tokens\" members")
				return -1
			}
			have = true
			var end int
			dst, end, innerErr = appendIDList(dst, b, i, maxTokens)
			if innerErr != nil {
				return -1
			}
			return end
		}
		end, ok := skipValue(b, i)
		if !ok {
			return -1
		}
		if string(name) == "count" {
			n, ok := parseUint(b[i:end], 1<<31-1)
			if !ok {
				innerErr = errors.New("tokenize answer: \"count\" is not a whole number")
				return -1
			}
			count = int(n)
		}
		return end
	})
	switch {
	case innerErr != nil:
		return dst[:0], innerErr
	case !ok:
		return dst[:0], errors.New("tokenize answer: not a JSON object")
	case !have:
		return dst[:0], errors.New("tokenize answer: no \"tokens\"")
	case count >= 0 && count != len(dst):
		return dst[:0], fmt.Errorf("tokenize answer: count %d but %d tokens", count, len(dst))
	}
	return dst, nil
}

// appendIDList appends the ids of the JSON array of whole numbers in
// [0, 2^32) at v[i] to dst, at most max of them, and returns where the
// array ends.
func appendIDList(dst []uint32, v []byte, i, max int) ([]uint32, int, error) {
	if i >= len(v) || v[i] != '[' {
		return dst, 0, errors.New("tokenize answer: \"tokens\" is not an array")
	}
	i = skipJSONSpace(v, i+1)
	if i < len(v) && v[i] == ']' {
		return dst, i + 1, nil
	}
	for {
		// The digits are read and summed in one pass (parseUint's rules:
		// no sign, fraction or leading zero). The sum of more than ten
		// digits may wrap, but such an id is refused by its length.
		j, id := i, uint64(0)
		for ; j < len(v); j++ {
			d := v[j] - '0'
			if d > 9 {
				break
			}
			id = id*10 + uint64(d)
		}
		if n := j - i; n == 0 || n > 10 || id > 1<<32-1 || (n > 1 && v[i] == '0') {
			return dst, 0, errors.New("tokenize answer: a token id is not a whole number in [0, 2^32)")
		}
		if len(dst) >= max {
			return dst, 0, fmt.Errorf("tokenize answer: more than %d tokens", max)
		}
		dst = append(dst, uint32(id))
		if j < len(v) && v[j] == ',' { // the usual separator, right after the id
			i = skipJSONSpace(v, j+1)
			continue
		}
		i = skipJSONSpace(v, j)
		if i == len(v) {
			return dst, 0, errors.New("tokenize answer: unterminated \"tokens\"")
		}
		switch v[i] {
		case ',':
			i = skipJSONSpace(v, i+1)
		case ']':
			return dst, i + 1, nil
		default:
			return dst, 0, errors.New("tokenize answer: a token id is not a whole number in [0, 2^32)")
		}
	}
}

// parseUint reads a decimal whole number of at most max, without sign,
// fraction or leading zeros (JSON's integer syntax, as Python writes it).
func parseUint(b []byte, max uint64) (uint64, bool) {
	if len(b) == 0 || len(b) > 20 || (len(b) > 1 && b[0] == '0') {
		return 0, false
	}
	var n uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		d := uint64(c - '0')
		if n > (max-d)/10 {
			return 0, false
		}
		n = n*10 + d
	}
	return n, true
}
