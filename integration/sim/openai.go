package sim

import (
	"encoding/json"
	"strconv"
)

// Reply bodies of the OpenAI API, built by appending to a byte slice: the
// output text is filler words that need no escaping, and the few strings that
// might (model names, ids, error messages) are escaped once with
// encoding/json.

// fillerWords are the output vocabulary. Output token i is
// fillerWords[i % len(fillerWords)], so a reply of n tokens is exactly n
// words and re-tokenizes to the ids the engine generated (a client sending the
// reply back in the next turn hits the blocks the engine cached while
// decoding).
var fillerWords = [...]string{
	"the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog", "while",
	"seven", "busy", "engines", "stream", "tokens", "into", "cached", "blocks", "and", "every",
	"router", "learns", "where", "each", "prefix", "lives", "so", "that", "later", "requests",
	"find", "warm", "memory", "instead", "of", "cold", "silicon", "then", "queues", "drain",
	"slowly", "as", "load", "moves", "between", "replicas", "under", "steady", "traffic", "until",
	"nothing", "remains", "but", "quiet", "gpus", "waiting", "for", "more", "work", "to",
	"arrive", "from", "far", "away",
}

var fillerIDs = func() (ids [len(fillerWords)]uint32) {
	for i, w := range fillerWords {
		ids[i] = TokenID(w)
	}
	return ids
}()

func fillerID(i int) uint32 { return fillerIDs[i%len(fillerIDs)] }

// appendFiller appends output tokens [from, to) as text: words separated by
// single spaces, with a leading space when from > 0 so that chunks
// concatenate to the full text.
func appendFiller(dst []byte, from, to int) []byte {
	for i := from; i < to; i++ {
		if i > 0 {
			dst = append(dst, ' ')
		}
		dst = append(dst, fillerWords[i%len(fillerWords)]...)
	}
	return dst
}

// FillerText returns the text the sim generates for n output tokens.
func FillerText(n int) string { return string(appendFiller(nil, 0, n)) }

// jsonString returns s as a JSON string literal.
func jsonString(s string) []byte {
	b, _ := json.Marshal(s) // a string always marshals
	return b
}

// replyMeta is what every reply body of one request repeats.
type replyMeta struct {
	ep        endpoint
	id        []byte // JSON string literal
	created   int64
	model     []byte // JSON string literal
	prompt    int
	cached    int
	maxOut    int
	withUsage bool // streaming: send a final usage chunk
	// engineTTFT is the engine's time to first token (simulated ns; 0
	// unknown), sent after the usage as "kvmesh_sim":{"engine_ttft_us":N}
	// so that the benchmark can tell, request by request, the time spent
	// in the engine from the time spent before and after it.
	engineTTFT int64
}

// appendSim appends the reply's simulator-only figures (after the usage).
func (m *replyMeta) appendSim(dst []byte) []byte {
	if m.engineTTFT <= 0 {
		return dst
	}
	dst = append(dst, `,"kvmesh_sim":{"engine_ttft_us":`...)
	dst = strconv.AppendInt(dst, max((m.engineTTFT+500)/1000, 1), 10) // 0 would read as unknown
	return append(dst, '}')
}

func (m *replyMeta) appendHead(dst []byte, object string) []byte {
	dst = append(dst, `{"id":`...)
	dst = append(dst, m.id...)
	dst = append(dst, `,"object":"`...)
	dst = append(dst, object...)
	dst = append(dst, `","created":`...)
	dst = strconv.AppendInt(dst, m.created, 10)
	dst = append(dst, `,"model":`...)
	return append(dst, m.model...)
}

func (m *replyMeta) appendUsage(dst []byte, completion int) []byte {
	dst = append(dst, `"usage":{"prompt_tokens":`...)
	dst = strconv.AppendInt(dst, int64(m.prompt), 10)
	dst = append(dst, `,"total_tokens":`...)
	dst = strconv.AppendInt(dst, int64(m.prompt+completion), 10)
	dst = append(dst, `,"completion_tokens":`...)
	dst = strconv.AppendInt(dst, int64(completion), 10)
	dst = append(dst, `,"prompt_tokens_details":{"cached_tokens":`...)
	dst = strconv.AppendInt(dst, int64(m.cached), 10)
	return append(dst, `}}`...)
}

