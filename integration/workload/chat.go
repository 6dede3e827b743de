package workload

import (
	"encoding/json"
	"strconv"
)

// A chat prompt is kept as a recipe, not as text: each message is a list of
// spans, and a span is "the first Words words of text block Block". Recipes
// are immutable once built, so requests share them freely (turn t+1 of a
// conversation reuses turn t's messages slice).

// role is a chat message role.
type role uint8

// Roles used by the generators.
const (
	roleSystem role = iota
	roleUser
	roleAssistant
)

var roleJSON = [...]string{
	roleSystem:    `{"role":"system","content":"`,
	roleUser:      `{"role":"user","content":"`,
	roleAssistant: `{"role":"assistant","content":"`,
}

// String returns the OpenAI role name.
func (r role) String() string {
	switch r {
	case roleSystem:
		return "system"
	case roleUser:
		return "user"
	case roleAssistant:
		return "assistant"
	}
	return "role(" + strconv.Itoa(int(r)) + ")"
}

// span is the first words words of text block block.
type span struct {
	block uint64
	words int32
}

// message is one chat message: its role and content spans. The content text
// is the spans' words joined by single spaces.
type message struct {
	role  role
	spans []span
}

func (m *message) words() int {
	n := 0
	for _, s := range m.spans {
		n += int(s.words)
	}
	return n
}

// Template token costs of kvmesh-sim's tokenization rule.
const (
	tokensPerMessage = 2 // role marker before, end marker after
	tokensGenPrompt  = 1 // generation prompt at the end
	// chatOverhead is the template cost of a one-message chat.
	chatOverhead = tokensPerMessage + tokensGenPrompt
)

// promptTokens applies the tokenization rule: W + 2M + 1.
func promptTokens(msgs []message) int {
	n := tokensGenPrompt
	for i := range msgs {
		n += msgs[i].words() + tokensPerMessage
	}
	return n
}

// BodyOptions are the request-body settings shared by every workload.
type BodyOptions struct {
	// Model is the "model" field. Default "kvmesh-sim": set it to the model
	// name the backends serve.
	Model string
	// Stream asks for an SSE stream. Default true: vLLM's and SGLang's serving
	// benchmarks stream so that time to first token can be measured. When set,
	// the body also carries stream_options.include_usage = true so the final
	// chunk reports token usage.
	Stream bool
	// IgnoreEOS adds vLLM/SGLang's "ignore_eos": true so real engines generate
	// exactly max_tokens tokens (SGLang's bench_serving does this by default).
	// Default false: it is not part of the OpenAI API.
	IgnoreEOS bool
}

// DefaultBodyOptions returns the defaults documented on BodyOptions.
func DefaultBodyOptions() BodyOptions {
	return BodyOptions{Model: "kvmesh-sim", Stream: true}
}

// encoding is BodyOptions pre-rendered once per workload.
type encoding struct {
	head string // `{"model":"...","messages":[`
	tail string // flags after max_tokens, through the closing brace
}

func newEncoding(o BodyOptions) *encoding {
	model, _ := json.Marshal(o.Model) // a string always marshals
	e := &encoding{head: `{"model":` + string(model) + `,"messages":[`}
	tail := `,"stream":false`
	if o.Stream {
		tail = `,"stream":true,"stream_options":{"include_usage":true}`
	}
	if o.IgnoreEOS {
		tail += `,"ignore_eos":true`
	}
	e.tail = tail + "}"
	return e
}

const (
	messageClose = `"}`
	maxTokensKey = `],"max_tokens":`
)

// appendContent renders a message's content (no quotes): its spans' words
// joined by single spaces. Words are lowercase ASCII, so no JSON escaping.
func appendContent(dst []byte, m *message) []byte {
	start := len(dst)
	for _, s := range m.spans {
		dst = appendWordsSpaced(dst, s.block, int(s.words))
	}
	if len(dst) > start {
		dst = dst[:len(dst)-1] // drop the trailing space
	}
	return dst
}

func contentLen(m *message) int {
	n := 0
	for _, s := range m.spans {
		n += spacedLen(s.block, int(s.words))
	}
	if n > 0 {
		n--
	}
	return n
}

// appendBody renders a complete /v1/chat/completions body.
func appendBody(dst []byte, e *encoding, msgs []message, maxTokens int) []byte {
	dst = append(dst, e.head...)
	for i := range msgs {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, roleJSON[msgs[i].role]...)
		dst = appendContent(dst, &msgs[i])
		dst = append(dst, messageClose...)
	}
	dst = append(dst, maxTokensKey...)
	dst = strconv.AppendInt(dst, int64(maxTokens), 10)
	return append(dst, e.tail...)
}

// bodyLen is len(appendBody(nil, e, msgs, maxTokens)), computed without
// rendering (it still walks the word stream for word lengths, ~5x cheaper).
func bodyLen(e *encoding, msgs []message, maxTokens int) int {
	n := len(e.head) + len(maxTokensKey) + decimalLen(maxTokens) + len(e.tail)
	for i := range msgs {
		if i > 0 {
			n++
		}
		n += len(roleJSON[msgs[i].role]) + contentLen(&msgs[i]) + len(messageClose)
	}
	return n
}

func decimalLen(v int) int {
	n := 1
	if v < 0 {
		n++
		v = -v
	}
	for v >= 10 {
		v /= 10
		n++
	}
	return n
}
