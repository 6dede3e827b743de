package router

import (
	"bytes"
	"math"

	"github.com/valyala/fastjson"
)

// maxUsageBytes bounds the "usage" object kept from an answer. A real one
// (prompt, completion and total counts with their details) is under 400
// bytes; a larger one is not a usage report and is ignored.
const maxUsageBytes = 4096

// usageScanner finds the backend's usage report in an answer while the
// answer is copied to the client, in one pass and constant memory: the
// top-level "usage" object of a JSON answer, or of the last SSE "data:"
// event that has one (the final usage event of a stream with
// include_usage). Only a member of the answer's top-level object counts, so
// text in the model's output (a JSON string, where quotes are escaped) or a
// "usage" key nested deeper can never be taken for the report.
type usageScanner struct {
	sse  bool
	doc  usageDoc
	last []byte // the usage object of the last complete document that had one

	// SSE framing: how much of "data:" the current line has matched (0..5,
	// then 6 once the optional space after it is handled), or -1 while the
	// rest of a line is skipped.
	prefix int
	// fed says the current event's JSON has been fed to doc in part: the
	// rest of its line must be too (noUsageObject judges whole lines only).
	fed bool
	// pend holds the start of an event's line that arrived without its end
	// (a read split it), up to maxPendingLine bytes, so that the whole line
	// can still be judged by noUsageObject when its end comes.
	pend []byte
	// parseAll turns the skipping of lines off: every line goes through
	// usageDoc. Tests check the fast path against it.
	parseAll bool
}

// maxPendingLine bounds usageScanner.pend: a longer split line is parsed
// byte by byte. Token deltas of vLLM and SGLang streams are 200-400 bytes.
const maxPendingLine = 1024

// usageDoc scans one JSON document for its top-level "usage" member.
type usageDoc struct {
	depth     int  // open objects and arrays
	inStr     bool // inside a string
	esc       bool // the previous byte was a backslash in a string
	inKey     bool // the string is a key of the top-level object
	expectKey bool // at depth 1, the next string is a key
	keyLen    int  // bytes of the current key matched against "usage"; -1 when it cannot match
	isUsage   bool // the value that follows is the usage member's
	capturing bool // copying the usage object into cap
	found     bool // cap holds a complete usage object
	done      bool // the top-level object closed
	broken    bool // not a JSON object as far as the scanner can tell; ignore the rest
	cap       []byte
}

const usageKey = "usage"

func (d *usageDoc) reset() {
	*d = usageDoc{cap: d.cap[:0]}
}

// write feeds bytes of one document.
func (d *usageDoc) write(p []byte) {
	for i := 0; i < len(p) && !d.broken; i++ {
		c := p[i]
		if d.capturing {
			if len(d.cap) >= maxUsageBytes {
				d.capturing, d.isUsage = false, false
				d.cap = d.cap[:0]
			} else {
				d.cap = append(d.cap, c)
			}
		}
		if d.inStr {
			switch {
			case d.esc:
				d.esc = false
				d.keyLen = -1 // an escaped key is not the plain "usage" backends write
			case c == '\\':
				d.esc = true
			case c == '"':
				d.inStr = false
				if d.inKey {
					d.inKey = false
					d.isUsage = d.keyLen == len(usageKey)
				}
			case d.inKey && d.keyLen >= 0:
				if d.keyLen < len(usageKey) && c == usageKey[d.keyLen] {
					d.keyLen++
				} else {
					d.keyLen = -1
				}
			}
			continue
		}
		switch c {
		case ' ', '\t', '\r', '\n':
		case '"':
			d.inStr = true
			if d.depth == 1 && d.expectKey {
				d.inKey, d.keyLen, d.expectKey = true, 0, false
			}
		case ':':
		case ',':
			if d.depth == 1 {
				d.expectKey, d.isUsage = true, false
			}
		case '{', '[':
			if d.done || (d.depth == 0 && c == '[') {
				d.broken = true
				continue
			}
			if d.depth == 1 && d.isUsage && c == '{' {
				d.capturing, d.found = true, false
				d.cap = append(d.cap[:0], c)
			}
			d.depth++
			if d.depth == 1 {
				d.expectKey = true
			}
		case '}', ']':
			if d.depth == 0 {
				d.broken = true
				continue
			}
			d.depth--
			if d.depth == 1 && d.capturing {
				d.capturing, d.found, d.isUsage = false, true, false
			}
			if d.depth == 0 {
				d.done = true
			}
		default:
			if d.depth == 0 { // a scalar or garbage outside the object
				d.broken = true
			}
		}
	}
}

// start prepares the scanner for an answer; sse is true for an event
// stream.
func (s *usageScanner) start(sse bool) {
	s.sse, s.prefix, s.fed = sse, 0, false
	s.pend = s.pend[:0]
	s.doc.reset()
	s.last = s.last[:0]
}

