package router

import (
	"math"
	"slices"

	"github.com/kvmesh/kvmesh/tree"
)

// How the request path uses the belief (belief.go): the lookup (route.go),
// the discount on matches near a cache's edge (gather), and, here, what an
// answer teaches.

// answerCheck is what the answer from the chosen backend is compared with:
// the deepest believed match there (trusted) and the deepest unexpired
// claim, believed or not (all), with how much the mesh had written to the
// backend since each was stamped, as of the dispatch.
type answerCheck struct {
	ok                 bool
	trusted, all       int32 // blocks
	distTrust, distAll float64
	// near is the deepest claim near the edge (BeliefConfig.DoubtNear),
	// deeper than trusted (0: none), distNear what was written since it.
	near     int32
	distNear float64
	// booked is what the dispatch counted as written to the backend (the
	// prompt less the units expected cached).
	booked float64
}

// uncached is the prefill a dispatch to c books: the prompt less the units
// it is expected to hold.
func (st *reqState) uncached(c *Candidate) int {
	return st.chain.Units - int(c.SavedUnits(&st.chain))
}

// matchOf finds backend id's match in res.
func matchOf(res *tree.Result, id tree.BackendID) (tree.Match, bool) {
	for _, m := range res.Matches {
		if m.Backend == id {
			return m, true
		}
	}
	return tree.Match{}, false
}

// claimReach is how far into b's cache a claim m of the request's chain
// reaches: reachAt at its stamp and depth.
func (rt *Router) claimReach(st *reqState, b *backend, m tree.Match) float64 {
	return st.reachAt(b, m.Time.Millis(), m.Blocks)
}

// reachAt is how far into b's cache a claim of blocks blocks stamped at ms
// reaches: the units written to b after it was stamped, plus with
// BeliefConfig.PinnedEdge what b's running requests held out of its LRU
// then, less the claim's own units (a prefix's own blocks, pinned by the
// request that stamped it or by others reading it, are not ahead of it in
// the eviction order), plus with BeliefConfig.DepthEdge its own units (it
// is evicted from its tail: its blocks take room in the cache too).
func (st *reqState) reachAt(b *backend, ms int64, blocks int32) float64 {
	if !st.pinnedEdge {
		return b.belief.distance(ms) + st.ownUnits(blocks)
	}
	written, pinned := b.belief.writtenSince(ms)
	return written + max(pinned-st.claimUnits(blocks), 0) + st.ownUnits(blocks)
}

// claimUnits is a claim of blocks blocks in the request's prompt units.
func (st *reqState) claimUnits(blocks int32) float64 {
	return float64(min(st.chain.UnitsAt(int(blocks)), st.chain.Units))
}

// cutAtEdge checks c's trusted match m claim by claim: the lookup's bound
// is one stamp per backend, and with BeliefConfig.PinnedEdge (a claim's
// distance counts what was pinned when it was stamped, which rises and
// falls) or DepthEdge (its own units) a claim after the bound can be past
// the edge (DoubtBeyond capacities) by its own reach. When it is, the
// cache has evicted the prefix from its tail: with DepthEdge down to the
// depth that still fits (what was written after the claim taken from the
// edge), with PinnedEdge alone the whole claim; a shallower claim stamped
// since may still fit (freshHead). The trusted match becomes that depth;
// the blocks beyond it, up to m, are priced as a near-edge doubted claim
// at the worth of the claim's reach (unless a deeper near claim prices
// them already, at its own).
func (rt *Router) cutAtEdge(st *reqState, b *backend, c *Candidate, m tree.Match, nowMs int64) {
	cfg := &rt.cfg.Belief
	kappa := math.Float64frombits(b.belief.kappa.Load())
	if !(kappa > 0) || cfg.DoubtBeyond == 0 || st.chain.UnitsPerBlock <= 0 {
		return
	}
	edge := cfg.DoubtBeyond * kappa
	reach := rt.claimReach(st, b, m)
	if reach <= edge {
		return
	}
	written := reach - st.ownUnits(m.Blocks) // what lies ahead of it in the eviction order
	var fit int32
	if st.depthEdge {
		fit = int32(max(edge-written, 0) / float64(st.chain.UnitsPerBlock))
	}
	if fit >= m.Blocks {
		return
	}
	c.Matched, c.cutReach = rt.freshHead(st, b, fit, written+st.ownUnits(fit), m.Blocks, edge, nowMs)
	if c.Near <= m.Blocks {
		c.nearX = reach / kappa
		c.Near, c.NearTrust = m.Blocks, b.belief.worthAt(c.nearX, cfg)
	}
}

