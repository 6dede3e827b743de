package sim

import (
	"fmt"
	"net/http"

	"github.com/valyala/fastjson"
)

// endpoint is the OpenAI API a body was sent to.
type endpoint uint8

const (
	chatEndpoint endpoint = iota
	completionEndpoint
)

// Paths of the two generation endpoints.
const (
	ChatPath       = "/v1/chat/completions"
	CompletionPath = "/v1/completions"
)

// parseEndpoint maps a path ("/v1/chat/completions", "/v1/completions") to
// an endpoint. The empty string means chat.
func parseEndpoint(path string) (endpoint, error) {
	switch path {
	case ChatPath, "", "chat":
		return chatEndpoint, nil
	case CompletionPath, "completions":
		return completionEndpoint, nil
	}
	return 0, fmt.Errorf("sim: unknown endpoint %q (want %s or %s)", path, ChatPath, CompletionPath)
}

// request is what the sim needs of a decoded generation request.
type request struct {
	model        int    // index into Config.Models
	stream       bool   // SSE reply
	includeUsage bool   // stream_options.include_usage
	maxTokens    int    // requested output tokens; 0 when absent
	seed         uint64 // root block key: model and cache_salt
	salt         string // cache_salt, for KV events
	tokens       []uint32
}

// apiError is an OpenAI-style error reply.
type apiError struct {
	status int
	typ    string
	msg    string
	param  string // "" = null
}

func (e *apiError) Error() string { return e.msg }

func badRequest(param, format string, args ...any) *apiError {
	return &apiError{status: http.StatusBadRequest, typ: "BadRequestError", msg: fmt.Sprintf(format, args...), param: param}
}

// decoder turns request bodies into token sequences. It holds the per-model
// seed states so decoding does not allocate for them.
type decoder struct {
	models []string
	seeds  []seedState
}

func newDecoder(models []string) *decoder {
	d := &decoder{models: models, seeds: make([]seedState, len(models))}
	for i, m := range models {
		d.seeds[i] = modelSeedState(m)
	}
	return d
}

// decode parses body as a request to ep and appends its prompt tokens to
// toks (which may be nil). The parser is borrowed: nothing returned points
// into it.
func (d *decoder) decode(p *fastjson.Parser, body []byte, ep endpoint, toks []uint32) (request, *apiError) {
	var req request
	v, err := p.ParseBytes(body)
	if err != nil {
		return req, badRequest("", "malformed JSON body: %v", err)
	}
	if v.Type() != fastjson.TypeObject {
		return req, badRequest("", "request body must be a JSON object, got %s", v.Type())
	}
	if aerr := d.decodeModel(v, &req); aerr != nil {
		return req, aerr
	}
	if aerr := decodeOptions(v, ep, &req); aerr != nil {
		return req, aerr
	}
	salt, hasSalt, aerr := optionalString(v, "cache_salt")
	if aerr != nil {
		return req, aerr
	}
	if hasSalt && len(salt) == 0 {
		return req, badRequest("cache_salt", "cache_salt must be a non-empty string if provided")
	}
	req.seed = finishSeed(d.seeds[req.model], salt, hasSalt)
	if hasSalt {
		req.salt = string(salt)
	}

	switch ep {
	case chatEndpoint:
		toks, aerr = appendChat(toks, v.Get("messages"))
	default:
		toks, aerr = appendCompletionPrompt(toks, v.Get("prompt"))
	}
	if aerr != nil {
		return req, aerr
	}
	req.tokens = toks
	return req, nil
}

// decodeModel resolves "model" against the served names.
func (d *decoder) decodeModel(v *fastjson.Value, req *request) *apiError {
	name, ok, aerr := optionalString(v, "model")
	if aerr != nil {
		return aerr
	}
	if !ok {
		req.model = 0
		return nil
	}
	for i, m := range d.models {
		if m == string(name) { // no allocation: the compiler compares in place
			req.model = i
			return nil
		}
	}
	return &apiError{status: http.StatusNotFound, typ: "NotFoundError", param: "model",
		msg: fmt.Sprintf("The model `%s` does not exist.", truncate(name, 200))}
}

