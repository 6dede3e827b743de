package router

import (
	"encoding/binary"
	"errors"
	"io"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/kvmesh/kvmesh/tree"
)

// reqState is one request's scratch space: the rendering, its chain and
// lookup, candidates, scores and buffers. It is pooled, so a steady stream
// of requests reuses the same memory.
type reqState struct {
	prompt Prompt
	chain  tree.Chain
	res    tree.Result // the lookup that routes (claims past a backend's cache edge ignored)
	resAll tree.Result // every unexpired claim, when the belief filtered some (filtered)
	// resNear: the claims at most belief.doubt_near capacities past a
	// backend's edge (when filtered and doubt_near is on).
	resNear   tree.Result
	since     []tree.Timestamp
	sinceNear []tree.Timestamp
	// holdOK and held feed Request.HoldOK and Request.Held (hold.go).
	holdOK bool
	held   int
	// heldFor is how long the request was held (x-kvmesh-route's held_ms).
	heldFor time.Duration
	// depthEdge says this request's claims count their own depth
	// (BeliefConfig.DepthEdge, as gated by DepthEdgeMaxReuse).
	depthEdge bool
	// pinnedEdge says the cache history records what running requests
	// pinned as this request refreshes it (BeliefConfig.PinnedEdge, as
	// gated by PinnedEdgeMaxReuse).
	pinnedEdge bool
	// filtered: res ignored claims past some backend's cache edge.
	filtered bool
	// observed: this request has been counted in the router's decision
	// averages (spansNow) already, or must not be (an explanation): a retry
	// or a re-decision after a wait does not count again. (The bench's
	// shadow router counts its decisions: they are its only ones.)
	observed bool
	// precise: keyed by the engine's tokens; precise backends' claims are
	// then exact (their events end what they evict) and not doubted.
	precise bool
	// fb is what the answer to the chosen backend is compared with.
	fb answerCheck
	// confirm is the backend whose claims this attempt learned at dispatch,
	// to confirm at the answer's first byte (nil: nothing to confirm).
	confirm *backend
	req     Request
	cands   []Candidate
	backs   []*backend // parallel to cands
	scores  []float64
	scratch []float64
	tried   []int // slots already tried for this request
	// endBuf holds the keys a failed attempt's retraction ends (retract.go).
	endBuf []tree.Key
	// learnBuf holds the learn positions of a decision that learns part
	// of the prompt's (Decision.LearnAbove; see learnAbove).
	learnBuf []int32
	// orderKeys and orderSegs feed a backend's eviction order
	// (evictorder_route.go); orderPinned is the depth this attempt pinned,
	// orderWant the depth it pins at its first byte on orderB.
	orderKeys   []tree.Key
	orderLook   []tree.Key   // orderDiscount's scratch: the claims it asks the order of
	orderPlaces []orderPlace // and the answers
	orderSegs   []segment
	orderPinned int32
	orderWant   int32
	orderB      *backend
	orderFirst  bool // the attempt's first byte came
	body        []byte
	lease       bodyLease    // lends body to the transport (bodyreuse.go)
	key         []byte       // seed-cache key
	route       []byte       // x-kvmesh-route value
	usage       usageScanner // finds the backend's usage report in the answer
	buf         []byte       // body copy buffer
	tokens      []uint32     // token mode: the prompt's ids
	tokEnds     []int        // token mode: message ends in tokens
	seed        tree.Seed
	tenant      uint64    // the tenant's hash, for its share of the index
	pace        pacedBody // the body reader's pacing (see readClientBody)
	routed      bool      // the request has a prompt (chain and lookup are valid)
	model       string

	// The outgoing request's reusable parts (see outgoingRequest). The
	// transport may still be writing an attempt's request after RoundTrip
	// returned (an answer that came before the request was sent: Go's
	// writeLoop goes on), reading its header, URL and X-Forwarded-For: they
	// are reused only once it is done with them (ownOutgoing, putState).
	outHeader http.Header
	orcaAdded bool     // the router added the ORCA format request to outHeader
	xff       []string // outHeader's X-Forwarded-For value (cap 1)
	outURL    *url.URL
	outReq    *http.Request
	sentBare  bool                          // an attempt without a body was sent: no Close tells when its write ended
	getBody   func() (io.ReadCloser, error) // over body, made once per state
}

