package router

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// BeliefConfig is how far the router believes its claims: whether a
// backend still holds a prefix it was sent.
//
// A claim says a prefix was sent to a backend; it does not say the backend
// kept it. An engine's prefix cache is an LRU over its KV blocks: a prefix
// survives while less than the cache's capacity has been written after it.
// The router counts what the mesh writes to each backend (every node's
// uncached prompt units, shared over the mesh's load channel) and keeps, per
// backend, a short history of that count (cacheBelief): a claim whose
// prefix has had more than the capacity written after it is ignored, and
// one near that edge counts for less. The capacity comes from the
// backend's configuration, or its metrics (vLLM's cache_config_info,
// SGLang's max_total_num_tokens), and is corrected by the backends' own
// answers: each reports how many prompt tokens it had cached, which either
// confirms a match or shows that the cache kept less (or more) than
// believed.
type BeliefConfig struct {
	// Enabled turns the model on. Off, every unexpired claim is believed,
	// however much was written to its backend since.
	Enabled bool `yaml:"enabled"`
	// EdgeStart and EdgeTrust: a claim whose prefix has had more than
	// EdgeStart times the capacity written after it counts its match at
	// less than full value, falling linearly to EdgeTrust at the capacity.
	// 0.7 and 1 (no discount). What prefix routes found cached falls
	// smoothly with the distance (Mooncake 3x, one run: most of the match
	// held in 97% of routes below 0.2 capacities, 73% at 0.4-0.5, 35% at
	// 0.9-1), yet pricing that (0.2 and 0.35, with DoubtCurve) lowered the
	// hit rate in 4 of 4 runs beside the default (13.5-14.6% against
	// 14.0-14.7%) and lost agent runs (78% against 84%): the discount falls
	// on the whole match, a shared head the backend keeps too, and moves
	// conversations off holders that still have most of them. Pricing the
	// head (the deepest claim within 0.2 capacities) in full and only the
	// tail at a worth learned per distance did no better: Mooncake 3x hit
	// rate ahead in 1 of 6 runs, customers behind in 3 of 3
	// (docs/claims.md; commits 2a93328, b14aa0f). Before
	// that, on the Mooncake trace at 3x (caches a tenth
	// of the working set, 2 runs each) a discount to 0.5 moved hit rate
	// 14.2% -> 14.1% and TTFT p50 1.02 -> 1.12 s: retention is noisy (an
	// engine keeps running requests' blocks out of its LRU, prefixes are
	// evicted block by block), and the holder of a doubted prefix still
	// beats a backend that holds none (measured before claims past the edge
	// were doubted, below, with a capacity learned from partial answers too).
	EdgeStart float64 `yaml:"edge_start"`
	EdgeTrust float64 `yaml:"edge_trust"`
	// DoubtBeyond and DoubtTrust: a claim with more than DoubtBeyond
	// capacities written after it is doubted: the lookup looks past it for
	// the backend's deepest claim within the edge (the trusted match, which
	// a "prefix" route needs), and the blocks only the doubted claim covers
	// count DoubtTrust of their value (the starting worth when DoubtLearn
	// is on). DoubtBeyond 0: no claim is doubted (else at least 0.5);
	// DoubtTrust 0: doubted claims are ignored.
	//
	// 1 and 0.5, from the bench (customers, 1 run each; hit rate, routing
	// precision, TTFT p99): every claim trusted 50.8%, 71.8%, 2.08 s;
	// claims past the edge ignored 46.2%, 94.0%, 1.10 s (both measured
	// while a claim's timestamp lagged its last use by a whole request,
	// see tree.Index.Learn: a fifth of the doubted claims were being
	// written back by a request in flight). At 0.5 a doubted holder still
	// beats a backend with no claim, while a trusted holder of a shorter
	// prefix, or a much less busy one, can win; a route made on a doubted
	// claim is reported as "doubt", not "prefix".
	DoubtBeyond float64 `yaml:"doubt_beyond"`
	DoubtTrust  float64 `yaml:"doubt_trust"`
	// DoubtLearn: each backend learns what its doubted claims are worth from
	// the answers (the share of their blocks found cached, a
	// moving average over the last ~32 answers that had one, at least
	// 0.001), starting from DoubtTrust, which counts as doubtPrior answers
	// until the moving average takes over. On: with claims stamped at each use,
	// few doubted claims hold (4% on customers), and a fixed 0.5 keeps
	// sending requests to holders that lost the prefix. Kvmesh arm, 2 runs
	// each, hit rate and TTFT p99, learned against 0.5 fixed: customers
	// 50.1-50.3% and 1.41-1.43 s against 50.1-50.6% and 1.77-2.15 s;
	// Mooncake 3x 13.9-14.4% against 13.6-14.4% (4 runs); agent 82.1-84.1%
	// and 16.6-17.0 s against 81.0-82.5% and 15.4-16.9 s. (Before claims
	// were stamped at each use it cost customers 0.8 points of hit rate.)
	DoubtLearn bool `yaml:"doubt_learn"`
	// DoubtCurve: with DoubtLearn, what a doubted claim is worth depends
	// on how far past the edge it is: the claims with up to 1.25, 1.5, 2
	// and 3 times DoubtBeyond capacities written after them, and those
	// further, each learn a worth of their own from the answers (starting
	// from the backend's one learned worth). An engine's LRU does not drop
	// a prefix the moment one capacity has been written after it (running
	// requests' blocks are out of it, and how many varies with the load),
	// so a claim just past the edge is often still held while one far past
	// it never is; one worth for both prices the first at the second's.
	// The ranges are this node's (the one worth is the mesh's lesson).
	//
	// On, with DoubtNear 3 (kvmesh arm, 8 backends, runs alternating with
	// both off; hit rate, TTFT p50 and p99 medians): Mooncake 3x, 8 pairs:
	// 14.5% against 14.5% (ahead in 5, by +0.15 points in the median
	// pair), p50 0.95 against 0.93 s, p99 6.54 against 6.96 s (faster in 7
	// of 8); customers, 3 pairs: 50.3% against
	// 50.0%, p99 1.35 against 1.26 s; agent, 3 pairs: 84.2% against 84.0%,
	// p99 11.0 against 21.3 s. Learned there: 0.07-0.33 just past the edge,
	// 0.02-0.06 further. Mooncake 2x, 6 pairs (at 061015e; almost no doubt
	// routes there, so this is the booking): 14.73% against 14.56% (ahead
	// in 5), p50 0.448 against 0.453 s (faster in 5), p99 5.82 against
	// 5.88 s (faster in 3).
	DoubtCurve bool `yaml:"doubt_curve"`
	// DoubtNear: a lookup also finds, for each backend, its deepest claim
	// with at most DoubtNear capacities written after it. A prompt's
	// claims are stamped one by one, so a shared head (a tenant's context
	// that other conversations keep using) is stamped later than the tail
	// of the one conversation that last went there: when both are past the
	// edge, the blocks up to the near claim are priced at its own
	// distance's worth (DoubtCurve) and only the rest at the far claim's.
	// 0: the deepest claim prices every doubted block (else more than
	// DoubtBeyond; it costs one more lookup while any claim is doubted).
	// 3: the last of DoubtCurve's bounded ranges.
	DoubtNear float64 `yaml:"doubt_near"`
	// DoubtPool: with DoubtCurve, the worth of each range is learned from
	// every backend's answers on one curve rather than a curve per
	// backend. The range already counts the distance in the backend's own
	// capacities, so what a claim so far past the edge is worth is the
	// workload's and the engines' eviction, not one backend's; pooled, a
	// range learns from eight times the answers on eight backends, where
	// a backend's own curve sees a few dozen doubted answers in a run and
	// prices its doubted claims meanwhile on what the starting worth
	// still weighs. The curve is this node's (the lessons carry each
	// backend's one worth).
	//
	// Off: it trades hit rate for tail latency, and not on every workload.
	// On against off (kvmesh arm, 8 backends, runs alternating; medians
	// and pairs won): Mooncake 2x, 10 pairs: hit rate 14.47% against
	// 14.68% (ahead in 3 of 10), TTFT p90 1.92 against 1.94 s (faster in
	// 8), p99 5.82 against 5.87 s (6); customers, 3 pairs: 50.3% against
	// 50.1% (2 of 3), p50 0.372 against 0.386 s and p99 1.29 against 1.36 s
	// (3 of 3 each); agent, 6 pairs: 84.7% against 85.0% (2 of 6), p99
	// 9.2 against 9.4 s (4 of 6); Mooncake 3x, 3 pairs: 14.5% against
	// 14.7% (ahead in 2), p99 6.68 against 6.76 s (2). Pooled, the
	// Mooncake curves fall to 0.001-0.01 beyond 1.5 capacities (0.02-0.09
	// per backend, where a range has seen a handful of answers).
	DoubtPool bool `yaml:"doubt_pool"`
	// DoubtSpanCurve: a doubted claim's blocks beyond the trusted match
	// (a near claim's, then the far claim's beyond it) are each worth what
	// doubted spans at that distance and of that length proved worth: the
	// share of their blocks the answers showed cached, learned from every
	// backend's answers per cell of DoubtCurve's distance ranges and spans
	// of up to 2,048, 8,192 and 32,768 tokens and longer (doubtspan.go), in
	// place of the worth by distance alone once the cell has an answer.
	// The worth by distance is learned per answer as a share of the span,
	// and the share held depends on the span's length: on Mooncake 2x (2
	// runs, 768 requests with a doubted claim at the backend chosen) spans
	// under 2,000 tokens held 26% of their blocks, 2,000-8,000 4%,
	// 8,000-20,000 1.3% and longer ones 0.5%, alike at every distance, so a
	// 50,000-token span priced at the distance's worth drew requests to
	// backends with seconds more prefill booked (57 and 62 a run), and none
	// found it held. At 3x (1 run) the same lengths held 44%, 9%, 11% and
	// 15%, the long ones just past the edge: a worth by length alone lost
	// Mooncake 3x 1.3 points of hit rate (docs/claims.md).
	//
	// Off: on against off (kvmesh arm, 8 backends, runs alternating;
	// medians, pairs won): Mooncake 2x, 4 pairs: TTFT p50 0.443 against
	// 0.4495 s and p90 1.847 against 1.929 s (faster in 4 of 4), p99 5.71
	// against 5.75 s (3 of 4), hit rate level (2 of 4); Mooncake 3x, 4
	// pairs: hit rate 14.27% against 14.72% (behind in 4 of 4), p50 0.938
	// against 0.905 s (slower in 3), p99 6.42 against 6.59 s (faster in 4).
	DoubtSpanCurve bool `yaml:"doubt_span_curve"`
	// DoubtSpanMinIdle: with DoubtSpanCurve, the cells price doubted
	// claims only while at least this share of the recent routing
	// decisions (a moving average over the last ~64) had a candidate with
	// nothing queued; otherwise the worth by distance does. A fleet that
	// always has an idle backend pays for a doubted claim in waits, one
	// queued everywhere in the prefill every recompute adds to every
	// queue. 0: always. On Mooncake 2x 96% of decisions had an idle
	// candidate, at 3x 65%.
	//
	// 0: at 0.85 (with DoubtSpanCurve, against both off; kvmesh arm, 8
	// backends, runs alternating; medians, pairs won) the gate keeps half
	// the 3x loss and little of the 2x gain: Mooncake 3x, 4 pairs: hit
	// rate 14.37% against 14.58% (ahead in 1 of 4), p50 level; Mooncake
	// 2x, 4 pairs: p90 1.878 against 1.938 s (faster in 4 of 4), p50 and
	// hit rate level, p99 5.82 against 5.74 s (faster in 1); customers, 3
	// pairs: level. A 64-decision average follows the trace's lulls, in
	// which a busy fleet has idle candidates too.
	DoubtSpanMinIdle float64 `yaml:"doubt_span_min_idle"`
	// DepthEdge: a claim's edge depends on its depth. An engine frees a
	// finished request's blocks tail first, so the deepest blocks of a
	// prefix are the first of it evicted, and the prefix's own blocks take
	// their room in the cache: a prefix of D units stamped at t is held
	// whole while what was written after t plus D fits in the capacity,
	// and after that down to the depth that still fits (capacity less
	// what was written after t). On, the trusted match is cut to that
	// depth, the blocks beyond it are priced as a doubted claim at the
	// worth of its distance, and every distance the belief learns or
	// prices from counts the claim's depth (what was written after it
	// plus its own units), so the capacity learned is the cache's, not
	// the cache less a typical prompt.
	//
	// Off: it buys Mooncake's median and p90 with the agent workload's hit
	// rate and customers' latency. On against off (kvmesh arm, 8 backends,
	// runs alternating; medians, pairs won): Mooncake 2x, 7 pairs: TTFT
	// p50 0.440 against 0.448 s (faster in 6 of 7), p90 1.905 against
	// 1.950 s (5 of 7), p99 level (3 of 7), routing precision 97.9%
	// against 97.4%, hit rate 14.58% against 14.61% (ahead in 2 of 7);
	// customers, 3 pairs: 50.26% against 50.20%, p50 0.369 against
	// 0.365 s and p90 0.891 against 0.869 s (slower in 3 of 3); agent, 6
	// pairs: 83.6% against 84.6% (ahead in 2 of 6), p99 12.5 against
	// 9.3 s. An agent's context is as long as half a cache and comes back
	// within seconds: cut at the edge, it is sent where it must be
	// computed again while its holder still had it.
	DepthEdge bool `yaml:"depth_edge"`
	// DepthEdgeMaxReuse: with DepthEdge, claims count their depth only
	// while the share of prompt tokens the backends answered cached
	// (Request.Reuse) is at most this; 0: always. At 0.67 (a unit written
	// read back at most twice, SpreadMinReuse's threshold) the agent
	// workload (reuse 0.83) keeps its holders: 3 pairs against off, 85.3%
	// against 83.5%, ahead in 3 (within that workload's spread: once its
	// answers come in it runs as with the option off). Customers (reuse
	// 0.5) still pays: p90 0.875 against 0.868 s (slower in 3 of 3), p99
	// 1.35 against 1.28 s, likely because the cut falls below a
	// customer's shared context, whose claims other users keep fresh,
	// while the lookup reports only the deepest claim's stamp. At 0.3
	// (alone, or with PinnedEdgeMaxReuse 0.3) Mooncake 2x was level over
	// 6 pairs, and with both customers lost hit rate and p50 in 6 of 6:
	// the reuse average climbs through 0.3 while a cold fleet warms up,
	// so the gate is open then (docs/claims.md).
	DepthEdgeMaxReuse float64 `yaml:"depth_edge_max_reuse"`
	// ConfirmShare: an answer confirms a match when the backend reports at
	// least this share of the tokens the router believed matched as cached.
	// 0.5: a match counts when most of it was there, not for a first block
	// every prompt shares.
	ConfirmShare float64 `yaml:"confirm_share"`
	// LearnRate is how far one answer moves the capacity estimate towards
	// what it showed. 0.1: a few dozen answers per backend settle it, and
	// one odd answer (a request that evicted its own prefix) moves it
	// little.
	LearnRate float64 `yaml:"learn_rate"`
	// UnitsPerToken is the prompt units per token assumed until answers
	// have shown it (the ratio of a prompt's units to the prompt_tokens its
	// answer reports): 4 in byte mode (English text), 1 in token mode.
	UnitsPerToken float64 `yaml:"units_per_token"`
	// LostTTL: when an answer shows that the backend had lost a match the
	// router believed (less than ConfirmShare of it cached), the prompt is
	// marked lost there for this long, and its conversation's next request
	// doubts that backend's match (at its learned doubt worth, or
	// DoubtTrust when DoubtLearn is off): a backend that could not keep a
	// context from one request to the next is crowded and will likely lose
	// it again (lostprefix.go). 60 s: a
	// coding agent's next step comes within seconds, a chat's next turn
	// within a minute; later, the capacity learned from answers decides.
	// 0: off; else at least 1 ms. Agent workload (8 backends, kvmesh arm,
	// 10 runs each, side by side, with marks lasting 100 s simulated): hit
	// rate 83.8% (80.7-84.4) against 83.0% (81.0-83.9) off, TTFT
	// p99 16.7 s against 22.1 s, routing precision 95.2% against 94.0%;
	// Mooncake 3x and customers within their spread (docs/claims.md).
	LostTTL time.Duration `yaml:"lost_ttl"`
	// PinnedEdge: a claim's reach counts what the backend's running
	// requests held out of its LRU when the claim was stamped. An engine
	// evicts only blocks no running request uses; when a prefix is
	// released, the blocks ahead of it in the eviction order are the
	// cache less those pinned by running requests (vLLM's
	// kv_cache_usage_perc, from ORCA reports or scrapes), so a prefix
	// released while the cache was half pinned is gone after half a
	// capacity of writes, one released while it was idle after a whole
	// capacity. On, every sample of the history records the pinned units
	// (the share times the configured capacity), a claim's reach is what
	// was written since plus what was pinned then less the claim's own
	// units (its own blocks are not ahead of it), and the trusted claim is
	// checked against the edge by that reach (cutAtEdge); the capacity
	// learned from answers becomes the cache's own, not the cache less a
	// typical pinned load. Needs the capacity (configured or scraped) and
	// a KV usage signal; without either it changes nothing.
	//
	// Off: it makes the claims truer and the tail faster where the fleet
	// reads back little of what it writes, and costs latency where it
	// reads back much. On against off (kvmesh arm, 8 backends, runs
	// alternating; medians, pairs won): Mooncake 2x, 3 pairs: routing
	// precision 98.7-99.1% against 97.2-97.7%, TTFT p90 1.915 against
	// 1.959 s (faster in 3 of 3), p50, p99 and hit rate level (2 of 3
	// each); Mooncake 3x, 4 pairs: precision 98.1-98.5% against
	// 95.2-95.9%, p90 and p99 faster in 3 of 4, p50 slower in 3 of 4
	// (0.913 against 0.905 s), hit rate level (2 of 4); customers, 3
	// pairs: precision 96.7-97.5% against 93.7-94.5% but p99 1.51
	// against 1.31 s (slower in 2 of 3); agent, 3 pairs: hit rate 84.0%
	// against 82.2% (ahead in 2 of 3, within that workload's spread).
	// Counting the claim's own units too (tail first, as DepthEdge does),
	// Mooncake's p90 was faster in 11 of 12 pairs at 2x and 3x, but
	// customers' p90 slower in 3 of 3 and agent's hit rate lower in 3 of
	// 3. With PinnedEdgeMaxReuse 0.3: customers level (4 pairs: ahead or
	// faster in 3 of 4 on hit rate, p90 and p99); agent behind in 3 of 3
	// on hit rate (82.8% against 85.3%) in one batch, ahead in 4 of 4 in
	// an earlier form's: not settled (docs/claims.md).
	PinnedEdge bool `yaml:"pinned_edge"`
	// PinnedEdgeMaxReuse: PinnedEdge counts what was pinned only while the
	// share of prompt tokens the backends answered cached (Request.Reuse)
	// is at most this; 0: always. A fleet that reads back much of what it
	// writes (customers 0.5, agents 0.8; Mooncake 0.14) re-reads prefixes
	// whose claims a busy moment doubted whole. The capacity learned
	// while it counted stays when the gate closes.
	PinnedEdgeMaxReuse float64 `yaml:"pinned_edge_max_reuse"`
}

