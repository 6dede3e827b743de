package router

import (
	"bytes"
	"math"
	"slices"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/valyala/fastjson"
)

// Endpoint is the kind of OpenAI API request a body belongs to; it decides
// which fields Render reads.
type Endpoint uint8

const (
	EndpointChat        Endpoint = iota // POST /v1/chat/completions: "messages"
	EndpointCompletions                 // POST /v1/completions: "prompt"
	EndpointResponses                   // POST /v1/responses: "instructions" + "input"
	EndpointEmbeddings                  // POST /v1/embeddings: "input" (or vLLM's chat-style "messages")
)

func (e Endpoint) String() string {
	switch e {
	case EndpointChat:
		return "chat"
	case EndpointCompletions:
		return "completions"
	case EndpointResponses:
		return "responses"
	case EndpointEmbeddings:
		return "embeddings"
	}
	return "unknown"
}

// EndpointForPath maps a request path to its Endpoint; ok is false for paths
// Render does not understand (they are proxied without a prompt).
func EndpointForPath(path string) (e Endpoint, ok bool) {
	switch path {
	case "/v1/chat/completions":
		return EndpointChat, true
	case "/v1/completions":
		return EndpointCompletions, true
	case "/v1/responses":
		return EndpointResponses, true
	case "/v1/embeddings":
		return EndpointEmbeddings, true
	}
	return 0, false
}

// UnitFormat says how to read Prompt.Units. Two renderings of different
// formats may hold equal bytes with different meanings, so whoever derives
// cache keys from Units must fold the format into the key's seed.
type UnitFormat uint8

const (
	// FormatMessages: framed messages (chat, responses, chat-style
	// embeddings); see the format description in render_format.go.
	FormatMessages UnitFormat = iota
	// FormatText: the raw bytes of a completions/embeddings text prompt,
	// segments concatenated without separators (Ends marks them).
	FormatText
	// FormatTokens: 4-byte little-endian token ids from a completions or
	// embeddings prompt given as ids; 16 tokens are 64 bytes.
	FormatTokens
)

// Prompt is one request's canonical rendering; reused across requests (Reset keeps capacity).
type Prompt struct {
	Model     string
	CacheSalt string // body field "cache_salt" (vLLM), "" if absent
	Stream    bool
	Units     []byte // canonical rendering (byte mode)
	Ends      []int  // offset in Units where each message ends, ascending; the last equals len(Units)
	MaxTokens int    // max_tokens / max_completion_tokens / max_output_tokens if present, else 0

	Endpoint Endpoint   // the kind of request rendered
	Format   UnitFormat // how to read Units; fold it into cache-key seeds
	// HasPreamble is true when Units starts with a preamble segment (the
	// request's tool definitions and chat-template options); Ends[0] is then
	// that segment's end and the messages' ends follow.
	HasPreamble bool

	// Last strings handed out for Model and CacheSalt: a pooled Prompt that
	// sees the same model again reuses the string instead of allocating.
	modelCache, saltCache string
}

// Reset clears p for the next request, keeping its buffers' capacity.
func (p *Prompt) Reset() {
	p.Model, p.CacheSalt, p.Stream = "", "", false
	p.Units, p.Ends = p.Units[:0], p.Ends[:0]
	p.MaxTokens = 0
	p.Endpoint, p.Format, p.HasPreamble = 0, 0, false
}

// Messages returns how many messages (or prompt segments) Ends delimits,
// not counting a leading preamble segment.
func (p *Prompt) Messages() int {
	if p.HasPreamble {
		return len(p.Ends) - 1
	}
	return len(p.Ends)
}

func (p *Prompt) setModel(b []byte) {
	if string(b) != p.modelCache { // the comparison does not allocate
		p.modelCache = string(b)
	}
	p.Model = p.modelCache
}

func (p *Prompt) setSalt(b []byte) {
	if string(b) != p.saltCache {
		p.saltCache = string(b)
	}
	p.CacheSalt = p.saltCache
}

// maxPooledBody: a parser that has held a body larger than this is dropped
// instead of pooled, so one huge request does not pin its buffers forever.
const maxPooledBody = 1 << 20

// renderer holds one Render call's parser and scratch space; pooled.
type renderer struct {
	parser  fastjson.Parser
	p       *Prompt
	scratch []byte // canonical JSON of parts and items that get hashed
	tmp     []byte // raw JSON text of the string being rendered (see peek)
	tmp2    []byte // a second one, for the responses input held while instructions render
	spliced []byte // body with its token-id array cut out (see tokenFastPath)

	noFastPath bool       // tests: force the general path
	kvs        []sortedKV // stack of object members being sorted by key
	keys       [][]byte   // an object's keys, for dupKey
}