// copyBufSize is the body copy buffer: large enough that a non-streaming
// answer takes a few reads, small enough to pool freely.
const copyBufSize = 32 << 10

// maxPooledBodyCap: bodies larger than this are not kept in the pool.
const maxPooledBodyCap = 1 << 20

// maxPrealloc bounds the buffer reserved from a request's Content-Length
// before its bytes arrive; larger bodies grow the buffer as they come.
const maxPrealloc = 256 << 10

func newReqState() any {
	return &reqState{buf: make([]byte, copyBufSize)}
}

func (rt *Router) getState() *reqState { return rt.states.Get().(*reqState) }

func (rt *Router) putState(st *reqState) {
	if st.outgoingBusy() {
		st.leaveOutgoing() // the transport may still read them: the next request makes its own
	}
	st.sentBare = false
	st.body = st.lease.reclaim(st.body) // nil while the transport may still read it
	st.confirm = nil
	if cap(st.body) > maxPooledBodyCap {
		st.body = nil
	}
	if cap(st.prompt.Units) > maxPooledBodyCap {
		st.prompt = Prompt{}
	}
	if cap(st.chain.Keys) > maxPooledBodyCap/64 {
		st.chain = tree.Chain{}
	}
	if cap(st.tokens) > maxPooledBodyCap/4 {
		st.tokens, st.tokEnds = nil, nil
	}
	if cap(st.key) > maxSeedKey {
		st.key = nil // a long tenant header's key is not pinned by the pool
	}
	st.body, st.tried = st.body[:0], st.tried[:0]
	st.routed, st.model, st.precise, st.observed = false, "", false, false
	st.holdOK, st.held, st.heldFor = false, 0, 0
	st.req = Request{}
	clear(st.outHeader) // do not pin the last client's header values
	if st.xff != nil {
		st.xff[0] = ""
	}
	if st.outURL != nil {
		*st.outURL, *st.outReq = url.URL{}, http.Request{}
	}
	clear(st.backs) // do not pin backends through the pool
	st.cands, st.backs = st.cands[:0], st.backs[:0]
	rt.states.Put(st)
}

// readBody reads the request body once, bounded by MaxBodyBytes.
func (rt *Router) readBody(st *reqState, r *http.Request) ([]byte, *APIError) {
	limit := rt.cfg.MaxBodyBytes
	if r.ContentLength > limit {
		return nil, ErrBodyTooLarge(limit)
	}
	if r.Body == nil || r.Body == http.NoBody {
		return st.body[:0], nil
	}
	buf := st.body[:0]
	if r.ContentLength > int64(cap(buf)) {
		// +1 to see EOF without growing; a claimed length is trusted only up
		// to maxPrealloc, so a client cannot make the router reserve memory
		// for a body it never sends.
		buf = make([]byte, 0, min(r.ContentLength+1, maxPrealloc))
	}
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := r.Body.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if int64(len(buf)) > limit {
			st.body = buf[:0]
			return nil, ErrBodyTooLarge(limit)
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			st.body = buf[:0]
			var mbe *http.MaxBytesError
			if errors.As(err, &mbe) {
				return nil, ErrBodyTooLarge(limit)
			}
			if errors.Is(err, errSlowBody) {
				return nil, errBodyTooSlow
			}
			return nil, NewAPIError(http.StatusBadRequest, "", "could not read the request body: %v", err)
		}
	}
	st.body = buf
	return buf, nil
}

