package router

import (
	"bytes"

	"github.com/valyala/fastjson"
)

// skim is what a request body shows at a glance, read before any parsing
// so that limits and the model check cost one pass over the bytes and no
// allocation, whatever the body holds: a full parse of 200,000 tiny
// messages costs seconds (each JSON value is an allocation-heavy parser
// node), skimming it a few milliseconds.
type skim struct {
	// model and salt are the raw contents (between the quotes, escapes
	// kept) of the top-level "model" and "cache_salt" strings; nil when
	// absent or not strings. The first occurrence counts, as in Render.
	model, salt       []byte
	modelEsc, saltEsc bool // the raw contents hold escapes
	modelSet          bool // a "model" member exists (of any type)

	// items counts the elements of the top-level member named by the
	// endpoint's first list key (messages, prompt, input) when it is an
	// array; numbers counts those that are numbers (a prompt given as
	// token ids is one prompt, not a list). items2 counts the elements of
	// the second list key's member (embeddings' chat-style "messages").
	// Each key's first occurrence counts, as in Render.
	items, numbers, items2 int
	// list1Set: the first list key's member exists and is not null; when
	// it is absent or null, Render renders the second key's list instead.
	list1Set bool
	// values counts every JSON value in the body (each one a parser node),
	// up to the point the skim stopped.
	values int
	// ok: the body is a single JSON object the skim followed to its end.
	// When false, the counts are lower bounds and model and salt are not
	// to be trusted (Render reports the body's error).
	ok bool
	// dup names a member the skim reads (model, cache_salt, a list key)
	// that the object repeats. Which copy counts is then ambiguous: the
	// skim counts the first, but a parser may take another (fastjson
	// prefers a copy spelled without escapes), so the limits checked
	// could be on the copy that is not rendered.
	dup string
	// notObject: the body's first byte after white space is not '{' (an
	// empty body is not flagged: Render names that error). The skim stops
	// there, so the counts say nothing about such a body.
	notObject bool
}

// maxSkimDepth matches fastjson.MaxDepth: deeper bodies fail to parse
// anyway.
const maxSkimDepth = 300

// listKeys are the top-level members whose elements are the prompt's
// messages or segments, per endpoint.
func listKeys(ep Endpoint) (string, string) {
	switch ep {
	case EndpointChat:
		return "messages", ""
	case EndpointCompletions:
		return "prompt", ""
	case EndpointResponses:
		return "input", ""
	case EndpointEmbeddings:
		return "input", "messages"
	}
	return "", ""
}

// The top-level members the skim reads.
const (
	kOther = iota
	kModel
	kSalt
	kList1 // named by the endpoint's first list key
	kList2 // by its second
)

