package router

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvmesh/kvmesh/router/kvevents"
	"github.com/kvmesh/kvmesh/tree"
)

// precise is a router's precise mode.
type precise struct {
	cfg    PreciseConfig
	slots  []bool         // by backend slot: in precise mode
	linked []bool         // by backend slot: in eviction-link mode (evictlinks.go)
	links  *evictionLinks // nil without eviction-link backends
	linkQ  chan *linkTask // answered prompts waiting for their links (linkqueue.go)
	// claimLinks: claim the linked blocks in the engines' keys too (a
	// mesh: EvictionSink).
	claimLinks atomic.Bool
	urls       []atomic.Pointer[tokenizeTarget] // by backend slot: its /tokenize, built at first use (tokenizeURL)
	fixed      *url.URL                         // TokenizerURL's /tokenize, nil without
	ratio      int32                            // engine block / index block
	sem        chan struct{}
	cache      *tokenCache // nil when CacheTokens is 0
	next       atomic.Uint64
	m          *preciseMetrics
	lm         *linkMetrics
	rtrip      http.RoundTripper
	states     sync.Pool // *preciseScratch

	seedMu sync.RWMutex
	seeds  map[string]tree.Seed

	mu         sync.Mutex
	refreshing map[uint64]struct{}
	closed     bool
	wg         sync.WaitGroup
}

// tokenizeTarget is a backend's /tokenize URL and the base URL it was
// built from.
type tokenizeTarget struct {
	base string
	u    *url.URL
}

// preciseScratch is one tokenization's buffers, pooled.
type preciseScratch struct {
	body   []byte // the /tokenize request body
	answer []byte // its answer
	hashes []uint64
	key    []byte // seed-cache key
	reader *closeReader
}

// maxSeedCache bounds the precise seed cache (model x cache_salt); past it
// the cache starts over.
const maxSeedCache = 4096

func newPrecise(cfg PreciseConfig, backends []*backend, blockTokens int, rtrip http.RoundTripper, m *preciseMetrics) (*precise, error) {
	if err := cfg.Validate(blockTokens); err != nil {
		return nil, err
	}
	pc := &precise{cfg: cfg, slots: make([]bool, len(backends)), linked: make([]bool, len(backends)), urls: make([]atomic.Pointer[tokenizeTarget], len(backends)),
		ratio: int32(cfg.EngineBlockTokens / blockTokens), sem: make(chan struct{}, cfg.MaxTokenizeInFlight),
		m: m, rtrip: rtrip, seeds: map[string]tree.Seed{}, refreshing: map[uint64]struct{}{}}
	if cfg.CacheTokens > 0 {
		pc.cache = newTokenCache(cfg.CacheTokens)
	}
	if cfg.TokenizerURL != "" {
		u, _ := url.Parse(strings.TrimRight(cfg.TokenizerURL, "/"))
		u.Path += "/tokenize"
		pc.fixed = u
	}
	for _, name := range cfg.Backends {
		i := slices.IndexFunc(backends, func(b *backend) bool { return b.name == name })
		if i < 0 {
			return nil, fmt.Errorf("precise: backend %q is not among the router's backends", name)
		}
		pc.slots[i] = true
	}
	for _, name := range cfg.EvictionBackends {
		i := slices.IndexFunc(backends, func(b *backend) bool { return b.name == name })
		if i < 0 {
			return nil, fmt.Errorf("precise: eviction backend %q is not among the router's backends", name)
		}
		pc.linked[i] = true
	}
	if len(cfg.EvictionBackends) > 0 {
		pc.links = newEvictionLinks(cfg.MaxEvictionLinks)
		pc.startLinkWorkers()
	}
	pc.states.New = func() any { return &preciseScratch{reader: &closeReader{}} }
	return pc, nil
}

// on reports whether b is in precise mode (a backend added after New,
// whose slot is past the tables, is not).
func (pc *precise) on(b *backend) bool { return b.slot < len(pc.slots) && pc.slots[b.slot] }

// linkedOn reports whether b is in eviction-link mode.
func (pc *precise) linkedOn(b *backend) bool { return b.slot < len(pc.linked) && pc.linked[b.slot] }

// close waits for the background tokenizations (each bounded by
// TokenizeTimeout, or LinkTokenizeTimeout for eviction links).
func (pc *precise) close() {
	pc.mu.Lock()
	if !pc.closed && pc.linkQ != nil {
		close(pc.linkQ) // the link workers drop what is left and end
	}
	pc.closed = true
	pc.mu.Unlock()
	pc.wg.Wait()
}

