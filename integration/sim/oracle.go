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

var tokPool = sync.Pool{New: func() any {
	s := make([]uint32, 0, 4096)
	return &s
}}

// CachedPrefix tokenizes a request body exactly as the engine would (endpoint
// is ChatPath or CompletionPath; "" means chat) and reports how many of its
// leading tokens the engine would serve from the cache if it scheduled the
// request now — the value it would add to vllm:prefix_cache_hits_total and
// report as cached_tokens — and the prompt length. As in the engine, only
// full blocks count and a fully cached prompt still recomputes its last
// block. Invalid bodies return the error the HTTP API would.
func (in *Instance) CachedPrefix(body []byte, endpoint string) (cachedTokens, promptTokens int, err error) {
	ep, err := parseEndpoint(endpoint)
	if err != nil {
		return 0, 0, err
	}
	tp := tokPool.Get().(*[]uint32)
	p := in.parsers.Get()
	req, aerr := in.dec.decode(p, body, ep, (*tp)[:0])
	in.parsers.Put(p)
	if aerr == nil {
		cachedTokens = in.eng.matchTokens(req.seed, req.tokens)
		promptTokens = len(req.tokens)
	}
	if toks := req.tokens; cap(toks) <= 1<<20 { // keep a grown buffer, drop a huge one
		if toks == nil {
			toks = *tp
		}
		*tp = toks[:0]
		tokPool.Put(tp)
	}
	if aerr != nil {
		return 0, 0, aerr
	}
	return cachedTokens, promptTokens, nil
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