// write feeds the next bytes of the answer.
func (s *usageScanner) write(p []byte) {
	if !s.sse {
		s.doc.write(p)
		if s.doc.done && s.doc.found && len(s.last) == 0 {
			s.last = append(s.last, s.doc.cap...)
		}
		return
	}
	for len(p) > 0 {
		switch {
		case s.prefix < 0: // skipping the rest of a line
			i := indexLineEnd(p)
			if i < 0 {
				return
			}
			p, s.prefix = p[i+1:], 0
		case s.prefix < len("data:"):
			if p[0] == '\n' || p[0] == '\r' || p[0] != "data:"[s.prefix] {
				s.prefix = -1
				if p[0] == '\n' || p[0] == '\r' {
					s.prefix = 0
					p = p[1:]
				}
				continue
			}
			s.prefix++
			p = p[1:]
			if s.prefix == len("data:") {
				s.doc.reset()
			}
		case s.prefix == len("data:"): // the optional space after the colon
			if p[0] == ' ' {
				p = p[1:]
			}
			s.prefix++
		default: // the event's JSON, up to the end of the line
			i := indexLineEnd(p)
			if i < 0 {
				if !s.fed && !s.parseAll && len(s.pend)+len(p) <= maxPendingLine {
					s.pend = append(s.pend, p...) // judged with the rest of its line
					return
				}
				s.feedPending()
				s.doc.write(p)
				s.fed = true
				return
			}
			line := p[:i]
			if len(s.pend) > 0 {
				if len(s.pend)+len(line) <= maxPendingLine {
					s.pend = append(s.pend, line...)
					line = s.pend
				} else {
					s.feedPending()
				}
			}
			// Most events of a stream are token deltas without a usage
			// object: a whole line that cannot hold one is skipped at
			// memory-scan speed instead of being parsed byte by byte.
			if s.fed || s.parseAll || !noUsageObject(line) {
				s.doc.write(line)
				if s.doc.done && s.doc.found {
					s.last = append(s.last[:0], s.doc.cap...)
				}
			}
			p, s.prefix, s.fed, s.pend = p[i+1:], 0, false, s.pend[:0]
		}
	}
}

// feedPending feeds the held start of the current line to doc: the line
// is parsed byte by byte from here on.
func (s *usageScanner) feedPending() {
	if len(s.pend) > 0 {
		s.doc.write(s.pend)
		s.pend, s.fed = s.pend[:0], true
	}
}

// indexLineEnd is the index of the first '\n' or '\r' in p, -1 if none.
func indexLineEnd(p []byte) int {
	end := bytes.IndexByte(p, '\n')
	head := p
	if end >= 0 {
		head = p[:end]
	}
	if r := bytes.IndexByte(head, '\r'); r >= 0 {
		return r
	}
	return end
}

// quotedUsage is the usage key as usageDoc matches it: unescaped.
var quotedUsage = []byte(`"usage"`)

// noUsageObject says whether usageDoc, fed the whole JSON text line, would
// find no usage object in it: every "usage" in the line is a member whose
// value is null (`"usage":null` followed by ',' or '}', as vLLM writes in
// every delta of a stream with include_usage). A usage object can only
// follow the raw bytes "usage" (usageDoc matches no escaped key), and
// after `: null ,` or `: null }` the member is over: when this says true,
// usageDoc would find none. Any other text after a "usage" (an object,
// "usage" as a string value, garbage) makes it false and leaves the line
// to usageDoc, which decides.
func noUsageObject(line []byte) bool {
	for {
		i := bytes.Index(line, quotedUsage)
		if i < 0 {
			return true
		}
		line = line[i+len(quotedUsage):]
		j := skipJSONSpace(line, 0)
		if j == len(line) || line[j] != ':' {
			return false
		}
		j = skipJSONSpace(line, j+1)
		if !bytes.HasPrefix(line[j:], jsonNull) {
			return false
		}
		j = skipJSONSpace(line, j+len(jsonNull))
		if j == len(line) || (line[j] != ',' && line[j] != '}') {
			return false
		}
		line = line[j:]
	}
}

var jsonNull = []byte("null")

// usageCounts reads the usage object the scanner found: the prompt tokens
// and how many of them the backend served from its prefix cache
// (chat/completions: prompt_tokens and prompt_tokens_details.cached_tokens;
// responses: input_tokens and input_tokens_details.cached_tokens). ok is
// false when there is no report or it has no cached count.
func (s *usageScanner) usageCounts() (prompt, cached int64, ok bool) {
	if len(s.last) == 0 {
		return 0, 0, false
	}
	p := jsonParsers.Get()
	defer jsonParsers.Put(p)
	v, err := p.ParseBytes(s.last)
	if err != nil || v.Type() != fastjson.TypeObject {
		return 0, 0, false
	}
	for _, names := range [2][2]string{{"prompt_tokens", "prompt_tokens_details"}, {"input_tokens", "input_tokens_details"}} {
		c, okc := count(v.Get(names[1], "cached_tokens"))
		if !okc {
			continue
		}
		pr, okp := count(v.Get(names[0]))
		if !okp {
			pr = 0
		}
		return pr, c, true
	}
	return 0, 0, false
}

// count reads a non-negative integer token count.
func count(v *fastjson.Value) (int64, bool) {
	if v == nil || v.Type() != fastjson.TypeNumber {
		return 0, false
	}
	f, err := v.Float64()
	if err != nil || f < 0 || f > 1<<53 || f != math.Trunc(f) {
		return 0, false
	}
	return int64(f), true
}

// countUsage adds the backend-reported prompt and cached tokens of an
// answer to b's counters. The backend's own count is the operator's truth
// about cache hits; the router does not rely on it.
func (rt *Router) countUsage(b *backend, s *usageScanner) (prompt, cached int64, ok bool) {
	prompt, cached, ok = s.usageCounts()
	if !ok {
		return 0, 0, false
	}
	b.cachedTokens.Add(float64(cached))
	if prompt > 0 {
		b.promptTokens.Add(float64(prompt))
	}
	return prompt, cached, true
}
