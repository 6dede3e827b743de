package router

import (
	"errors"
	"fmt"
	"net/url"
	"time"
)

// PreciseConfig puts backends in precise mode (docs/precise.md): their
// engines publish KV-cache events that router/kvevents turns into claims
// keyed by the engines' own tokens, so the router keys the requests of the
// models they serve the same way: the prompt is tokenized by the engine
// (POST /tokenize, its chat template applied: parity by construction) and
// chained in blocks from kvevents.Seed(model, cache_salt). When that is not
// possible in time the request is keyed by bytes as in approximate mode
// (it then matches only approximate claims) and the fallback is counted.
type PreciseConfig struct {
	// Backends names the backends in precise mode. A request for a model
	// any of them serves is keyed by tokens, for every backend of the model
	// (the others then learn token-keyed claims from routing, as before).
	Backends []string
	// EngineBlockTokens is the engines' KV block size (vLLM --block-size,
	// SGLang's page size), a multiple of the index's BlockTokens: the
	// router learns claims only at whole engine blocks, the only ones an
	// engine caches. 16 is vLLM's default.
	EngineBlockTokens int
	// TokenizerURL is the base URL of a server whose POST /tokenize
	// tokenizes exactly as the engines do (the same model and chat
	// template: any replica, or a CPU-only vLLM frontend). Empty: the
	// precise backends serving the request's model, in turn.
	TokenizerURL string
	// TokenizeTimeout bounds one remote tokenization. Past it the request
	// is keyed by bytes. 100 ms covers a 128K-token prompt in vLLM's fast
	// tokenizer (a few hundred thousand tokens per second in its API
	// process) plus the round trip; a longer wait would cost more than the
	// cache hit it could win on a short prompt.
	TokenizeTimeout time.Duration
	// MaxTokenizeInFlight bounds concurrent remote tokenizations (each
	// holds a request body and an engine's API worker); past it requests
	// are keyed by bytes at once. 64 is far above what a node sends while
	// engines answer in milliseconds, and keeps a stalled engine from
	// holding thousands of goroutines.
	MaxTokenizeInFlight int
	// CacheTokens bounds the cache of recent prompts' tokens, by which a
	// conversation's next turn is keyed without waiting for the engine
	// (4 bytes a token). 4M tokens (16 MiB) hold the last turn of a thousand
	// 4K-token conversations; 0 turns the cache off.
	CacheTokens int
	// MaxPromptTokens bounds the token ids read from one answer. 1M is
	// eight times the longest context of common models.
	MaxPromptTokens int
	// EvictionBackends names backends in eviction-link mode
	// (evictlinks.go): requests stay keyed by bytes, with no tokenization
	// on their path; after an answer the prompt is tokenized in the
	// background and each claim it left on the backend is linked to the
	// engine block holding its end, and the engine's KV events end the
	// linked claims when that block is evicted. Disjoint from Backends.
	EvictionBackends []string
	// TrustEvictionLinks makes the claims on eviction-link backends exact,
	// as precise backends' are: the belief's model of the backend's cache
	// (belief.go) is not applied to them, their events saying what it
	// evicted. Default true: otherwise the model would guess what the
	// events know.
	TrustEvictionLinks bool
	// EvictionLag is how late an eviction-link engine's KV events say
	// what it evicted: it evicts while it schedules a step and publishes
	// after the step has run, so about one step, at its longest a long
	// chunk of prefill (250 ms: 8,192 tokens of prefill on a mid-size
	// model). Set, the router doubts the claims that its engine's
	// evictions so far say will be gone before the request reaches the
	// engine's scheduler (evictedge.go: the retention the events measure,
	// the prefill queued ahead); it is also the width of the band over
	// which that doubt rises from none to whole.
	//
	// 0 (off): on the customers benchmark it cut the TTFT p99 by about 9%
	// and the hit rate by 1-1.5 points (evictedge.go has the figures).
	EvictionLag time.Duration
	// EvictionOrder makes the eviction edge count in the engine's LRU
	// order rather than in time: the router keeps the claims it left on
	// an eviction-link backend in the order the engine will evict them
	// (evictorder.go) and doubts those with less queued ahead of them than
	// the prefill booked ahead of the request. It replaces EvictionLag's
	// retention when set.
	//
	// Default true. Against the same build without it (kvmesh+evict, time
	// scale 10, runs alternating, medians): customers, 3 pairs, TTFT p99
	// 1.125 against 1.265 s at a level hit rate (50.50 against 50.44%);
	// Mooncake 2x, 3 pairs, hit rate 14.87 against 14.58% (ahead in 3 of
	// 3), p50 0.437 against 0.445 s; agent and Mooncake 3x level
	// (docs/bench/HISTORY.md, "The eviction order on by default"). It
	// applies to a router without peers only (orderKept).
	EvictionOrder bool
	// EvictionOrderSlack is how far apart in time two answers' ends must
	// be for the eviction order to take the router's order of them for the
	// engine's: requests that finish in the same engine step are released
	// in an order the router does not see (their streams end within
	// milliseconds of each other, in any order). An eviction then trims
	// from the order only what was released more than this before the
	// evicted release; the rest goes when the events end it. 200 ms: a few
	// decode steps, about one long prefill step. Logged on the benchmarks
	// (time scale 10, so 20 ms there), the exact trim removed segments
	// that the events evicted later (88% of those trimmed on customers, 51%
	// on agent, median 1 ms released before the evicted one) and cost agent
	// two points of hit rate.
	EvictionOrderSlack time.Duration
	// LinkTokenizeTimeout bounds the background tokenization of an answered
	// prompt for its links. It is off the request path, and a link may come
	// late (the engine evicts a prompt's blocks no sooner than the next
	// requests need the room), so it waits longer than a request would: 2 s.
	// A prompt not linked in time keeps claims nothing ends but their TTL,
	// trusted as the others are (kvmesh_router_eviction_link_prompts_total
	// counts them as failed).
	LinkTokenizeTimeout time.Duration
	// MaxEvictionLinks bounds the links held (about 40 bytes each); past
	// it the oldest go, and their claims live out their TTL as in
	// approximate mode. 256K is one link per engine block for 8 engines
	// of 32K blocks, and links sit only at message ends.
	MaxEvictionLinks int
	// LinkWorkers is how many goroutines run the background tokenizations
	// of answered prompts for their links (linkqueue.go), each one at a
	// time; LinkQueue is how many answered prompts may wait for one (each
	// holding its /tokenize body, about the size of its prompt); past it
	// a prompt is not linked (kvmesh_router_eviction_link_prompts_total
	// counts it busy). A worker also takes a place among
	// MaxTokenizeInFlight.
	//
	// 2 and 256: the work is off the request path but on the router's
	// cores, and a goroutine per answered prompt ran up to
	// MaxTokenizeInFlight of them beside a burst of requests. Against
	// that (kvmesh+evict, 8 backends, time scale 10, runs alternating;
	// medians, pairs won): Mooncake 3x, 4 pairs: TTFT p50 0.894 against
	// 0.908 s (faster in 3, 1 level), the time outside the engines 0.039
	// against 0.048 s (4 of 4), p99 5.94 against 6.06 s (3 of 4),
	// precision 99.18% against 99.02%, hit rate level; customers, 3 pairs:
	// p99 1.288 against 1.313 s (3 of 3), p50 level, hit rate 50.37%
	// against 50.52% (ahead in 1). One worker: Mooncake 3x p50 0.895
	// against 0.911 s (6 pairs, faster in 5) but customers behind in 3 of
	// 3 on hit rate (50.28% against 50.65%) and p50 (0.376 against
	// 0.366 s). Two goroutines without a queue dropped a burst's links
	// (precision 95.6-97.7%).
	LinkWorkers int
	LinkQueue   int
}