// ownUnits is what a claim of blocks blocks adds to its reach: its units
// with BeliefConfig.DepthEdge (its blocks take room in the cache too),
// else nothing.
func (st *reqState) ownUnits(blocks int32) float64 {
	if !st.depthEdge {
		return 0
	}
	return st.claimUnits(blocks)
}

// freshHead finds how deep b still holds the prompt when its deepest
// claim (hi blocks, of which lo fit inside edge by that claim's stamp) has
// passed the edge, and what that depth's reach is. The deepest claim's
// stamp speaks only for the deepest prefix: a shallower one, such as a
// tenant's shared context, may have been used since by other prompts and
// be held whole. A claim at a shallower depth is never older than one
// below it (a prompt's claims are learned together), and its units are
// fewer, so whether a learn depth's claim fits (what was written to b after
// it was stamped, plus its units) is monotone: a binary search over the
// learn depths between lo and hi finds the deepest that does, one probe per
// step. The blocks past it, up to the first depth that does not fit, were
// stamped with that one, and as many of them are held as fit by its stamp.
// It returns lo and loReach when no shallower claim holds more. With
// BeliefConfig.PinnedEdge a distance also counts what was pinned at the
// stamp, which rises and falls, so the search finds a depth that fits,
// not always the deepest.
func (rt *Router) freshHead(st *reqState, b *backend, lo int32, loReach float64, hi int32, edge float64, nowMs int64) (int32, float64) {
	learn := st.chain.Learn
	reachAt := func(d int32) (float64, bool) {
		ts, ok := rt.ix.ClaimTime(&st.chain, d, b.id, nowMs)
		if !ok {
			return 0, false
		}
		return st.reachAt(b, ts.Millis(), d), true
	}
	upb := float64(st.chain.UnitsPerBlock)
	depth, reach := lo, loReach
	i, _ := slices.BinarySearch(learn, lo+1) // first learn depth > lo
	j, _ := slices.BinarySearch(learn, hi)   // first learn depth >= hi
	end := j
	for i < j { // depths below learn[i] fit (or are <= lo); learn[j] and deeper do not
		k := int(uint(i+j) >> 1)
		if r, ok := reachAt(learn[k]); ok && r <= edge {
			depth, reach, i = learn[k], r, k+1
		} else {
			j = k
		}
	}
	if st.depthEdge && j < end && learn[j] > depth+1 {
		// The first depth that does not fit: part of the blocks between
		// depth and it may, by its own stamp.
		if r, ok := reachAt(learn[j]); ok {
			written := r - st.ownUnits(learn[j])
			if part := int32(max(edge-written, 0) / upb); part > depth {
				depth, reach = part, written+st.ownUnits(part)
			}
		}
	}
	return depth, reach
}

// noteBelief records, at dispatch, what the answer from b will be checked
// against.
func (rt *Router) noteBelief(st *reqState, b *backend, c *Candidate) {
	st.fb = answerCheck{}
	if !rt.cfg.Belief.Enabled || !st.routed {
		return
	}
	st.fb.ok = true
	st.fb.booked = float64(st.uncached(c))
	if m, ok := matchOf(&st.res, b.id); ok {
		reach := rt.claimReach(st, b, m)
		st.fb.trusted, st.fb.distTrust = m.Blocks, reach
		if c.Matched < m.Blocks { // cut at the edge (cutAtEdge)
			// The trusted part reaches the edge; the rest is priced as a
			// near claim at the whole claim's reach.
			st.fb.trusted, st.fb.distTrust = c.Matched, c.cutReach
			if c.Near == m.Blocks {
				st.fb.near, st.fb.distNear = m.Blocks, reach
			}
		}
	}
	st.fb.all, st.fb.distAll = st.fb.trusted, st.fb.distTrust
	if st.fb.near > 0 {
		st.fb.all, st.fb.distAll = st.fb.near, st.fb.distNear
	}
	if st.filtered {
		if m, ok := matchOf(&st.resAll, b.id); ok && m.Blocks > st.fb.all {
			st.fb.all, st.fb.distAll = m.Blocks, rt.claimReach(st, b, m)
		}
		if m, ok := matchOf(&st.resNear, b.id); ok && m.Blocks > max(st.fb.trusted, st.fb.near) {
			st.fb.near, st.fb.distNear = m.Blocks, rt.claimReach(st, b, m)
		}
	}
}