// dupKey returns a key that appears more than once in o ("" if none). A
// backend's JSON parser (Python's, pydantic's) keeps the last copy of a
// repeated key where fastjson keeps the first: a message with two
// "content" values would be keyed here by one while the engine prefills
// the other, and its claims would say a backend holds a prompt it never
// saw. Rendered objects are refused when they repeat a key. Quadratic up
// to a few dozen keys (a message has a handful), sorted beyond.
func (r *renderer) dupKey(o *fastjson.Object) string {
	if o.Len() < 2 {
		return ""
	}
	r.keys = r.keys[:0]
	o.Visit(func(k []byte, _ *fastjson.Value) { r.keys = append(r.keys, k) })
	ks := r.keys
	if len(ks) > 32 {
		slices.SortFunc(ks, bytes.Compare)
		for i := 1; i < len(ks); i++ {
			if bytes.Equal(ks[i-1], ks[i]) {
				return string(ks[i])
			}
		}
		return ""
	}
	for i := 1; i < len(ks); i++ {
		for j := 0; j < i; j++ {
			if bytes.Equal(ks[i], ks[j]) {
				return string(ks[i])
			}
		}
	}
	return ""
}

// refuseDup answers a rendered object that repeats a key (dupKey).
func (r *renderer) refuseDup(o *fastjson.Object, at loc) error { return r.refuseDupIn(o, at, "") }

// refuseDupIn is refuseDup for an object nested in at's element under the
// member field ("function" of a tool call, "image_url" of a part).
func (r *renderer) refuseDupIn(o *fastjson.Object, at loc, field string) error {
	if k := r.dupKey(o); k != "" {
		where := at.param(field)
		if field != "" {
			k = field + "." + k
		}
		e := badRequest(at.param(k), "duplicate key %q in %s: it is ambiguous which copy counts", k, where)
		e.Code = "duplicate_member"
		return e
	}
	return nil
}

// topKeys are the top-level members whose value decides the rendering or
// the keys' seed; topKeysOf says which of them an endpoint reads (bit i:
// topKeys[i]).
var topKeys = [...]string{"model", "cache_salt", "messages", "prompt", "input", "instructions",
	"chat_template", "chat_template_kwargs", "documents", "functions", "tools", "previous_response_id", "conversation"}

func topKeysOf(ep Endpoint) uint16 {
	const common, preamble = 1<<0 | 1<<1, 1<<6 | 1<<7 | 1<<8 | 1<<9 | 1<<10
	switch ep {
	case EndpointChat:
		return common | 1<<2 | preamble
	case EndpointCompletions:
		return common | 1<<3
	case EndpointResponses:
		return common | 1<<4 | 1<<5 | preamble | 1<<11 | 1<<12
	}
	return common | 1<<2 | 1<<4 | preamble // embeddings: input, or chat-style messages
}

// refuseTopDup refuses a body that repeats a top-level member the endpoint
// renders: fastjson reads the first copy, the backend's parser the last,
// so the claims learned would name a prompt the engine never saw. The
// handler's skim refuses model, cache_salt and the list keys before
// parsing; this covers the rest (tools, instructions, chat_template...)
// and Render's direct callers. One pass over the members.
func refuseTopDup(o *fastjson.Object, ep Endpoint) error {
	want := topKeysOf(ep)
	var seen uint16
	dup := ""
	o.Visit(func(k []byte, _ *fastjson.Value) {
		if dup != "" || len(k) > len("previous_response_id") { // the longest of topKeys
			return
		}
		for i, name := range topKeys {
			if want&(1<<i) != 0 && string(k) == name {
				if seen&(1<<i) != 0 {
					dup = name
				}
				seen |= 1 << i
				return
			}
		}
	})
	if dup == "" {
		return nil
	}
	e := badRequest(dup, "duplicate key %q in the request body: it is ambiguous which copy counts", dup)
	e.Code = "duplicate_member"
	return e
}

// jsonErrorText is a parse error as a client should read it: the
// parser's message nests one "cannot parse ..." prefix per level it was
// in (300 of them for a body nested too deep: a 14 KB message), so those
// prefixes are dropped (the innermost reason and the offending text stay)
// and the rest is cut at maxJSONErrorText.
func jsonErrorText(err error) string {
	s := err.Error()
	for _, p := range []string{"cannot parse array value: ", "cannot parse object value: ", "cannot parse array: ", "cannot parse object: "} {
		s = strings.ReplaceAll(s, p, "") // the levels it was in: only the innermost reason says what is wrong
	}
	if len(s) > maxJSONErrorText {
		cut := maxJSONErrorText
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut-- // not inside a character
		}
		s = s[:cut] + "..."
	}
	return s
}

// maxJSONErrorText bounds the parser's part of a 400 message.
const maxJSONErrorText = 300

var rendererPool = sync.Pool{New: func() any { return new(renderer) }}

