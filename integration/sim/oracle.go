package sim

import (
	"net/http"
	"sync"
)

// The oracle: what the benchmark's upper-reference arm asks each backend to
// route perfectly. Answers reflect the cache at the moment of the call and
// never change LRU order or counters.

// Load is a snapshot of an instance's load, as last published by the engine
// (at every step boundary).
type Load struct {
	Running      int     // vllm:num_requests_running
	Waiting      int     // vllm:num_requests_waiting
	KVCacheUsage float64 // vllm:kv_cache_usage_perc, 0..1
}

// Load returns the instance's current load.
func (in *Instance) Load() Load {
	r, w, kv := in.eng.load()
	return Load{Running: r, Waiting: w, KVCacheUsage: kv}
}

// CachedPrefix tokenizes a request body exactly as the engine would (endpoint
// is ChatPath or CompletionPath; "" means chat) and reports how many of its
// leading tokens the engine would serve from the cache if it scheduled the
// request now — the value it would add to vllm:prefix_cache_hits_total and
// report as cached_tokens — and the prompt length. As in the engine, only
// full blocks count and a fully cached prompt still recomputes its last
// block. Invalid bodies return the error the HTTP API would.
//
// To ask several instances about one body, parse it once (ParsePrompt) and
// ask each with CachedPromptTokens: tokenizing is most of the cost.
func (in *Instance) CachedPrefix(body []byte, endpoint string) (cachedTokens, promptTokens int, err error) {
	p := GetPrompt()
	defer p.Release()
	if err := in.ParsePrompt(body, endpoint, p); err != nil {
		return 0, 0, err
	}
	return in.CachedPromptTokens(p), p.Tokens(), nil
}

// Prompt is a request body as an engine sees it: its tokens and the keys of
// its blocks, computed once by ParsePrompt so that every instance of a
// fleet can be asked what it holds of it without tokenizing it again. The
// instances asked must serve the same models as the one that parsed it
// (the keys' seed is the model's); a block size of their own is fine (the
// prompt is keyed again there). The zero value is ready to use; reusing one
// keeps its buffers. GetPrompt and Release pool them.
type Prompt struct {
	blockSize int
	seed      uint64
	tokens    []uint32
	keys      []uint64 // the blocks an engine may serve from cache: all full ones but a last that ends the prompt
}

var promptPool = sync.Pool{New: func() any { return new(Prompt) }}

// GetPrompt returns a Prompt from a pool (Release returns it).
func GetPrompt() *Prompt { return promptPool.Get().(*Prompt) }

// Release returns p to GetPrompt's pool, dropping the buffers a huge prompt
// grew. p must not be used after.
func (p *Prompt) Release() {
	if cap(p.tokens) > 1<<20 {
		*p = Prompt{}
	}
	promptPool.Put(p)
}

// Tokens is the prompt's length in tokens.
func (p *Prompt) Tokens() int { return len(p.tokens) }

// ParsePrompt tokenizes body as CachedPrefix does into dst (its buffers are
// reused). dst is answered by any instance of the same configuration.
func (in *Instance) ParsePrompt(body []byte, endpoint string, dst *Prompt) error {
	ep, err := parseEndpoint(endpoint)
	if err != nil {
		return err
	}
	ps := in.parsers.Get()
	req, aerr := in.dec.decode(ps, body, ep, dst.tokens[:0])
	in.parsers.Put(ps)
	if req.tokens != nil {
		dst.tokens = req.tokens
	}
	if aerr != nil {
		dst.tokens, dst.keys = dst.tokens[:0], dst.keys[:0]
		return aerr
	}
	B := in.cfg.BlockSize
	dst.blockSize, dst.seed = B, req.seed
	// As in the engine, a fully cached prompt still recomputes its last
	// block: only the blocks before the last token can hit.
	n := max((len(dst.tokens)-1)/B, 0)
	dst.keys = appendBlockKeys(dst.keys[:0], req.seed, dst.tokens[:n*B], B)
	return nil
}

// CachedPromptTokens is CachedPrefix for a body parsed by ParsePrompt
// (here or at another instance of the same configuration).
func (in *Instance) CachedPromptTokens(p *Prompt) int {
	if p.blockSize != in.cfg.BlockSize { // another block size: key it here
		return in.eng.matchTokens(p.seed, p.tokens)
	}
	return in.eng.matchKeys(p.keys)
}

// Tokenize returns the prompt token ids of a request body (see doc.go for
// the rule).
func (in *Instance) Tokenize(body []byte, endpoint string) ([]uint32, error) {
	ep, err := parseEndpoint(endpoint)
	if err != nil {
		return nil, err
	}
	p := in.parsers.Get()
	req, aerr := in.dec.decode(p, body, ep, nil)
	in.parsers.Put(p)
	if aerr != nil {
		return nil, aerr
	}
	return req.tokens, nil
}

// matchReply is the body of a POST /sim/match reply.
type matchReply struct {
	CachedTokens       int     `json:"cached_tokens"`
	PromptTokens       int     `json:"prompt_tokens"`
	NumRequestsRunning int     `json:"num_requests_running"`
	NumRequestsWaiting int     `json:"num_requests_waiting"`
	KVCacheUsagePerc   float64 `json:"kv_cache_usage_perc"`
}

// handleMatch serves POST /sim/match?endpoint=/v1/chat/completions with a
// generation request body: CachedPrefix plus Load over HTTP.
func (in *Instance) handleMatch(w http.ResponseWriter, r *http.Request) {
	body, aerr := readBody(w, r, in.cfg.MaxBodyBytes)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	cached, prompt, err := in.CachedPrefix(body.Bytes(), r.URL.Query().Get("endpoint"))
	putBody(body)
	if err != nil {
		if ae, ok := err.(*apiError); ok {
			writeError(w, ae)
		} else {
			writeError(w, badRequest("endpoint", "%v", err))
		}
		return
	}
	l := in.Load()
	writeJSON(w, http.StatusOK, matchReply{
		CachedTokens: cached, PromptTokens: prompt,
		NumRequestsRunning: l.Running, NumRequestsWaiting: l.Waiting, KVCacheUsagePerc: l.KVCacheUsage,
	})
}