// DefaultPreciseConfig returns the defaults documented on PreciseConfig,
// without backends.
func DefaultPreciseConfig() PreciseConfig {
	return PreciseConfig{
		EngineBlockTokens:   16,
		TokenizeTimeout:     100 * time.Millisecond,
		MaxTokenizeInFlight: 64,
		CacheTokens:         4 << 20,
		MaxPromptTokens:     1 << 20,
		TrustEvictionLinks:  true,
		EvictionOrder:       true,
		EvictionOrderSlack:  200 * time.Millisecond,
		LinkTokenizeTimeout: 2 * time.Second,
		MaxEvictionLinks:    1 << 18,
		LinkWorkers:         2,
		LinkQueue:           256,
	}
}

// Validate reports every setting that cannot work; blockTokens is the
// index's block size.
func (c *PreciseConfig) Validate(blockTokens int) error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf("precise: "+format, args...)) }
	if c.EngineBlockTokens <= 0 || blockTokens <= 0 || c.EngineBlockTokens%blockTokens != 0 {
		bad("engine_block_tokens must be a positive multiple of the index's block_tokens (%d), got %d", blockTokens, c.EngineBlockTokens)
	}
	if c.TokenizerURL != "" {
		if u, err := url.Parse(c.TokenizerURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			bad("tokenizer_url %q must be an http(s) base URL", c.TokenizerURL)
		}
	}
	if c.TokenizeTimeout <= 0 {
		bad("tokenize_timeout must be positive, got %v", c.TokenizeTimeout)
	}
	if c.MaxTokenizeInFlight < 1 {
		bad("max_tokenize_in_flight must be at least 1, got %d", c.MaxTokenizeInFlight)
	}
	if c.CacheTokens < 0 {
		bad("tokenize_cache_tokens must not be negative, got %d", c.CacheTokens)
	}
	if c.MaxPromptTokens < 1 {
		bad("max_prompt_tokens must be at least 1, got %d", c.MaxPromptTokens)
	}
	seen := map[string]bool{}
	for i, b := range c.Backends {
		if b == "" || seen[b] {
			bad("backends[%d] %q: empty or listed twice", i, b)
		}
		seen[b] = true
	}
	for i, b := range c.EvictionBackends {
		if b == "" || seen[b] {
			bad("eviction_backends[%d] %q: empty, listed twice or also a precise backend", i, b)
		}
		seen[b] = true
	}
	if len(c.EvictionBackends) > 0 && c.MaxEvictionLinks < 1 {
		bad("max_eviction_links must be at least 1, got %d", c.MaxEvictionLinks)
	}
	if c.EvictionLag < 0 {
		bad("eviction_lag must not be negative, got %v", c.EvictionLag)
	}
	if c.EvictionOrderSlack < 0 {
		bad("eviction_order_slack must not be negative, got %v", c.EvictionOrderSlack)
	}
	if len(c.EvictionBackends) > 0 && c.LinkTokenizeTimeout <= 0 {
		bad("link_tokenize_timeout must be positive, got %v", c.LinkTokenizeTimeout)
	}
	if len(c.EvictionBackends) > 0 && (c.LinkWorkers < 1 || c.LinkWorkers > c.MaxTokenizeInFlight) {
		bad("link_workers must be in [1, max_tokenize_in_flight (%d)], got %d", c.MaxTokenizeInFlight, c.LinkWorkers)
	}
	if len(c.EvictionBackends) > 0 && (c.LinkQueue < 1 || c.LinkQueue > 1<<16) {
		bad("link_queue must be in [1, 65536], got %d", c.LinkQueue)
	}
	return errors.Join(errs...)
}