// unitsPerTokenEWMA weighs one answer's units-per-token in the estimate.
const unitsPerTokenEWMA = 1.0 / 32

// unitsPerTokenBand bounds one answer's units-per-token sample to
// [estimate/band, estimate*band] before it enters the estimate. The sample
// is the backend's word (its prompt_tokens): a buggy or hostile backend
// answering prompt_tokens 1 for a 100 KB prompt would otherwise move the
// router-wide estimate from ~4 to ~3,000 in one answer, and with it every
// backend's capacity in units (the belief would trust every claim until
// a few hundred answers wore it off). Real prompts' samples stay inside
// the band: bytes per token are a few whatever the text, a token-mode
// prompt is at about 1, and a precise-mode prompt (keyed by the engine's
// tokens) is at 1, inside the band of a byte-mode estimate up to 4. The band
// bounds only what enters the estimate: the answer's own checks use the
// prompt's own ratio. A wrong configured units_per_token is still
// corrected, each sample counting for at most this factor.
const unitsPerTokenBand = 4

// uptSample is one answer's units-per-token as it may enter the estimate
// at old: upt clamped to old's band (unitsPerTokenBand).
func uptSample(upt, old float64) float64 {
	if !(old > 0) || math.IsInf(old, 0) {
		return upt
	}
	return min(max(upt, old/unitsPerTokenBand), old*unitsPerTokenBand)
}

// unitsPerToken is the estimated prompt units per token (bytes per token
// in byte mode).
func (rt *Router) unitsPerToken() float64 { return math.Float64frombits(rt.upt.Load()) }