func (pc *precise) linksHeld() float64 {
	if pc == nil || pc.links == nil {
		return 0
	}
	return float64(pc.links.len())
}

// linksQueued is how many answered prompts wait for their links.
func (pc *precise) linksQueued() float64 {
	if pc == nil || pc.linkQ == nil {
		return 0
	}
	return float64(len(pc.linkQ))
}

func (pc *precise) cacheTokens() float64 {
	if pc == nil || pc.cache == nil {
		return 0
	}
	_, n := pc.cache.size()
	return float64(n)
}

// servesModel reports whether a backend in precise mode serves model.
func (pc *precise) servesModel(rt *Router, model string) bool {
	for _, b := range rt.models.lookup(model) {
		if pc.on(b) {
			return true
		}
	}
	return false
}

// target chooses where to tokenize a prompt of model: TokenizerURL, else
// the healthy precise backends serving it, in turn. nil: none is up.
func (pc *precise) target(rt *Router, model string) *url.URL {
	if pc.fixed != nil {
		return pc.fixed
	}
	bs := rt.models.lookup(model)
	n := uint64(len(bs))
	start := pc.next.Add(1)
	for i := uint64(0); i < n; i++ {
		b := bs[(start+i)%n]
		if (pc.on(b) || pc.linkedOn(b)) && b.healthy.Load() {
			return pc.tokenizeURL(b)
		}
	}
	return nil
}

// tokenizeURL returns b's /tokenize URL. A backend keeps its slot when a
// reload moves it to another URL (replaceLocked builds a new backend in the
// same slot), so the URL is checked against b's base on every call and
// built again only when that changed: no allocation per request.
func (pc *precise) tokenizeURL(b *backend) *url.URL {
	p := &pc.urls[b.slot]
	if t := p.Load(); t != nil && t.base == b.base {
		return t.u
	}
	u := b.url
	u.Path += "/tokenize"
	p.Store(&tokenizeTarget{base: b.base, u: &u})
	return &u
}

// seed returns kvevents.Seed(model, salt), memoized.
func (pc *precise) seed(sc *preciseScratch, model, salt string) tree.Seed {
	sc.key = append(append(append(sc.key[:0], model...), 0), salt...)
	pc.seedMu.RLock()
	s, ok := pc.seeds[string(sc.key)]
	pc.seedMu.RUnlock()
	if ok {
		return s
	}
	s = kvevents.Seed(model, salt)
	if len(sc.key) > maxSeedKey {
		return s
	}
	pc.seedMu.Lock()
	if len(pc.seeds) >= maxSeedCache {
		pc.seeds = map[string]tree.Seed{}
	}
	pc.seeds[string(sc.key)] = s
	pc.seedMu.Unlock()
	return s
}

func (pc *precise) scratch() *preciseScratch { return pc.states.Get().(*preciseScratch) }

func (pc *precise) release(sc *preciseScratch) {
	if sc.reader.pending.Load() {
		// The transport may still read the body (it closes it when done,
		// possibly after RoundTrip returned): leave the buffer to it.
		sc.body, sc.reader = nil, &closeReader{}
	}
	if cap(sc.body) > maxPooledBodyCap {
		sc.body = nil
	}
	if cap(sc.answer) > maxPooledBodyCap {
		sc.answer = nil
	}
	pc.states.Put(sc)
}

