package router

import (
	"bytes"
	"fmt"
	"net/http"

	"github.com/kvmesh/kvmesh/tree"
)

// admit applies the limits on a routed body that cost nothing to check:
// from one skim of the bytes, before the body is parsed, rendered or
// hashed. In order: the model's length, whether any backend serves the
// model (404: the most common mistake answers fastest), the cache_salt's
// length, the number of messages, the number of JSON values. A body the
// skim cannot follow is left to Render, which names its error, as long as
// what was counted so far is within the limits. A body that is not a JSON
// object, though, gets Render's error here, unparsed: the skim counts
// nothing in it, and a top-level array of a million numbers would be
// parsed whole (a parser node each) before Render could refuse it.
func (rt *Router) admit(ep Endpoint, body []byte) *APIError {
	k1, k2 := listKeys(ep)
	s := skimBody(body, k1, k2)
	if s.notObject {
		return errNotObject(body)
	}
	if s.dup != "" {
		return dupMember(s.dup)
	}
	c := &rt.cfg
	if s.ok && s.model != nil {
		if overLimit(s.model, s.modelEsc, c.MaxModelBytes) {
			return errStringTooLong("model", len(s.model), c.MaxModelBytes)
		}
		switch {
		case !s.modelEsc:
			if len(s.model) > 0 && len(rt.models.lookupBytes(s.model)) == 0 {
				return rt.modelMissing(string(s.model))
			}
		default:
			if model, ok := unescape(s.model, true); ok {
				if len(model) > c.MaxModelBytes {
					return errStringTooLong("model", len(model), c.MaxModelBytes)
				}
				if len(model) > 0 && len(rt.models.lookup(model)) == 0 {
					return rt.modelMissing(model)
				}
			}
		}
	}
	if s.ok && s.salt != nil {
		n := len(s.salt)
		if s.saltEsc && n <= 6*c.MaxCacheSaltBytes {
			if v, ok := unescape(s.salt, true); ok {
				n = len(v)
			}
		}
		if n > c.MaxCacheSaltBytes {
			return errStringTooLong("cache_salt", n, c.MaxCacheSaltBytes)
		}
	}
	items, param := s.items, k1
	if ep == EndpointCompletions || ep == EndpointEmbeddings {
		items -= s.numbers // token ids are one prompt, not a list of them
	}
	if k2 != "" && !s.list1Set {
		items, param = s.items2, k2 // what Render renders without k1 (embeddings' chat-style messages)
	}
	if items > c.MaxMessages {
		return &APIError{Status: http.StatusBadRequest, Type: TypeInvalidRequest, Param: param, Code: "array_above_max_length",
			Message: fmt.Sprintf("Invalid '%s': array too long. Expected an array with maximum length %d, but got an array with length %d instead.", param, c.MaxMessages, items)}
	}
	if s.values > c.MaxJSONValues {
		return &APIError{Status: http.StatusRequestEntityTooLarge, Type: TypeTooLarge, Code: "too_many_json_values",
			Message: fmt.Sprintf("The request body holds more than %d JSON values (the limit is max_json_values).", c.MaxJSONValues)}
	}
	return nil
}

// overLimit reports whether a JSON string's raw contents are more than
// limit bytes even unescaped (an escape stands for at least one byte in
// at most 6), without unescaping them: unescaping copies them, whatever
// their length.
func overLimit(raw []byte, esc bool, limit int) bool {
	return len(raw) > limit && (!esc || len(raw) > 6*limit)
}

// dupMember refuses a body that repeats the member name (which the skim
// reads): which copy applies would be ambiguous.
func dupMember(name string) *APIError {
	return &APIError{Status: http.StatusBadRequest, Type: TypeInvalidRequest, Param: name, Code: "duplicate_member",
		Message: fmt.Sprintf("Invalid body: the member '%s' appears more than once (possibly spelled with escapes); which one applies would be ambiguous.", name)}
}

// errNotObject is Render's answer to a body that is not a JSON object (a
// non-blank one, as the skim flags), the value's kind told from its first
// bytes without parsing it.
func errNotObject(body []byte) *APIError {
	body = bytes.TrimLeft(body, " \t\r\n")
	kind := ""
	switch c := body[0]; {
	case c == '[':
		kind = "array"
	case c == '"':
		kind = "string"
	case c == '-' || (c >= '0' && c <= '9'):
		kind = "number"
	}
	for _, lit := range [...]string{"true", "false", "null"} {
		if bytes.HasPrefix(body, []byte(lit)) {
			kind = lit
		}
	}
	if kind == "" {
		return badRequest("", "request body must be a JSON object")
	}
	return badRequest("", "request body must be a JSON object, not %s", kind)
}

// errStringTooLong is OpenAI's answer to an over-long string parameter.
func errStringTooLong(param string, n, limit int) *APIError {
	return &APIError{Status: http.StatusBadRequest, Type: TypeInvalidRequest, Param: param, Code: "string_above_max_length",
		Message: fmt.Sprintf("Invalid '%s': string too long. Expected a string with maximum length %d, but got a string with length %d instead.", param, limit, n)}
}

// thinLearn keeps at most max of ch's learn depths: evenly spaced over the
// list, always with the deepest (the whole prompt, what the next turn of a
// conversation extends).
func thinLearn(ch *tree.Chain, max int) {
	n := len(ch.Learn)
	if n <= max {
		return
	}
	if max == 1 {
		ch.Learn[0] = ch.Learn[n-1]
		ch.Learn = ch.Learn[:1]
		return
	}
	// Keep index i*(n-1)/(max-1) for i in [0, max): strictly increasing
	// (n > max), first and last included; writing in place never
	// overwrites an index still to be read.
	for i := 0; i < max; i++ {
		ch.Learn[i] = ch.Learn[i*(n-1)/(max-1)]
	}
	ch.Learn = ch.Learn[:max]
}

// learnUpTo drops the learn positions deeper than depth blocks.
func learnUpTo(ch *tree.Chain, depth int32) {
	n := 0
	for _, d := range ch.Learn {
		if d <= depth {
			ch.Learn[n] = d
			n++
		}
	}
	ch.Learn = ch.Learn[:n]
}