// learnFromAnswer compares what b reported cached (tokens) with what the
// router believed it held: it counts the prefix route as confirmed or
// not (the routing precision), and moves b's capacity estimate: a believed
// match that was gone says the cache keeps less; a doubted (or ignored)
// deeper claim that was still there says it keeps more.
func (rt *Router) learnFromAnswer(b *backend, st *reqState, d Decision, prompt, cached int64) {
	rt.observeReuse(plausibleUsage(prompt, cached, st.chain.Units, rt.unitsPerToken()))
	fb := st.fb
	// An answer reporting more cached tokens than its prompt had (or no
	// prompt) is not a usage report the router can reason with: it
	// teaches nothing (observeReuse counts it, clamped).
	if !fb.ok || prompt <= 0 || cached > prompt || st.chain.Units <= 0 {
		return
	}
	cfg := &rt.cfg.Belief
	// This prompt's own units per token: its cached tokens are converted
	// with it (a precise-mode prompt is keyed by the engine's tokens, 1).
	// The router-wide estimate takes it only within its band.
	upt := float64(st.chain.Units) / float64(prompt)
	old := rt.unitsPerToken()
	rt.upt.Store(math.Float64bits(old + (uptSample(upt, old)-old)*unitsPerTokenEWMA))
	// The dispatch booked what it expected the backend to write; the answer
	// says what it did. A backend that computed more (a match it no longer
	// held) wrote more: the count of what was written to it, which ages its
	// claims, takes the difference. (Never less: the count only grows.)
	if written := float64(st.chain.Units) - float64(cached)*upt; written > fb.booked {
		b.written.Add(int64(written - fb.booked))
	}
	tokens := func(blocks int32) float64 { return float64(min(st.chain.UnitsAt(int(blocks)), st.chain.Units)) / upt }
	held := func(blocks int32) bool { return float64(cached) >= cfg.ConfirmShare*tokens(blocks) }
	nowMs := rt.now().UnixMilli()
	if fb.trusted > 0 && !held(fb.trusted) && cfg.LostTTL > 0 && d.Learn && !b.gone.Load() {
		// Where the conversation's next request will match: a claim this
		// request learned, deeper than the match it found gone (not inside
		// a head other conversations share).
		if k, depth, ok := leafKey(&st.chain); ok && depth > fb.trusted {
			rt.markLost(k, b.id, nowMs)
		}
	}
	if fb.trusted > 0 && d.Reason == ReasonPrefix && !d.OwnMatch {
		if held(fb.trusted) {
			b.belief.confirmed.Add(1)
			b.prefixRoutes[1].Inc()
		} else {
			b.belief.refuted.Add(1)
			b.prefixRoutes[0].Inc()
		}
	}
	if fb.all > fb.trusted && d.Reason == ReasonDoubt {
		if held(fb.all) {
			b.prefixRoutes[3].Inc()
		} else {
			b.prefixRoutes[2].Inc()
		}
	}
	// Learn on top of the mesh's newest lesson, not on what this node
	// knew when it last routed.
	rt.adoptLesson(b)
	// What it learns is a lesson stamped now, or unstamped while this node
	// has not heard the mesh's lessons (LessonGate).
	stampMs := rt.lessonStamp(nowMs)
	learned := false
	// A doubted claim beyond the trusted match: how much of what only it
	// covers was there? (The share, not whether most of it was: a cache
	// evicts a prefix block by block from its tail, and on the Mooncake
	// trace 43% of doubted claims still held part of their blocks while
	// 7% held most; what they were worth was 16% of their blocks.)
	// With belief.doubt_near, the near claim's blocks and those only the
	// far claim covers each teach the worth of their distance's range
	// (belief.doubt_curve).
	//
	// Where the trusted match is a checkpoint, the share is counted from
	// the prompt's next learn depth (doubtFloor).
	if fb.all > fb.trusted && cfg.DoubtLearn {
		lo := tokens(doubtFloor(&st.chain, fb.trusted, rt.ix.Keyer().CheckpointBlocks()))
		// teach learns from the doubted tokens lo..hi of a claim dist
		// written ago: the backend's worth by distance, and the span curve
		// (belief.doubt_span_curve).
		teach := func(hi, dist float64) {
			share, x := doubtShare(float64(cached), lo, hi), b.belief.capacities(dist)
			b.belief.learnDoubt(share, x, cfg, stampMs)
			rt.spans.learn(doubtRange(x, cfg), hi-lo, share)
			lo, learned = hi, true
		}
		if hi := tokens(fb.near); fb.near > fb.trusted && hi > lo {
			teach(hi, fb.distNear)
		}
		if hi := tokens(fb.all); fb.all > max(fb.trusted, fb.near) && hi > lo {
			teach(hi, fb.distAll)
		}
	}
	// The capacity learns only from a match held whole: a prompt whose
	// shared head survived (refreshed by other prompts) while its own tail
	// was evicted says nothing about how long the tail's claim was kept.
	whole := func(blocks int32) bool { return float64(cached) >= wholeShare*tokens(blocks) }
	switch {
	case fb.all > fb.trusted && whole(fb.all):
		learned = b.belief.learn(fb.distAll, true, old, cfg, stampMs) || learned // kept more than believed
	case fb.trusted > 0 && !whole(fb.trusted):
		learned = b.belief.learn(fb.distTrust, false, old, cfg, stampMs) || learned // kept less
	case fb.trusted > 0:
		learned = b.belief.learn(fb.distTrust, true, old, cfg, stampMs) || learned
	}
	if learned {
		rt.metrics.lessons[0].Inc()
	}
}