// preciseKeys keys a request of a precise-mode model by the engine's
// tokens: it sets st.seed and st.chain and reports true. It reports false,
// having counted why, when the request is to be keyed as in approximate
// mode (not a precise model, or the tokens could not be had in time).
func (rt *Router) preciseKeys(st *reqState, ep Endpoint, body []byte, tenant string) bool {
	pc := rt.precise
	p := &st.prompt
	if p.Model == "" || !pc.servesModel(rt, p.Model) {
		return false
	}
	if tenant != "" && p.CacheSalt == "" {
		pc.m.fallbacks[fbTenant].Inc()
		return false
	}
	sc := pc.scratch()
	defer pc.release(sc)
	var toks []uint32
	var ends []int
	prefixEnd := 0 // srcPrefix: where the rendering the tokens are of ends, in bytes
	src := srcTokenized
	if p.Format == FormatTokens {
		st.tokens = DecodeTokenIDs(p.Units, st.tokens)
		st.tokEnds = st.tokEnds[:0]
		for _, e := range p.Ends {
			st.tokEnds = append(st.tokEnds, e/4)
		}
		toks, ends, src = st.tokens, st.tokEnds, srcIDs
	} else {
		var opts uint64
		var err error
		if sc.body, opts, err = appendTokenizeBody(sc.body[:0], ep, body); err != nil || len(p.Ends) == 0 {
			pc.m.fallbacks[fbUnsupported].Inc()
			return false
		}
		last := len(p.Ends) - 1
		if pc.cache != nil {
			sc.hashes = prefixHashes(sc.hashes, p.Model, p.Format, opts, p.Units, p.Ends)
			if toks = pc.cache.get(sc.hashes[last]); toks != nil {
				src = srcCached
			} else {
				for k := last - 1; k >= 0 && toks == nil; k-- {
					if toks = pc.cache.get(sc.hashes[k]); toks != nil {
						prefixEnd = p.Ends[k]
					}
				}
				if toks != nil {
					src = srcPrefix
					pc.refresh(rt, p.Model, sc.hashes[last], sc.body)
				}
			}
		}
		if toks == nil {
			var fb int
			if st.tokens, fb = pc.tokenize(rt, p.Model, sc, st.tokens); fb >= 0 {
				pc.m.fallbacks[fb].Inc()
				rt.log.Debug().Str("model", p.Model).Str("reason", fallbackNames[fb]).Msg("precise: keying this prompt by bytes")
				return false
			}
			toks = st.tokens
			if pc.cache != nil {
				pc.cache.put(sc.hashes[last], toks)
			}
		}
	}
	pc.m.keys[src].Inc()
	st.seed = pc.seed(sc, p.Model, p.CacheSalt)
	rt.ix.Keyer().Tokens(&st.chain, st.seed, toks, ends)
	if src == srcPrefix {
		st.chain.Units += tailTokens(len(toks), prefixEnd, len(p.Units))
	}
	alignLearn(&st.chain, pc.ratio)
	return true
}

// tailTokens estimates the tokens of a prompt of total bytes beyond the
// first prefix bytes, which the engine made prefixTokens tokens of: at
// that prefix's own bytes per token. A turn keyed by its previous turn's
// tokens (srcPrefix) has keys for the prefix only, but its chain's length
// must be the whole prompt's: the policy prices what the backend computes
// (the chain's units less what it holds) and the dispatch books it as the
// backend's queued prefill. Counting the prefix alone, each such turn was
// priced and booked as if its new messages, the very part the backend
// computes, were not there, and the counts of what was written to each
// backend fell short by as much (agent workload: 894 of 1,000 requests
// were keyed from a prefix).
func tailTokens(prefixTokens, prefix, total int) int {
	if prefix <= 0 || total <= prefix || prefixTokens <= 0 {
		return 0
	}
	return int(math.Round(float64(total-prefix) * float64(prefixTokens) / float64(prefix)))
}

// exact reports whether b's claims on st's keys are exact: st was keyed by
// the engine's tokens and b is in precise mode, or st by bytes and b in
// eviction-link mode (with TrustEvictionLinks), so its events end what it
// evicts and the belief's model of its cache (belief.go) is not applied.
func (rt *Router) exact(st *reqState, b *backend) bool {
	pc := rt.precise
	if pc == nil {
		return false
	}
	if st.precise {
		return pc.on(b)
	}
	return pc.cfg.TrustEvictionLinks && pc.linkedOn(b)
}

// tokenize asks the engine for the tokens of sc.body, appending them to
// dst[:0]. fb is -1 on success, else the fallback reason.
func (pc *precise) tokenize(rt *Router, model string, sc *preciseScratch, dst []uint32) (_ []uint32, fb int) {
	select {
	case pc.sem <- struct{}{}:
	default:
		return dst, fbBusy
	}
	defer func() { <-pc.sem }()
	u := pc.target(rt, model)
	if u == nil {
		return dst, fbError
	}
	ctx, cancel := context.WithTimeout(context.Background(), pc.cfg.TokenizeTimeout)
	defer cancel()
	dst, err := pc.call(ctx, u, sc, dst)
	switch {
	case err == nil:
		return dst, -1
	case ctx.Err() != nil:
		return dst, fbTimeout
	}
	rt.log.Debug().Err(err).Str("tokenizer", u.Host).Msg("precise: tokenization failed")
	return dst, fbError
}