// decodeOptions reads stream, stream_options, max_tokens and n.
func decodeOptions(v *fastjson.Value, ep endpoint, req *request) *apiError {
	var aerr *apiError
	if req.stream, aerr = optionalBool(v, "stream"); aerr != nil {
		return aerr
	}
	if so := v.Get("stream_options"); so != nil && so.Type() != fastjson.TypeNull {
		if so.Type() != fastjson.TypeObject {
			return badRequest("stream_options", "stream_options must be an object")
		}
		if req.includeUsage, aerr = optionalBool(so, "include_usage"); aerr != nil {
			return aerr
		}
	}
	mt, aerr := optionalPositiveInt(v, "max_tokens")
	if aerr != nil {
		return aerr
	}
	if ep == chatEndpoint {
		// vLLM: max_completion_tokens wins over the deprecated max_tokens.
		mct, aerr := optionalPositiveInt(v, "max_completion_tokens")
		if aerr != nil {
			return aerr
		}
		if mct > 0 {
			mt = mct
		}
	}
	req.maxTokens = mt
	if n := v.Get("n"); n != nil && n.Type() != fastjson.TypeNull {
		if x, err := n.Int(); err != nil || x != 1 {
			return badRequest("n", "kvmesh-sim supports only n=1")
		}
	}
	return nil
}

// appendChat appends the chat-template tokens of a messages array.
func appendChat(toks []uint32, msgs *fastjson.Value) ([]uint32, *apiError) {
	if msgs == nil {
		return toks, badRequest("messages", "messages is required")
	}
	arr, err := msgs.Array()
	if err != nil {
		return toks, badRequest("messages", "messages must be an array")
	}
	if len(arr) == 0 {
		return toks, badRequest("messages", "messages must not be empty")
	}
	for i, m := range arr {
		if m.Type() != fastjson.TypeObject {
			return toks, badRequest("messages", "messages[%d] must be an object", i)
		}
		role, ok, aerr := optionalString(m, "role")
		if aerr != nil {
			return toks, aerr
		}
		if !ok || len(role) == 0 {
			return toks, badRequest("messages", "messages[%d].role must be a non-empty string", i)
		}
		toks = append(toks, roleToken(role))
		if toks, aerr = appendContent(toks, m.Get("content"), i); aerr != nil {
			return toks, aerr
		}
		if toks, aerr = appendToolCalls(toks, m.Get("tool_calls"), i); aerr != nil {
			return toks, aerr
		}
		toks = append(toks, tokEnd)
	}
	return append(toks, tokAssistant), nil
}

// appendContent appends a message's content: a string, null, or an array of
// text and image_url parts.
func appendContent(toks []uint32, c *fastjson.Value, i int) ([]uint32, *apiError) {
	if c == nil {
		return toks, nil
	}
	switch c.Type() {
	case fastjson.TypeNull:
		return toks, nil
	case fastjson.TypeString:
		s, _ := c.StringBytes()
		return textMemo.appendWords(toks, s), nil
	case fastjson.TypeArray:
	default:
		return toks, badRequest("messages", "messages[%d].content must be a string, null or an array of parts", i)
	}
	parts, _ := c.Array()
	for j, p := range parts {
		if p.Type() != fastjson.TypeObject {
			return toks, badRequest("messages", "messages[%d].content[%d] must be an object", i, j)
		}
		typ := p.GetStringBytes("type")
		switch string(typ) {
		case "text":
			t := p.Get("text")
			if t == nil || t.Type() != fastjson.TypeString {
				return toks, badRequest("messages", "messages[%d].content[%d].text must be a string", i, j)
			}
			s, _ := t.StringBytes()
			toks = textMemo.appendWords(toks, s)
		case "image_url":
			iu := p.Get("image_url")
			var url []byte
			if iu != nil {
				switch iu.Type() {
				case fastjson.TypeString:
					url, _ = iu.StringBytes()
				case fastjson.TypeObject:
					url = iu.GetStringBytes("url")
				}
			}
			if url == nil {
				return toks, badRequest("messages", "messages[%d].content[%d].image_url.url must be a string", i, j)
			}
			toks = appendImage(toks, url)
		default:
			return toks, badRequest("messages", "messages[%d].content[%d]: unsupported content part type %q", i, j, truncate(typ, 64))
		}
	}
	return toks, nil
}