// prepare checks a routed request's body against the limits (see admit),
// renders it and derives its block keys.
func (rt *Router) prepare(st *reqState, ep Endpoint, body []byte, tenant string) *APIError {
	if aerr := rt.admit(ep, body); aerr != nil {
		return aerr
	}
	st.tenant = rt.share.tenantOf(tenant)
	if err := Render(ep, body, &st.prompt); err != nil {
		var ae *APIError
		if errors.As(err, &ae) {
			return ae
		}
		return NewAPIError(http.StatusBadRequest, "", "%v", err)
	}
	p := &st.prompt
	st.model = p.Model
	st.routed = true
	first := -1 // a batch's first prompt ends here, in the chain's units
	if st.precise = rt.precise != nil && rt.preciseKeys(st, ep, body, tenant); st.precise {
		// keyed by the engine's own tokens (precise.go)
	} else if rt.tokenizer != nil && rt.tokenize(st) {
		st.seed = rt.seedFor(st, p.Model, tenant, p.CacheSalt, p.Format, true)
		rt.ix.Keyer().Tokens(&st.chain, st.seed, st.tokens, st.tokEnds)
		if len(st.tokEnds) > 0 {
			first = st.tokEnds[0]
		}
	} else {
		st.seed = rt.seedFor(st, p.Model, tenant, p.CacheSalt, p.Format, false)
		rt.ix.Keyer().Bytes(&st.chain, st.seed, p.Units, p.Ends)
		if len(p.Ends) > 0 {
			first = p.Ends[0]
		}
	}
	if (ep == EndpointCompletions || ep == EndpointEmbeddings) && len(p.Ends) > 1 && first >= 0 {
		// A batch: several prompts (a completions prompt or an embeddings
		// input given as a list), each computed on its own. The chain runs
		// across them, but no engine holds the first prompt followed by
		// the next: claims are learned for the first prompt only.
		learnUpTo(&st.chain, int32(first/max(st.chain.UnitsPerBlock, 1)))
	}
	thinLearn(&st.chain, rt.cfg.MaxLearnPositions)
	return nil
}

// tokenize fills st.tokens and st.tokEnds in token mode. A prompt given as
// token ids is read as such; a rendering the tokenizer rejects falls back
// to byte mode (its keys then match only byte-mode claims) and is counted.
func (rt *Router) tokenize(st *reqState) bool {
	p := &st.prompt
	if p.Format == FormatTokens {
		st.tokens = DecodeTokenIDs(p.Units, st.tokens)
		st.tokEnds = st.tokEnds[:0]
		for _, e := range p.Ends {
			st.tokEnds = append(st.tokEnds, e/4)
		}
		return true
	}
	var err error
	st.tokens, st.tokEnds, err = rt.tokenizer.Tokenize(p.Model, p.Units, p.Ends, st.tokens, st.tokEnds)
	if err != nil {
		rt.metrics.errors[errTokenize].Inc()
		rt.log.Debug().Err(err).Str("model", p.Model).Msg("tokenizer failed; keying this prompt by bytes")
		return false
	}
	return true
}

// lookup finds, for each backend, the deepest prefix its claims hold;
// with the belief on, claims older than what the backend's cache has
// turned over since are ignored (belief.go).
func (rt *Router) lookup(st *reqState, now time.Time) {
	nowMs := now.UnixMilli()
	st.filtered, st.depthEdge, st.pinnedEdge = false, false, false
	if !rt.cfg.Belief.Enabled {
		rt.ix.Lookup(&st.chain, nowMs, &st.res)
		return
	}
	upt := rt.unitsPerToken()
	cfg := &rt.cfg.Belief
	reuse := rt.reuseShare()
	st.depthEdge = cfg.DepthEdge && (cfg.DepthEdgeMaxReuse == 0 || reuse <= cfg.DepthEdgeMaxReuse)
	st.pinnedEdge = cfg.PinnedEdge && (cfg.PinnedEdgeMaxReuse == 0 || reuse <= cfg.PinnedEdgeMaxReuse)
	st.since, st.sinceNear = st.since[:0], st.sinceNear[:0]
	nearFiltered := false
	for _, b := range rt.set.Load().listed {
		rt.adoptLesson(b)
		b.belief.refresh(nowMs, rt.meshWritten(b), st.pinnedAt(b, nowMs, upt), upt, cfg.DoubtBeyond, cfg.DoubtNear)
		for int(b.id) >= len(st.since) {
			st.since, st.sinceNear = append(st.since, 0), append(st.sinceNear, 0)
		}
		s, near := tree.Timestamp(b.belief.since.Load()), tree.Timestamp(b.belief.nearSince.Load())
		if rt.exact(st, b) {
			s, near = 0, 0
		}
		st.since[b.id], st.sinceNear[b.id] = s, near
		st.filtered = st.filtered || s != 0
		nearFiltered = nearFiltered || near != 0
	}
	rt.ix.LookupSince(&st.chain, nowMs, st.since, &st.res)
	st.resNear.Matches = st.resNear.Matches[:0]
	if st.filtered {
		rt.ix.Lookup(&st.chain, nowMs, &st.resAll)
		if cfg.DoubtNear > 0 {
			if nearFiltered {
				rt.ix.LookupSince(&st.chain, nowMs, st.sinceNear, &st.resNear)
			} else {
				st.resNear.Matches = append(st.resNear.Matches, st.resAll.Matches...) // no claim is far past any edge
			}
		}
	}
}