// refresh tokenizes a prompt in the background and caches its tokens under
// key: a conversation's turn keyed by its previous turn's tokens leaves
// its own for the next turn. At most one refresh per key runs, within
// MaxTokenizeInFlight; when none is free the next turn tries again.
func (pc *precise) refresh(rt *Router, model string, key uint64, body []byte) {
	u := pc.target(rt, model)
	if u == nil {
		return
	}
	pc.mu.Lock()
	defer pc.mu.Unlock()
	if _, busy := pc.refreshing[key]; busy || pc.closed {
		return
	}
	select {
	case pc.sem <- struct{}{}:
	default:
		return
	}
	pc.refreshing[key] = struct{}{}
	pc.wg.Add(1)
	sc := pc.scratch()
	sc.body = append(sc.body[:0], body...)
	go func() {
		defer pc.wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), pc.cfg.TokenizeTimeout)
		toks, err := pc.call(ctx, u, sc, nil)
		cancel()
		<-pc.sem
		if err == nil {
			pc.cache.put(key, toks)
		}
		pc.release(sc)
		pc.mu.Lock()
		delete(pc.refreshing, key)
		pc.mu.Unlock()
	}()
}

// tokenizeHeader is every /tokenize request's header (shared, never
// modified).
var tokenizeHeader = http.Header{"Content-Type": {"application/json"}, "Accept": {"application/json"}}

// maxAnswerBytesPerToken bounds an answer's size: an id is at most 10
// digits and a comma, and the other members are small.
const maxAnswerBytesPerToken = 12

// call POSTs sc.body to u and parses the answer's ids into dst[:0].
func (pc *precise) call(ctx context.Context, u *url.URL, sc *preciseScratch, dst []uint32) ([]uint32, error) {
	t0 := time.Now()
	defer func() { pc.m.duration.Observe(time.Since(t0).Seconds()) }()
	sc.reader.reset(sc.body)
	req := (&http.Request{Method: http.MethodPost, URL: u, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: tokenizeHeader, Body: sc.reader, ContentLength: int64(len(sc.body)), Host: u.Host}).WithContext(ctx)
	resp, err := pc.rtrip.RoundTrip(req)
	if err != nil {
		return dst[:0], err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		return dst[:0], fmt.Errorf("tokenize: %s answered %d", u.Host, resp.StatusCode)
	}
	limit := int64(pc.cfg.MaxPromptTokens)*maxAnswerBytesPerToken + 4096
	if sc.answer, err = readAllLimit(resp.Body, sc.answer[:0], limit); err != nil {
		return dst[:0], err
	}
	return parseTokenizeAnswer(sc.answer, dst, pc.cfg.MaxPromptTokens)
}

// readAllLimit reads r to its end into buf[:0], failing past limit bytes.
func readAllLimit(r io.Reader, buf []byte, limit int64) ([]byte, error) {
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if int64(len(buf)) > limit {
			return buf[:0], fmt.Errorf("tokenize: answer above %d bytes", limit)
		}
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return buf[:0], err
		}
	}
}

// closeReader is a request body that records whether the transport has
// closed it since it was handed over (pending false: the bytes are no
// longer read and may be reused).
type closeReader struct {
	bytes.Reader
	pending atomic.Bool
}

func (r *closeReader) reset(b []byte) { r.Reset(b); r.pending.Store(true) }

func (r *closeReader) Close() error { r.pending.Store(false); return nil }

// alignLearn keeps learning depths at whole engine blocks of r index
// blocks: each depth is aligned down to a multiple of r (an engine caches
// only whole blocks), duplicates and zeros dropped.
func alignLearn(ch *tree.Chain, r int32) {
	if r <= 1 {
		return
	}
	out := ch.Learn[:0]
	for _, d := range ch.Learn {
		d = d / r * r
		if d > 0 && (len(out) == 0 || d > out[len(out)-1]) {
			out = append(out, d)
		}
	}
	ch.Learn = out
}

// initPrecise registers the precise-mode metrics (always) and sets up
// precise mode when deps ask for it.
func (rt *Router) initPrecise(deps Deps) error {
	m, err := newPreciseMetrics(deps.Registerer, func() float64 { return rt.precise.cacheTokens() })
	if err != nil {
		return fmt.Errorf("router: registering metrics: %w", err)
	}
	lm, err := newLinkMetrics(deps.Registerer, func() float64 { return rt.precise.linksHeld() }, func() float64 { return rt.precise.linksQueued() })
	if err != nil {
		return fmt.Errorf("router: registering metrics: %w", err)
	}
	if deps.Precise == nil || len(deps.Precise.Backends)+len(deps.Precise.EvictionBackends) == 0 {
		return nil
	}
	rt.precise, err = newPrecise(*deps.Precise, rt.backends(), rt.ix.Keyer().BlockTokens(), rt.transport, m)
	if rt.precise != nil {
		rt.precise.lm = lm
	}
	return err
}