// appendToolCalls appends the function name and argument words of an
// assistant message's tool calls.
func appendToolCalls(toks []uint32, tc *fastjson.Value, i int) ([]uint32, *apiError) {
	if tc == nil || tc.Type() == fastjson.TypeNull {
		return toks, nil
	}
	calls, err := tc.Array()
	if err != nil {
		return toks, badRequest("messages", "messages[%d].tool_calls must be an array", i)
	}
	for j, call := range calls {
		fn := call.Get("function")
		if call.Type() != fastjson.TypeObject || fn == nil || fn.Type() != fastjson.TypeObject {
			return toks, badRequest("messages", "messages[%d].tool_calls[%d].function must be an object", i, j)
		}
		name, _, aerr := optionalString(fn, "name")
		if aerr != nil {
			return toks, aerr
		}
		args, _, aerr := optionalString(fn, "arguments")
		if aerr != nil {
			return toks, aerr
		}
		toks = appendWords(toks, name)
		toks = textMemo.appendWords(toks, args)
	}
	return toks, nil
}

// appendCompletionPrompt appends the tokens of a completions prompt: a
// string, an array of strings (their token sequences concatenated) or an
// array of token ids.
func appendCompletionPrompt(toks []uint32, p *fastjson.Value) ([]uint32, *apiError) {
	if p == nil {
		return toks, badRequest("prompt", "prompt is required")
	}
	start := len(toks)
	switch p.Type() {
	case fastjson.TypeString:
		s, _ := p.StringBytes()
		toks = textMemo.appendWords(toks, s)
	case fastjson.TypeArray:
		arr, _ := p.Array()
		if len(arr) == 0 {
			return toks, badRequest("prompt", "prompt must not be empty")
		}
		switch arr[0].Type() {
		case fastjson.TypeString:
			for i, e := range arr {
				s, err := e.StringBytes()
				if err != nil {
					return toks, badRequest("prompt", "prompt[%d] must be a string like prompt[0]", i)
				}
				toks = textMemo.appendWords(toks, s)
			}
		case fastjson.TypeNumber:
			for i, e := range arr {
				id, err := e.Int64()
				if err != nil || id < 0 || id >= VocabSize {
					// vLLM answers 400 for an id outside its vocabulary
					// ("Token id ... is out of vocabulary"): so does the sim.
					return toks, badRequest("prompt", "prompt[%d] must be a token id in [0, %d) (the vocabulary's size)", i, VocabSize)
				}
				toks = append(toks, uint32(id))
			}
		case fastjson.TypeArray:
			return toks, badRequest("prompt", "batched prompts (arrays of prompts) are not supported by kvmesh-sim")
		default:
			return toks, badRequest("prompt", "prompt must be a string, an array of strings or an array of token ids")
		}
	default:
		return toks, badRequest("prompt", "prompt must be a string, an array of strings or an array of token ids")
	}
	if len(toks) == start {
		return toks, badRequest("prompt", "prompt must contain at least one token")
	}
	return toks, nil
}

// optionalString returns v[key] if it is a string; absent or null is
// (nil, false, nil); any other type is an error.
func optionalString(v *fastjson.Value, key string) ([]byte, bool, *apiError) {
	f := v.Get(key)
	if f == nil || f.Type() == fastjson.TypeNull {
		return nil, false, nil
	}
	s, err := f.StringBytes()
	if err != nil {
		return nil, false, badRequest(key, "%s must be a string", key)
	}
	return s, true, nil
}

// optionalBool returns v[key] if it is a boolean; absent or null is false.
func optionalBool(v *fastjson.Value, key string) (bool, *apiError) {
	f := v.Get(key)
	if f == nil || f.Type() == fastjson.TypeNull {
		return false, nil
	}
	b, err := f.Bool()
	if err != nil {
		return false, badRequest(key, "%s must be a boolean", key)
	}
	return b, nil
}

// optionalPositiveInt returns v[key] if it is an integer >= 1; absent or
// null is 0.
func optionalPositiveInt(v *fastjson.Value, key string) (int, *apiError) {
	f := v.Get(key)
	if f == nil || f.Type() == fastjson.TypeNull {
		return 0, nil
	}
	n, err := f.Int()
	if err != nil || n < 1 {
		return 0, badRequest(key, "%s must be an integer >= 1", key)
	}
	return n, nil
}

// truncate shortens user-supplied text quoted in error messages.
func truncate(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "..."
	}
	return string(b)
}