// doubtFloor is the depth (blocks) from which an answer's cached tokens
// count for a doubted claim deeper than the trusted match: the match
// itself, unless it is a checkpoint (a multiple of cp blocks), then the
// prompt's next learn depth. A checkpoint match may end inside a head
// that goes on (a long shared prompt with no message end there): the
// engine holds the rest of that head wherever it holds the match, the
// doubted claim's backend included, and no claim tells: claims sit only
// at learn depths. A message end is where prompts part, and what lies
// after it is the conversation's own.
//
// Counted from a checkpoint match, on the Mooncake trace at 2x (single
// messages, so every match is a checkpoint; one run in which every
// backend was asked what it held as each request was sent), the answers
// on doubted claims held 0.061 of the span from the match on average and
// nothing beyond the next learn depth, no more than the other backends
// held, yet that taught the doubted claims a worth of 0.04-0.16, and
// the worth drew 11% of the requests to their holders, mostly with more
// prefill queued than elsewhere.
func doubtFloor(ch *tree.Chain, trusted int32, cp int) int32 {
	if trusted > 0 && cp > 0 && trusted%int32(cp) == 0 {
		return ch.NextLearn(trusted)
	}
	return trusted
}

// wholeShare is the share of a match's tokens an answer must report cached
// for the match to count as held whole (the rest: the per-token estimate's
// error at the match's edge).
const wholeShare = 0.9

// doubtShare is the share of the tokens between a trusted match (lo) and
// a doubted claim's depth (hi) that an answer reporting cached tokens had:
// 0 at or below lo, 1 at or above hi (0 if hi <= lo, which the caller
// does not ask). Unlike the capacity's "held whole" (wholeShare), it has
// no tolerance at the edge: the per-token estimate and the engine's
// rounding down to its block make a fully held claim of a few blocks
// report a little less than 1.
func doubtShare(cached, lo, hi float64) float64 {
	if hi <= lo || cached <= lo {
		return 0
	}
	return min((cached-lo)/(hi-lo), 1)
}

// spanWorths prices c's doubted parts on the worth by distance and length
// (BeliefConfig.DoubtSpanCurve): the near claim's blocks beyond the
// trusted match, and the far claim's beyond those, each at its cell's
// worth once an answer has taught it (else the worth by distance stays).
func (rt *Router) spanWorths(ch *tree.Chain, c *Candidate) {
	upt := rt.unitsPerToken()
	if !(upt > 0) {
		return
	}
	cfg := &rt.cfg.Belief
	from := c.MatchedUnits(ch)
	if c.Near > c.Matched {
		near := min(ch.UnitsAt(int(c.Near)), ch.Units)
		if w, ok := rt.spans.worth(doubtRange(c.nearX, cfg), float64(near-from)/upt); ok {
			c.NearTrust = w
		}
		from = near
	}
	if w, ok := rt.spans.worth(doubtRange(c.doubtX, cfg), float64(c.ClaimedUnits(ch)-from)/upt); ok {
		c.DoubtTrust = w
	}
}

// idleEWMA is one decision's weight in the share of decisions that had an
// idle candidate (BeliefConfig.DoubtSpanMinIdle): the last ~64.
const idleEWMA = 1.0 / 64

// spansNow takes in (with observe: a request's first decision, not an
// explanation's) whether one of cands has nothing queued (no prefill
// booked by the mesh, no request of others waiting) and reports whether
// the span curve prices doubted claims now: always, or while the share of
// recent decisions with such a candidate is at least
// BeliefConfig.DoubtSpanMinIdle.
func (rt *Router) spansNow(cands []Candidate, observe bool) bool {
	cur := math.Float64frombits(rt.idle.Load())
	if !observe {
		return cur >= rt.cfg.Belief.DoubtSpanMinIdle
	}
	idle := 0.0
	for i := range cands {
		l := &cands[i].Load
		if l.PendingPrefill+l.PeerPendingPrefill <= 0 && l.Waiting-l.OwnAtSignal <= 0 {
			idle = 1
			break
		}
	}
	share := cur + idleEWMA*(idle-cur)
	rt.idle.Store(math.Float64bits(share)) // a lost update is one decision fewer in the average
	return share >= rt.cfg.Belief.DoubtSpanMinIdle
}