// skimBody skims a JSON body. key1 and key2 name list members to count
// ("" for none).
func skimBody(b []byte, key1, key2 string) skim {
	var s skim
	var objects [(maxSkimDepth + 63) / 64]uint64 // bit d: the container at depth d+1 is an object
	depth := 0
	keyNext := false     // the next string is an object key
	key := kOther        // the top-level key whose value comes next
	var listSeen [2]bool // a member named by key1, key2 was met: later ones do not count
	saltSeen := false
	inList := kOther // kList1 or kList2 inside that counted list (its elements are at depth 2)
	i, n := 0, len(b)
	for ; i < n && (b[i] == ' ' || b[i] == '\t' || b[i] == '\r' || b[i] == '\n'); i++ {
	}
	if i < n && b[i] != '{' {
		s.notObject = true
		return s
	}
	for i < n {
		c := b[i]
		switch c {
		case ' ', '\t', '\r', '\n':
			i++
			continue
		case ':':
			i++
			continue
		case ',':
			if depth > 0 && objects[(depth-1)/64]&(1<<((depth-1)%64)) != 0 {
				keyNext = true
			}
			if depth == 1 {
				key = kOther
			}
			i++
			continue
		case '}', ']':
			if depth == 0 {
				return s
			}
			depth--
			keyNext = false
			if depth == 1 {
				inList = kOther
			}
			i++
			if depth == 0 {
				for ; i < n && (b[i] == ' ' || b[i] == '\t' || b[i] == '\r' || b[i] == '\n'); i++ {
				}
				s.ok = i == n && c == '}'
				return s
			}
			continue
		}
		if depth == 0 && (c != '{' || s.values > 0) {
			return s // not an object, or something after it
		}
		if c == '"' {
			end, esc := stringEnd(b, i+1)
			if end < 0 {
				return s
			}
			raw := b[i+1 : end]
			i = end + 1
			if keyNext {
				keyNext = false
				if depth == 1 {
					key = classifyKey(raw, esc, key1, key2)
					switch {
					case key == kModel && s.modelSet,
						key == kSalt && saltSeen,
						key == kList1 && listSeen[0],
						key == kList2 && listSeen[1]:
						if s.dup == "" {
							s.dup = memberName(key, key1, key2)
						}
						key = kOther // a repeated key: the first one counts
					case key == kModel:
						s.modelSet = true
					case key == kSalt:
						saltSeen = true
					case key == kList1:
						listSeen[0], s.list1Set = true, true
					case key == kList2:
						listSeen[1] = true
					}
				}
				continue
			}
			s.values++
			s.countItem(inList, depth)
			if depth == 1 {
				switch {
				case key == kModel:
					s.model, s.modelEsc = raw, esc
				case key == kSalt && s.salt == nil:
					s.salt, s.saltEsc = raw, esc
				}
			}
			continue
		}
		s.values++
		s.countItem(inList, depth)
		if c == '{' || c == '[' {
			if depth >= maxSkimDepth {
				return s
			}
			if depth == 1 && (key == kList1 || key == kList2) && c == '[' {
				inList = key
			}
			if c == '{' {
				objects[depth/64] |= 1 << (depth % 64)
			} else {
				objects[depth/64] &^= 1 << (depth % 64)
			}
			depth++
			keyNext = c == '{'
			i++
			continue
		}
		// A number or a literal: up to the next delimiter.
		if inList == kList1 && depth == 2 && (c == '-' || (c >= '0' && c <= '9')) {
			s.numbers++
		}
		j := i + 1
		for ; j < n; j++ {
			if d := b[j]; d == ',' || d == '}' || d == ']' || d == ' ' || d == '\t' || d == '\r' || d == '\n' || d == '"' || d == ':' || d == '{' || d == '[' {
				break
			}
		}
		if depth == 1 && key == kList1 && string(b[i:j]) == "null" {
			s.list1Set = false // null is as absent to Render
		}
		i = j
	}
	return s
}

// memberName is the name of the member key stands for.
func memberName(key int, key1, key2 string) string {
	switch key {
	case kModel:
		return "model"
	case kSalt:
		return "cache_salt"
	case kList1:
		return key1
	}
	return key2
}

// countItem counts a value met at depth as an element of the list the
// skim is in (inList: kList1, kList2 or kOther for none).
func (s *skim) countItem(inList, depth int) {
	if depth != 2 {
		return
	}
	switch inList {
	case kList1:
		s.items++
	case kList2:
		s.items2++
	}
}

// classifyKey says which of the members the skim reads a top-level key
// names. Keys with escapes are compared unescaped (they are short).
func classifyKey(raw []byte, esc bool, key1, key2 string) int {
	if esc {
		if len(raw) > 64 {
			return kOther
		}
		k, ok := unescape(raw, true)
		if !ok {
			return kOther
		}
		raw = []byte(k)
	}
	switch {
	case string(raw) == "model":
		return kModel
	case string(raw) == "cache_salt":
		return kSalt
	case len(raw) > 0 && string(raw) == key1:
		return kList1
	case len(raw) > 0 && string(raw) == key2:
		return kList2
	}
	return kOther
}

// stringEnd returns the index of the quote closing a string whose contents
// start at i, or -1 if it is unterminated, and whether it holds escapes.
func stringEnd(b []byte, i int) (int, bool) {
	esc := false
	for {
		j := bytes.IndexByte(b[i:], '"')
		if j < 0 {
			return -1, esc
		}
		q := i + j
		k := q
		for k > i && b[k-1] == '\\' {
			k--
		}
		if k < q {
			esc = true
		}
		if (q-k)%2 == 0 {
			if !esc && bytes.IndexByte(b[i:q], '\\') >= 0 {
				esc = true
			}
			return q, esc
		}
		i = q + 1
	}
}

// unescape returns a skimmed string's value as Render will see it (the
// same parser unescapes it); ok is false when the raw contents are not a
// string.
func unescape(raw []byte, esc bool) (string, bool) {
	if !esc {
		return string(raw), true
	}
	p := jsonParsers.Get()
	defer jsonParsers.Put(p)
	v, err := p.ParseBytes(append(append([]byte{'"'}, raw...), '"'))
	if err != nil || v.Type() != fastjson.TypeString {
		return "", false
	}
	b, _ := v.StringBytes()
	return string(b), true
}