// DefaultBeliefConfig returns the defaults documented on BeliefConfig.
func DefaultBeliefConfig() BeliefConfig {
	return BeliefConfig{Enabled: true, EdgeStart: 0.7, EdgeTrust: 1, DoubtBeyond: 1, DoubtTrust: 0.5, DoubtLearn: true, DoubtCurve: true, DoubtNear: 3, ConfirmShare: 0.5, LearnRate: 0.1, UnitsPerToken: 4,
		LostTTL: time.Minute}
}

func (c BeliefConfig) validate() []error {
	var errs []error
	if !(c.DoubtSpanMinIdle >= 0 && c.DoubtSpanMinIdle <= 1) {
		errs = append(errs, fmt.Errorf("router: belief.doubt_span_min_idle must be in [0, 1], got %v", c.DoubtSpanMinIdle))
	}
	if !(c.EdgeStart > 0 && c.EdgeStart <= 1) {
		errs = append(errs, fmt.Errorf("router: belief.edge_start must be in (0, 1], got %v", c.EdgeStart))
	}
	if !(c.EdgeTrust > 0 && c.EdgeTrust <= 1) {
		errs = append(errs, fmt.Errorf("router: belief.edge_trust must be in (0, 1], got %v", c.EdgeTrust))
	}
	if !(c.ConfirmShare > 0 && c.ConfirmShare <= 1) {
		errs = append(errs, fmt.Errorf("router: belief.confirm_share must be in (0, 1], got %v", c.ConfirmShare))
	}
	if !(c.DoubtBeyond == 0 || c.DoubtBeyond >= 0.5) || math.IsInf(c.DoubtBeyond, 0) {
		errs = append(errs, fmt.Errorf("router: belief.doubt_beyond must be 0 (never) or at least 0.5, got %v", c.DoubtBeyond))
	}
	if !(c.DoubtNear == 0 || c.DoubtNear > c.DoubtBeyond) || math.IsInf(c.DoubtNear, 0) || math.IsNaN(c.DoubtNear) {
		errs = append(errs, fmt.Errorf("router: belief.doubt_near must be 0 (one worth) or more than doubt_beyond (%v), got %v", c.DoubtBeyond, c.DoubtNear))
	}
	if !(c.DoubtTrust >= 0 && c.DoubtTrust <= 1) {
		errs = append(errs, fmt.Errorf("router: belief.doubt_trust must be in [0, 1], got %v", c.DoubtTrust))
	}
	if !(c.PinnedEdgeMaxReuse >= 0 && c.PinnedEdgeMaxReuse <= 1) {
		errs = append(errs, fmt.Errorf("router: belief.pinned_edge_max_reuse must be in [0, 1], got %v", c.PinnedEdgeMaxReuse))
	}
	if !(c.DepthEdgeMaxReuse >= 0 && c.DepthEdgeMaxReuse <= 1) {
		errs = append(errs, fmt.Errorf("router: belief.depth_edge_max_reuse must be in [0, 1], got %v", c.DepthEdgeMaxReuse))
	}
	if !(c.LearnRate > 0 && c.LearnRate <= 1) {
		errs = append(errs, fmt.Errorf("router: belief.learn_rate must be in (0, 1], got %v", c.LearnRate))
	}
	if !(c.UnitsPerToken > 0) || math.IsInf(c.UnitsPerToken, 0) {
		errs = append(errs, errors.New("router: belief.units_per_token must be a positive number"))
	}
	if c.LostTTL < 0 || (c.LostTTL > 0 && c.LostTTL < time.Millisecond) {
		errs = append(errs, fmt.Errorf("router: belief.lost_ttl must be 0 (off) or at least 1ms, got %v", c.LostTTL))
	}
	return errs
}