// pinnedAt is what b's running requests hold out of its LRU at nowMs, in
// units, when this request counts it (pinnedEdge), else 0.
func (st *reqState) pinnedAt(b *backend, nowMs int64, upt float64) float64 {
	if !st.pinnedEdge {
		return 0
	}
	return b.belief.pinnedUnits(nowMs, upt)
}

// gather fills st.cands with the backends serving model ("" = any) that are
// in rotation and not tried yet. It reports whether any backend serves the
// model at all, healthy or not.
func (rt *Router) gather(st *reqState, model string, now time.Time) bool {
	// Emptied first: a caller that finds the model gone (a retry, a
	// request that waited for a slot) must not decide on the last list.
	st.cands, st.backs = st.cands[:0], st.backs[:0]
	bs := rt.set.Load().listed
	if model != "" {
		if bs = rt.models.lookup(model); len(bs) == 0 {
			return false
		}
	}
	for _, b := range bs {
		if !b.inRotation() || st.triedSlot(b.slot) {
			continue
		}
		c := Candidate{Name: b.name, Slot: b.slot, ID: b.id, Hash: b.hash, Weight: b.weight, Load: b.loadView(now, &rt.cfg, rt.peers)}
		if rt.cfg.Belief.Enabled {
			c.Unfilled = b.belief.unfilled()
		}
		if st.routed {
			m, trusted := matchOf(&st.res, b.id)
			exact := trusted && rt.exact(st, b)
			if trusted {
				c.Matched = m.Blocks
				if rt.cfg.Belief.Enabled && !exact {
					c.Discount = 1 - b.belief.trust(m.Time.Millis(), &rt.cfg.Belief)
					if c.Lost = rt.lostAt(st, b, m.Blocks, now); c.Lost {
						// Its previous request found the context gone: doubted.
						c.Discount = max(c.Discount, 1-b.belief.doubtTrust(&rt.cfg.Belief))
					}
				} else if exact && !st.precise {
					c.Discount = rt.edgeDiscount(st, b, &c, m, now) // evictedge.go
				}
			}
			if st.filtered && rt.cfg.Belief.DoubtTrust > 0 {
				cfg := &rt.cfg.Belief
				if m, ok := matchOf(&st.resAll, b.id); ok && m.Blocks > c.Matched {
					c.doubtX = b.belief.capacities(rt.claimReach(st, b, m))
					c.Doubted, c.DoubtTrust = m.Blocks, b.belief.worthAt(c.doubtX, cfg)
				}
				// A near claim as deep as the doubted one is the same claim: its
				// blocks are priced already.
				if m, ok := matchOf(&st.resNear, b.id); ok && m.Blocks > c.Matched && m.Blocks < c.Doubted {
					c.nearX = b.belief.capacities(rt.claimReach(st, b, m))
					c.Near, c.NearTrust = m.Blocks, b.belief.worthAt(c.nearX, cfg)
				}
			}
			if trusted && (st.depthEdge || st.pinnedEdge) && !exact {
				rt.cutAtEdge(st, b, &c, m, now.UnixMilli())
			}
		}
		st.cands = append(st.cands, c)
		st.backs = append(st.backs, b)
	}
	if st.routed && st.filtered && rt.cfg.Belief.DoubtSpanCurve && rt.spansNow(st.cands, !st.observed) {
		for i := range st.cands {
			if c := &st.cands[i]; c.Doubted > c.Matched {
				rt.spanWorths(&st.chain, c)
			}
		}
	}
	st.observed = true // a retry or a re-decision after a wait is not counted again
	return true
}