// appendResponse appends a complete non-streaming reply.
func (m *replyMeta) appendResponse(dst []byte) []byte {
	if m.ep == chatEndpoint {
		dst = m.appendHead(dst, "chat.completion")
		dst = append(dst, `,"choices":[{"index":0,"message":{"role":"assistant","content":"`...)
	} else {
		dst = m.appendHead(dst, "text_completion")
		dst = append(dst, `,"choices":[{"index":0,"text":"`...)
	}
	dst = appendFiller(dst, 0, m.maxOut)
	if m.ep == chatEndpoint {
		dst = append(dst, `"}`...)
	} else {
		dst = append(dst, `"`...)
	}
	dst = append(dst, `,"logprobs":null,"finish_reason":"length"}],`...)
	dst = m.appendUsage(dst, m.maxOut)
	dst = m.appendSim(dst)
	return append(dst, "}\n"...)
}

// appendRoleEvent appends the first event of a chat stream.
func (m *replyMeta) appendRoleEvent(dst []byte) []byte {
	dst = append(dst, "data: "...)
	dst = m.appendHead(dst, "chat.completion.chunk")
	dst = append(dst, `,"choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}`...)
	return append(dst, "\n\n"...)
}

// appendTokensEvent appends one event carrying output tokens [from, to).
func (m *replyMeta) appendTokensEvent(dst []byte, from, to int) []byte {
	dst = append(dst, "data: "...)
	if m.ep == chatEndpoint {
		dst = m.appendHead(dst, "chat.completion.chunk")
		dst = append(dst, `,"choices":[{"index":0,"delta":{"content":"`...)
		dst = appendFiller(dst, from, to)
		dst = append(dst, `"}`...)
	} else {
		dst = m.appendHead(dst, "text_completion")
		dst = append(dst, `,"choices":[{"index":0,"text":"`...)
		dst = appendFiller(dst, from, to)
		dst = append(dst, `"`...)
	}
	dst = append(dst, `,"logprobs":null,"finish_reason":`...)
	if to >= m.maxOut {
		dst = append(dst, `"length"`...)
	} else {
		dst = append(dst, `null`...)
	}
	return append(dst, "}]}\n\n"...)
}

// appendUsageEvent appends the final usage-only event of a stream.
func (m *replyMeta) appendUsageEvent(dst []byte) []byte {
	dst = append(dst, "data: "...)
	if m.ep == chatEndpoint {
		dst = m.appendHead(dst, "chat.completion.chunk")
	} else {
		dst = m.appendHead(dst, "text_completion")
	}
	dst = append(dst, `,"choices":[],`...)
	dst = m.appendUsage(dst, m.maxOut)
	dst = m.appendSim(dst)
	return append(dst, "}\n\n"...)
}

// doneEvent ends every successful stream.
const doneEvent = "data: [DONE]\n\n"

// appendErrorBody appends an OpenAI-style error object:
// {"error":{"message":...,"type":...,"param":...,"code":<status>}}.
func appendErrorBody(dst []byte, e *apiError) []byte {
	dst = append(dst, `{"error":{"message":`...)
	dst = append(dst, jsonString(e.msg)...)
	dst = append(dst, `,"type":`...)
	dst = append(dst, jsonString(e.typ)...)
	dst = append(dst, `,"param":`...)
	if e.param == "" {
		dst = append(dst, `null`...)
	} else {
		dst = append(dst, jsonString(e.param)...)
	}
	dst = append(dst, `,"code":`...)
	dst = strconv.AppendInt(dst, int64(e.status), 10)
	return append(dst, `}}`...)
}