// Render parses an OpenAI request body of the given endpoint kind and fills p, reusing p's buffers.
// Errors are *APIError with Status 400 (malformed JSON, wrong field types, missing model or messages).
//
// Render never panics on any input and, once p's buffers and the internal
// parser pool have grown to the workload, allocates nothing.
func Render(ep Endpoint, body []byte, p *Prompt) error {
	p.Reset()
	p.Endpoint = ep
	r := rendererPool.Get().(*renderer)
	r.p = p
	err := r.render(ep, body)
	r.p = nil
	if len(body) <= maxPooledBody && cap(r.scratch) <= maxPooledBody && cap(r.spliced) <= maxPooledBody {
		rendererPool.Put(r)
	}
	if err != nil {
		p.Units, p.Ends = p.Units[:0], p.Ends[:0]
		return err
	}
	return nil
}

func (r *renderer) render(ep Endpoint, body []byte) error {
	fast := false
	if (ep == EndpointCompletions || ep == EndpointEmbeddings) && len(body) >= tokenFastPathMin && !r.noFastPath {
		key := "prompt"
		if ep == EndpointEmbeddings {
			key = "input"
		}
		if b, ok := r.tokenFastPath(body, key); ok {
			body, fast = b, true // the ids are rendered; parse the rest
		}
	}
	root, err := r.parser.ParseBytes(body)
	if err != nil {
		return badRequest("", "request body is not valid JSON: %s", jsonErrorText(err))
	}
	obj, err := root.Object()
	if err != nil {
		return badRequest("", "request body must be a JSON object, not %s", root.Type())
	}
	if err := refuseTopDup(obj, ep); err != nil {
		return err
	}
	if err := r.common(obj, ep); err != nil {
		return err
	}
	if fast {
		return nil
	}
	switch ep {
	case EndpointChat:
		return r.chat(obj)
	case EndpointCompletions:
		return r.textPrompt(obj, "prompt")
	case EndpointResponses:
		return r.responses(obj)
	case EndpointEmbeddings:
		if isAbsent(obj.Get("input")) && !isAbsent(obj.Get("messages")) {
			return r.chat(obj) // vLLM's chat-style embeddings request
		}
		return r.textPrompt(obj, "input")
	}
	return badRequest("", "unknown endpoint kind %d", ep)
}

// common reads the fields every endpoint shares: model, cache_salt, stream
// and the output-token limit.
func (r *renderer) common(obj *fastjson.Object, ep Endpoint) error {
	p := r.p
	model, ok := optString(obj.Get("model"))
	if !ok {
		return badRequest("model", "model must be a string")
	}
	if len(model) == 0 {
		return badRequest("model", "missing required parameter: model")
	}
	p.setModel(model)
	salt, ok := optString(obj.Get("cache_salt"))
	if !ok {
		return badRequest("cache_salt", "cache_salt must be a string")
	}
	if len(salt) > 0 {
		p.setSalt(salt)
	}
	if v := obj.Get("stream"); !isAbsent(v) {
		switch v.Type() {
		case fastjson.TypeTrue:
			p.Stream = true
		case fastjson.TypeFalse:
		default:
			return badRequest("stream", "stream must be a boolean")
		}
	}
	keys := [2]string{"max_completion_tokens", "max_tokens"}
	if ep == EndpointResponses {
		keys = [2]string{"max_output_tokens", ""}
	}
	for _, k := range keys {
		if k == "" {
			continue
		}
		n, present, ok := optCount(obj.Get(k))
		if !ok {
			return badRequest(k, "%s must be a non-negative integer", k)
		}
		if present {
			p.MaxTokens = n
			break
		}
	}
	return nil
}

// isAbsent reports whether a member is missing or JSON null; Render treats
// the two alike everywhere.
func isAbsent(v *fastjson.Value) bool { return v == nil || v.Type() == fastjson.TypeNull }

// optString returns an optional string member's unescaped bytes (nil when
// absent or null); ok is false when the member has another type.
func optString(v *fastjson.Value) (s []byte, ok bool) {
	if isAbsent(v) {
		return nil, true
	}
	if v.Type() != fastjson.TypeString {
		return nil, false
	}
	b, _ := v.StringBytes()
	return b, true
}

// optCount reads an optional non-negative integer such as max_tokens. 100.0
// is accepted as 100, as the Python servers behind us accept it.
func optCount(v *fastjson.Value) (n int, present, ok bool) {
	if isAbsent(v) {
		return 0, false, true
	}
	if v.Type() != fastjson.TypeNumber {
		return 0, true, false
	}
	f, err := v.Float64()
	if err != nil || f < 0 || f > math.MaxInt32 || f != math.Trunc(f) {
		return 0, true, false
	}
	return int(f), true, true
}
