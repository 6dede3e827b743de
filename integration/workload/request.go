package workload

import (
	"sync"
	"time"
)

// Request is one request to replay.
//
// Body may be nil: call BodyBytes (or AppendBody with a reused buffer) to get
// the bytes either way. Requests are safe for concurrent reads; rendering a
// body touches no shared mutable state.
type Request struct {
	// At is the arrival offset from the start of the run, for open-loop
	// replay. Closed-loop replay ignores it (but must respect Turn order
	// within a Conversation).
	At time.Duration
	// Body is the complete OpenAI /v1/chat/completions JSON body, when
	// materialised (see Workload.Materialize); nil otherwise.
	Body []byte
	// PromptTokens is the prompt length kvmesh-sim will compute for Body.
	PromptTokens int
	// OutputTokens is the body's max_tokens.
	OutputTokens int
	// Conversation groups requests that form one chat session; turn t+1 of a
	// conversation must not be sent before turn t has completed in
	// closed-loop replay. Unique per request when the workload has no
	// sessions. See each generator for its meaning.
	Conversation int
	// Group identifies the shared prefix (system prompt, document, ...) the
	// request starts with, for per-group analysis. See each generator.
	Group int
	// Turn is the 0-based position of the request within its Conversation.
	Turn int

	msgs []message
	enc  *encoding
}

// AppendBody renders the request body onto dst and returns the extended
// slice. With a dst of sufficient capacity it does not allocate; it renders
// even when Body is set (the result is identical). It may use dst's spare
// capacity beyond the returned length as scratch space.
func (r *Request) AppendBody(dst []byte) []byte {
	return appendBody(dst, r.enc, r.msgs, r.OutputTokens)
}

// BodyLen returns the exact length of the body in bytes without rendering it.
func (r *Request) BodyLen() int {
	if r.Body != nil {
		return len(r.Body)
	}
	return bodyLen(r.enc, r.msgs, r.OutputTokens)
}

// BodyBytes returns Body when materialised, or renders a fresh copy (one
// allocation of exactly BodyLen bytes). The caller may keep the result.
func (r *Request) BodyBytes() []byte {
	if r.Body != nil {
		return r.Body
	}
	return r.render()
}

// render renders into a pooled scratch buffer and copies out the exact
// bytes: cheaper than a length pass followed by rendering in place.
func (r *Request) render() []byte {
	bp := scratch.Get().(*[]byte)
	buf := r.AppendBody((*bp)[:0])
	out := make([]byte, len(buf))
	copy(out, buf)
	*bp = buf
	scratch.Put(bp)
	return out
}

var scratch = sync.Pool{New: func() any { return new([]byte) }}

// NumMessages returns the number of chat messages in the body.
func (r *Request) NumMessages() int { return len(r.msgs) }

// Workload is a replayable request stream in arrival order (At ascending).
type Workload struct {
	// Name says which generator (and main parameters) produced the workload.
	Name string
	// Requests in arrival order.
	Requests []Request
	// Span is the arrival time of the last request.
	Span time.Duration
	// PromptTokens and OutputTokens are totals over Requests.
	PromptTokens int64
	OutputTokens int64
	// MaxPromptTokens is the longest prompt (size the backends' context to it).
	MaxPromptTokens int
	// Conversations and Groups count distinct Request.Conversation and
	// Request.Group values.
	Conversations int
	Groups        int
	// Trace describes the source trace slice; nil for synthetic workloads.
	Trace *TraceInfo
}

// Materialize renders every request's Body. Memory: TotalBodyBytes bytes.
func (w *Workload) Materialize() {
	for i := range w.Requests {
		r := &w.Requests[i]
		if r.Body == nil {
			r.Body = r.render()
		}
	}
}

// TotalBodyBytes returns the summed body length of all requests: the memory
// Materialize needs. It renders nothing (about 1 ns per prompt word).
func (w *Workload) TotalBodyBytes() int64 {
	var n int64
	for i := range w.Requests {
		n += int64(w.Requests[i].BodyLen())
	}
	return n
}

// newRequest builds a request from a recipe; msgs is retained.
func newRequest(enc *encoding, msgs []message, output int) Request {
	return Request{
		PromptTokens: promptTokens(msgs),
		OutputTokens: output,
		msgs:         msgs,
		enc:          enc,
	}
}

// summarize fills the summary fields from Requests.
func (w *Workload) summarize() {
	w.PromptTokens, w.OutputTokens, w.MaxPromptTokens, w.Span = 0, 0, 0, 0
	convs := make(map[int]struct{})
	groups := make(map[int]struct{})
	for i := range w.Requests {
		r := &w.Requests[i]
		w.PromptTokens += int64(r.PromptTokens)
		w.OutputTokens += int64(r.OutputTokens)
		w.MaxPromptTokens = max(w.MaxPromptTokens, r.PromptTokens)
		w.Span = max(w.Span, r.At)
		convs[r.Conversation] = struct{}{}
		groups[r.Group] = struct{}{}
	}
	w.Conversations, w.Groups = len(convs), len(groups)
}