func (st *reqState) triedSlot(slot int) bool {
	for _, s := range st.tried {
		if s == slot {
			return true
		}
	}
	return false
}

// decide asks the policy (or, for a request without a prompt, the
// least_loaded policy) to choose among st.cands, which must not be empty.
func (rt *Router) decide(st *reqState, ep Endpoint, now time.Time, attempt int, explain bool) Decision {
	n := len(st.cands)
	if cap(st.scores) < n {
		st.scores = make([]float64, n)
		st.scratch = make([]float64, 2*n)
	}
	scores := st.scores[:n]
	var deepest int32
	for i := range st.cands {
		deepest = max(deepest, st.cands[i].Matched)
	}
	st.req = Request{Model: st.model, Endpoint: ep, Chain: &st.chain, Seed: st.seed, Deepest: deepest,
		MeshShare: rt.meshShare(), PeerPrompts: rt.peerPromptTotals(), Reuse: rt.reuseShare(), Attempt: attempt, Explain: explain, Now: now, scratch: st.scratch[:cap(st.scratch)],
		HoldOK: st.holdOK && attempt == 0, Held: st.held}
	if !st.routed {
		// No prompt to match: the least-loaded policy chooses, under its
		// own reason so that forwarded requests stand apart in metrics.
		st.req.Chain = nil
		d := rt.forwardPolicy.Choose(&st.req, st.cands, scores)
		return Decision{Index: d.Index, Reason: ReasonForward}
	}
	st.req.Prompt = &st.prompt
	d := rt.policy.Choose(&st.req, st.cands, scores)
	if d.Index < 0 || d.Index >= n { // a policy from outside this package misbehaved
		d = Decision{Index: 0, Reason: d.Reason}
	}
	if d.Reason == 0 || d.Reason >= numReasons {
		d.Reason = ReasonPrefix
	}
	return d
}

// ---- seeds ----

// seedCache memoizes key-chain seeds by (model, tenant, cache_salt,
// format), so the common request computes no seed and builds no string.
type seedCache struct {
	mu sync.RWMutex
	m  map[string]tree.Seed
}

// maxSeeds bounds the cache; past it the cache starts over. Keys longer
// than maxSeedKey (a long tenant header, say) are not cached: the cache
// holds at most maxSeeds*maxSeedKey bytes of keys (4 MiB), whatever
// clients send.
const (
	maxSeeds   = 8192
	maxSeedKey = 512
)

// tenantKey frames the tenant header value, the body's cache_salt, the
// rendering format and the key mode (bytes or tokens) into the "tenant" part
// of a seed, so that no two different combinations give the same string:
// tree.NewSeed(model, tenantKey, "").
func tenantKey(dst []byte, tenant, salt string, f UnitFormat, tokens bool) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(tenant)))
	dst = append(dst, tenant...)
	dst = binary.AppendUvarint(dst, uint64(len(salt)))
	dst = append(dst, salt...)
	if tokens {
		f |= 0x80
	}
	return append(dst, byte(f))
}

func (rt *Router) seedFor(st *reqState, model, tenant, salt string, f UnitFormat, tokens bool) tree.Seed {
	k := binary.AppendUvarint(st.key[:0], uint64(len(model)))
	k = append(k, model...)
	mark := len(k)
	k = tenantKey(k, tenant, salt, f, tokens)
	st.key = k
	c := &rt.seeds
	c.mu.RLock()
	s, ok := c.m[string(k)]
	c.mu.RUnlock()
	if ok {
		return s
	}
	s = tree.NewSeed(model, string(k[mark:]), "")
	if len(k) > maxSeedKey {
		return s
	}
	c.mu.Lock()
	if c.m == nil || len(c.m) >= maxSeeds {
		c.m = make(map[string]tree.Seed)
	}
	c.m[string(k)] = s
	c.mu.Unlock()
	return s
}
