package router

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// KVMeshConfig weighs saved prefill against load in the kvmesh policy.
//
// Cost model (lower is better), in prompt units (bytes in byte mode, tokens
// in token mode), for a prompt of T units of which candidate i is expected
// to hold M_i (Candidate.SavedUnits: its trusted match, discounted near its
// cache's edge, and the blocks only a doubted claim covers at
// BeliefConfig.DoubtTrust):
//
//	cost_i = (PrefillWeight + CacheWeight * f_i) * (T - M_i) + copy_i + load_i + kv_i + spread_i
//	copy_i = CopyWriteShare * CacheWeight * (1 - f_i) * max(0, max_j M_j - M_i)
//	load_i = (PendingWeight * pending_i
//	        + avg * QueueWeight * w_i * others_waiting_i
//	        + avg * LoadWeight * decoding_i) / weight_i
//	kv_i   = T * KVUsageWeight * w_i * max(0, kv_usage_i - KVUsageThreshold) / (1 - KVUsageThreshold)
//	spread_i = SpreadWeight * avg * max(rho - SpreadMinReuse, 0) * ((T - M_i) / T) * max(0, active_i / weight_i - mean_active)
//
// The first term is the prefill this request makes the backend compute,
// priced twice: once for the time it takes now (PrefillWeight) and once
// for the cached blocks it displaces (CacheWeight), which later requests
// will have to compute again; f_i is how full the backend's cache is
// (1 - Candidate.Unfilled): writing where nothing was written yet displaces
// nothing, except that a second copy of what another candidate holds
// (copy_i) is priced as if the cache were full (CopyWriteShare);
// pending_i is the prefill the mesh has already queued there (the
// uncached units of its requests still waiting for their first token:
// this router's, LoadView.PendingPrefill, exact, plus its peers', from the
// mesh's load channel, LoadView.PeerPendingPrefill): an engine prefills in
// arrival order, so this is the work between the request and its first
// token. others_waiting_i is the backend's waiting queue (ORCA or
// /metrics, weighted by the signal's freshness w_i) less the requests the
// mesh had pending there when the queue was sampled (LoadView.OwnAtSignal;
// comparing with the pending count now would take a stale sample's own
// requests, admitted since, for others'): work queued by routers outside
// the mesh, priced at the average prompt (avg, a moving average).
// decoding_i (the mesh's requests past their first token, or the
// backend's running count if larger) barely slows a new prefill and gets a
// small weight. kv_i keeps requests off a backend about to preempt for lack
// of KV space. weight_i is the backend's configured capacity.
//
// spread_i keeps contexts off backends that already carry more than their
// share. A request is the opening of work that comes back (the next turn,
// an agent's next step) to wherever its context lands, so a backend's
// active requests (active_i: the mesh's in flight there, or the backend's
// running count if larger) stand for the contexts attached to it, whose
// footprint its cache must keep; above the fleet's mean (mean_active, per
// unit of weight) they crowd each other out. What is at stake is what the
// candidate would newly write (T - M_i: nothing for a full holder, the
// whole prompt for a backend holding none of it) times the reads of it
// beyond SpreadMinReuse: rho = r / (1 - r) is how often a unit written is
// read again, r being the share of prompt tokens the backends answered
// they had cached (Request.Reuse). So where the fleet reads what it writes
// many times over (coding agents: r 0.83, rho 5), a new session goes to a
// backend with fewer contexts and a crowded holder, which thrashes, sheds
// sessions; where it reads a unit a couple of times or less (Mooncake, r
// 0.14; customers, r 0.5; before any answer) the term is off and the
// queued prefill decides.
//
// Candidates within TieBand of the cheapest are equally good: rendezvous
// hashing places the request among them, so that router nodes agree on new
// prefixes while the fleet is balanced.
type KVMeshConfig struct {
	// PrefillWeight prices one unit of prompt the chosen backend must
	// compute. 1: the unit of cost.
	PrefillWeight float64 `yaml:"prefill_weight"`
	// CacheWeight prices one unit of prompt the chosen backend must write
	// into a full cache: it evicts blocks that later requests would have
	// hit. Without it the cost is myopic: a holder whose queued prefill is
	// as long as the shared prefix ties with an idle backend that does not
	// hold it, and sending the prefix there duplicates it in the fleet's
	// cache (2 backends, 4 groups of prompts, caches of 2 groups each: the
	// hit rate fell from 0.89 to 0.6-0.7 depending on timing). 8: measured
	// on the Mooncake trace with caches a tenth of the working set (8
	// backends, 1 run each, hit rate and TTFT p50 at 3x the trace's rate:
	// 0: 10.3%, 1.74 s; 1: 11.1%, 1.59 s; 2: 12.5%, 1.52 s; 4: 12.6%,
	// 1.39 s; 8: 13.3%, 1.36 s; 16: 13.8%, 1.39 s; at 2x, hit rate 13.3% at
	// 1 to 14.4% at 8, TTFT p50 0.70-0.73 s throughout). 16 once the load
	// override stopped undoing it (see LoadOverrideFactor): 14.2% (13.9-14.3,
	// 3 runs) against 13.8% at 8. Stickiness has a bound: a holder's queued
	// prefill still counts in full, and the load override still moves
	// requests off a holder far busier than the median.
	//
	// It counts in proportion to how full the backend's cache is (f_i above:
	// 1 - Candidate.Unfilled, what the mesh has written to it against its
	// capacity, by the belief; 1 when either is unknown): writing into a
	// part nothing was written to yet evicts nothing. Without that a backend
	// that missed the first copies of a shared system prompt was never sent
	// a new conversation: each one it would take paid 17 times the prompt's
	// length more than at a holder, more than any load difference, and it
	// sat idle (agent workload, 2-node mesh: one backend computed 0.1M of
	// ~50M prompt tokens in 4 of 5 bad runs).
	CacheWeight float64 `yaml:"cache_weight"`
	// DoubtCacheShare is the share of CacheWeight that the blocks only a
	// doubted claim covers (Candidate.DoubtedWorth: past the edge of what
	// the backend's cache keeps, by the belief's count) earn. The cache
	// weight prices the copy a request makes elsewhere of a prefix the
	// holder keeps; a doubted claim's blocks, if still held, sit at the
	// tail of the holder's LRU, which evicts them before anything else, so
	// a second copy made elsewhere displaces about as much there as it
	// frees at the holder. 1 prices them like trusted blocks (at their
	// worth); 0 counts only the prefill they are expected to save.
	//
	// 1: at 0, against 1 (kvmesh arm, 8 backends, runs alternating;
	// medians, pairs won), Mooncake 2x, 6 pairs: TTFT p90 1.849 against
	// 1.959 s (faster in 6 of 6), p50 and p99 level, hit rate 14.66%
	// against 14.88% (ahead in 2 of 6); customers, 4 pairs: p90 0.829
	// against 0.881 s and p99 1.23 against 1.38 s (4 of 4), hit rate level
	// (3 of 4); but Mooncake 3x, 4 pairs: hit rate 13.5% against 14.6% and
	// TTFT p50 0.970 against 0.926 s (behind in 4 of 4): there doubted
	// claims just past the edge are often still held (the learned worth
	// reaches 0.33), and a request that could have read them computes them.
	DoubtCacheShare float64 `yaml:"doubt_cache_share"`
	// CopyWriteShare withholds this share of the unfilled-cache discount
	// (CacheWeight counts in proportion to how full the backend is) from
	// the units of the prompt that another candidate holds and this one
	// does not: a request sent away from a holder writes a second copy of
	// what the fleet already keeps. Into an unfilled cache that copy
	// evicts nothing yet, but it is capacity spent on a duplicate, and the
	// conversation's old copy stays behind at the holder until it is
	// evicted. 0: copies get the whole discount; 1: they pay the full
	// write weight however empty the cache (the oracle arm never grants
	// the discount).
	//
	// 1: against 0 (kvmesh arm, 8 backends, runs alternating; medians,
	// pairs won): agent, 4 pairs: hit rate 85.4% against 84.2% (3 of 4),
	// TTFT p90 2.53 against 3.03 s (3 of 4), p50 level; Mooncake 2x, 3
	// pairs: 14.79% against 14.44% (3 of 3), p50 0.446 against 0.448 s;
	// Mooncake 3x, 3 pairs: p50 0.906 against 0.933 s, p99 6.19 against
	// 6.85 s (3 of 3 each), hit rate level; customers, 7 pairs: level (hit
	// rate 50.2% each, behind in 5 of 7 by 0.1 points); a 2-node mesh on
	// the agent workload, 3 pairs: 85.4% against 84.5%, p50 faster in 3 of
	// 3. docs/claims.md.
	CopyWriteShare float64 `yaml:"copy_write_share"`
	// ShallowMatchShare: a candidate whose match (trusted and doubted)
	// covers less than this share of the prompt earns no credit against
	// CacheWeight: it is charged for writing the whole prompt, like a
	// candidate that holds none of it (the prefill it saves still counts).
	// The cache weight prices the copy a request makes elsewhere of what a
	// holder keeps; for a short head of a long prompt that copy is small
	// next to what the request writes anyway, yet at CacheWeight 16 a
	// 512-token head outweighs 8,192 units of queue at a holder against a
	// backend without it. 0: every match earns it.
	//
	// Off: at 0.05 against off (kvmesh arm, 8 backends, runs alternating;
	// medians, pairs won), Mooncake 3x, 6 pairs: TTFT p50 0.909 against
	// 0.950 s and p99 6.35 against 6.51 s (5 of 6 each), hit rate 14.93%
	// against 14.54% (4 of 6); but Mooncake 2x, 8 pairs: p99 slower in 6 of
	// 8, hit rate level (4 of 8); customers, 8 pairs: hit rate behind in 7
	// of 8. Every Mooncake prompt opens with the same 512-token block,
	// which every backend holds, so the rule rarely changes who is
	// cheapest there. docs/claims.md.
	ShallowMatchShare float64 `yaml:"shallow_match_share"`
	// PendingWeight prices one unit of prefill this router has queued at
	// the backend. 1: queued prefill delays the first token as much as the
	// request's own (the engine computes both at the same rate).
	//
	// The whole sum is priced, although the oldest request is partly
	// computed. Pricing only what is left (the oldest one's progress at a
	// rate learned from first bytes, within one request of the truth
	// against a FIFO server; commit ec6076e, kvmesh.pending_drain) kept
	// more prompts at their holders and made them wait: kvmesh arm, 8
	// backends, runs alternating with the sum (hit rate, TTFT p50, p90
	// medians): Mooncake 2x, 6 pairs: 14.77% against 14.64%, 0.458 against
	// 0.450 s, 2.037 against 1.975 s (slower in 6 of 6); Mooncake 3x, 6
	// pairs: level; customers, 3 pairs: 50.5% against 50.3%, p99 1.40
	// against 1.28 s (slower in 3 of 3). The oracle arm prices the sum too.
	PendingWeight float64 `yaml:"pending_weight"`
	// OverdueFactor and OverdueSlack: when the oldest request this router
	// has pending at a backend has been at the front for long enough to
	// compute more than OverdueFactor times its booked prefill plus
	// OverdueSlack average prompts (at the rate this router's answers
	// showed; LoadView.HeadProgress), its match was wrong and the engine
	// is computing its whole prompt: the rest of that prompt counts as
	// pending prefill there (overdue.go). 0: off.
	//
	// Off: at 2 and 0.1 against off (kvmesh arm, 8 backends, runs
	// alternating; medians, pairs won): Mooncake 2x, 8 pairs: TTFT p90
	// 1.901 against 1.931 s and p99 5.79 against 5.82 s (faster in 6 of 8
	// each), p50 and hit rate level (14.68% against 14.65%, ahead in 2 of
	// 8); Mooncake 3x, 3 pairs: p50 0.878 against 0.908 s (faster in 2),
	// p99 6.43 against 6.24 s; customers, 3 pairs: 50.37% against 49.99%,
	// p50 0.366 against 0.362 s (slower in 3 of 3); agent, 6 pairs: level
	// but for p99 11.6 against 8.1 s (faster in 2 of 6); an 8-node mesh at
	// Mooncake 3x, 2 pairs: p99 7.45 against 6.87 s (a node's head waits
	// behind its peers' requests too). docs/claims.md has the analysis
	// that motivated it.
	OverdueFactor float64 `yaml:"overdue_factor"`
	OverdueSlack  float64 `yaml:"overdue_slack"`
	// LoadWeight prices each request decoding at the backend, in average
	// prompts. A decoding sequence adds one token to each engine step that
	// also carries the new prefill (thousands of tokens), so it delays a
	// new first token very little; the small weight spreads decode work
	// between otherwise equal backends. (The benchmark's oracle reads it as
	// its price per active request.)
	LoadWeight float64 `yaml:"load_weight"`
	// QueueWeight prices each request waiting in the backend's queue that
	// this router did not send (from ORCA or /metrics), in average prompts.
	// 1: a waiting request must be prefilled before ours starts.
	QueueWeight float64 `yaml:"queue_weight"`
	// SpreadWeight and SpreadMinReuse scale spread_i above: each request
	// active at the backend above the mean costs SpreadWeight average
	// prompts, times the reads per unit written beyond SpreadMinReuse,
	// times the share of the prompt the backend lacks. 12 and 2, from the
	// bench (8 backends, kvmesh arm; hit rate, TTFT p50 and p99, 2 runs
	// each unless said):
	//   - off: agent 73.7%, p99 167 s (1 run); customers 50.2%, 0.39 s,
	//     2.26 s; Mooncake 3x 14.5%, p50 0.94-1.01 s.
	//   - 12 and 2: agent 83.9%, 22 s; customers 50.1%, 0.39 s, 2.51 s
	//     (side by side with off, both beside another benchmark).
	//   - weight 8 beyond 1 read: agent 83.8%, 21.8 s (3 runs); customers
	//     50.3%, 0.39 s, 2.81 s (3 runs): customers' r hovers around 0.5,
	//     where the term turns on and off. At 5, 7 and 10 beyond 1 read:
	//     agent 80.3%, 83.4%, 84.0%; customers p99 2.05, 2.50, 2.47 s.
	//   - Mooncake's reuse (r 0.14) is below both thresholds: the term is off.
	//   - 24 (docs/claims.md, "What the spread term's moves buy"): agent
	//     TTFT p99 8.1 s against 15.6 s (medians of 6 and 9 runs) and hit
	//     rate ahead in 4 of 6 pairs (+1.0 points at the median pair),
	//     but at half the agent rate 0.6-3.2 points lower (3 of 3), and in an
	//     8-node mesh p99 slower (2 of 2). 48: agent 79.8-82.8%.
	// Variants that did worse: weight 4 on every read (rho itself; agent
	// 84.6%, 21 s; customers 49.6%, 3 runs; Mooncake 3x 14.0% and p50
	// 1.04 s against 14.5% and 0.94-1.01 s off, side by side); rho from the
	// claims' matched share instead of the answers (customers 44-47%: its
	// matches are stale, rho was 6 where the real reuse is 1); counting
	// every active request rather than those above the mean (Mooncake TTFT
	// p50 +15%); applying the term only where every candidate holds the
	// same prefix (agent back to 75.8%: its gain is moving sessions off
	// crowded, thrashing holders).
	//
	// A known weakness: the threshold makes the policy bistable. The reuse
	// is measured from the answers, so a fleet whose caches thrash (one
	// backend left idle, the rest crowded) reads back less, falls below
	// the threshold and loses the term that would relieve it. On the agent
	// workload in a mesh that happened until a load override learned at
	// the backend it diverted to and the cache weight counted in
	// proportion to how full a cache is; with spread_min_reuse 0 the 2-node
	// mesh recovered as well (82.8/83.9%), but customers fell to 47.4-47.9%
	// (49.6-50.5% at 2; kvmesh arm, 3 runs each, at fb195a5).
	SpreadWeight   float64 `yaml:"spread_weight"`
	SpreadMinReuse float64 `yaml:"spread_min_reuse"`
	// KVUsageThreshold and KVUsageWeight: above this KV-cache usage (0..1)
	// a backend starts preempting; each full step from the threshold to 100%
	// costs KVUsageWeight times the request's own prompt (T). 0.9 and 4: only
	// a nearly full cache is penalized, and then strongly, as far as the
	// request is large: the blocks it takes up are its prompt's, so a short
	// prompt barely adds to the pressure while a long one may be what tips
	// the engine into preempting. Priced in average prompts instead (the
	// default before 2026-12-01), the penalty outweighed any short prompt's
	// cache saving and sent it off its prefix's holder whenever the last
	// scrape (up to two scrape intervals old) saw the holder nearly full:
	// on Mooncake 3x (kvmesh+evict and oracle+hold, 2 repeats each) TTFT
	// p50 0.661-0.671 s against 0.694-0.723 s over 8 runs of the average
	// price, with 26-27 preemptions a run against 29-37; weight 0 was as
	// fast but preempted 49-51 times. Keeping requests off fuller
	// caches costs more than the preemptions it spares: at 0.75 and 8
	// (kvmesh arm, Mooncake 3x, 3 pairs alternating with the default,
	// -router-config) the fleet preempted 16-24 times a run against 51-61,
	// but TTFT p50 was 1.02-1.03 s against 0.90-0.94 s and p90 slower in
	// 3 of 3, hit rate lower in 3 of 3, p99 faster in 1 of 3.
	KVUsageThreshold float64 `yaml:"kv_usage_threshold"`
	KVUsageWeight    float64 `yaml:"kv_usage_weight"`
	// TieBand, in average prompts: candidates whose cost is within this of
	// the cheapest are placed by rendezvous hashing rather than by the
	// cost's small differences. 0: only equal costs tie. A band keeps a
	// conversation whose own part is gone on one backend (the hash is of
	// its first learn position past the shared head, the same every turn),
	// but that stickiness did not pay: at 0.25 (kvmesh+evict, Mooncake 2x,
	// 3 pairs alternating, at 95aec60) 0.44 of follow-ups moved against
	// 0.52, hit rate 14.50% against 14.77%, TTFT p50 0.458 against 0.454 s.
	TieBand float64 `yaml:"tie_band"`
	// LoadOverrideFactor: when the backend chosen for its prefix has a load
	// (load_i above, in prompt units) above this many times the median load
	// of the candidates, the request goes to the best other backend instead.
	// It is a guard for when the load estimate is wrong (work this router
	// cannot see), not the main trade: the cost already weighs the holder's
	// queue against the prefix it saves, and every diversion computes the
	// prefix again somewhere that does not keep it. 8: Ranvier's 2 undid the
	// cost model on the Mooncake trace (caches a tenth of the working set, 3x
	// its rate, 8 backends, hit rate over 3 runs each): 2: 13.4%
	// (12.9-13.7); 4: 13.6% (13.3-13.8); off: 13.8% (13.6-14.1); with
	// cache_weight 16, off: 14.2% (13.9-14.3) and 8: 14.1% (14.0-14.4); TTFT
	// p99 7.6-10.5 s over these runs (least_loaded: 23-27 s). Learning the
	// whole diverted copy measured no better than learning none of it: 12.9%
	// (12.7-13.3) at 2. The backend diverted to learns the request's own part
	// beyond the holder's match (Decision.LearnAbove): learning none of it
	// starved a backend on the agent workload in a mesh, where the first
	// diversions of a run went to it, it never got a claim, and new
	// sessions, which pick holders of the shared system prompt, never went
	// there (2-node mesh: 66-67% hit rate, against 82-83% with it).
	LoadOverrideFactor float64 `yaml:"load_override_factor"`
	// LoadOverrideFloor is the least load that counts as overloaded, in
	// average prompts, whatever the median (with an idle fleet the median is
	// 0). 4: a few prompts' prefill queued is no overload.
	LoadOverrideFloor float64 `yaml:"load_override_floor"`
	// WaitGuardFactor and WaitGuardFloor: when the backend chosen for its
	// prefix would make the request wait (the load ahead of it plus what it
	// computes there, in prompt units) more than WaitGuardFactor times as
	// long as the quickest other candidate, and longer by more than
	// WaitGuardFloor average prompts, the request goes to that candidate
	// instead (reason load-override; waitguard.go). The cost weighs a
	// holder's queue against CacheWeight+PrefillWeight per unit it would
	// write elsewhere, which keeps the fleet's cache unduplicated but can
	// make a request wait seconds behind a long prompt's prefill to save a
	// fraction of that: on Mooncake 2x most of kvmesh's longest waits were
	// hits queued behind prefill the router had booked, at holders with
	// other backends idle (docs/claims.md). 0: off.
	//
	// Off: a diverted hit computes its prefix again, and the backend it
	// goes to queues that prefill in front of its own requests, which the
	// guard does not price. Against off (kvmesh arm, 8 backends, runs
	// alternating; medians, pairs won): factor 2, floor 2, Mooncake 2x, 4
	// pairs: TTFT p90 1.833 against 1.945 s (4 of 4) but hit rate 13.5%
	// against 14.6% (behind in 4 of 4); factor 3, floor 5 (7-20 diversions
	// a run): Mooncake 2x, 5 pairs: p99 5.62 against 5.89 s (faster in 5
	// of 5), hit rate 14.38% against 14.71% (ahead in 1 of 5); Mooncake
	// 3x, 3 pairs: slower at p50, p90 and p99 in 3 of 3
	// (0.934 against 0.903 s, 2.89 against 2.71 s, 6.52 against 6.43 s);
	// customers never reaches the floor (no diversion in 6 runs).
	WaitGuardFactor float64 `yaml:"wait_guard_factor"`
	// WaitGuardFloor is the least extra wait the guard acts on, in average
	// prompts. 2: about the time an average prompt's prefill takes twice,
	// a wait a client notices; 0: any wait over the factor.
	WaitGuardFloor float64 `yaml:"wait_guard_floor"`
	// HotWindow and HotThreshold define a hot prefix: matched at least
	// HotThreshold times within HotWindow, mesh-wide (a node counts what it
	// routes and divides by its share of the mesh's traffic,
	// Request.MeshShare). 10 s and 20 (2 requests/s): a prefix that busy
	// alone keeps a backend's prefill busy.
	HotWindow    time.Duration `yaml:"hot_window"`
	HotThreshold float64       `yaml:"hot_threshold"`
	// HotMaxHolders caps how many backends a hot prefix is replicated to
	// (holders at its deepest depth). 2: one more holder halves the load a
	// hot prefix puts on each while keeping the fleet's cache mostly
	// unduplicated; beyond that, diversions are plain load overrides.
	HotMaxHolders int `yaml:"hot_max_holders"`
	// HotSlots is the size of the hot-prefix counter. 4096 slots (64 KiB)
	// track far more concurrently hot prefixes than any fleet has.
	HotSlots int `yaml:"hot_slots"`
	// BlockWeight prices the delay a request's own prefill imposes on the
	// requests bound to the candidate (those it holds a prefix for) that
	// will arrive while it waits and computes there, per unit of delay
	// per request (blocking.go): 1 prices another request's wait like the
	// request's own. 0: off.
	//
	// Off: at 1 against off (kvmesh arm, 8 backends, runs alternating;
	// medians, pairs won), Mooncake 2x, 3 pairs: TTFT p50 0.431 against
	// 0.453 s and hit rate 14.76% against 14.53% (3 of 3 each); Mooncake
	// 3x, 4 pairs: p50 0.950 against 0.897 s and p99 6.67 against 6.51 s
	// (slower in 3 of 4). Gated (BlockIdleLoad 1) the 2x gain stays and 3x
	// loses half a point of hit rate (behind in 3 of 4); capped
	// (BlockMaxShare 0.1) neither moves. docs/claims.md has every form.
	BlockWeight float64 `yaml:"block_weight"`
	// BlockWindow is how far back the rate of bound arrivals looks (a
	// decayed count). 60 s: a conversation's next turn comes within a
	// minute or so, and a backend's set of conversations changes slower.
	BlockWindow time.Duration `yaml:"block_window"`
	// BlockMaxShare caps the term at this share of the prefill the
	// request would compute at the candidate: the longest extra wait the
	// request accepts for others, in units of its own prefill. 0: no cap.
	BlockMaxShare float64 `yaml:"block_max_share"`
	// BlockIdleLoad turns the term on only while some candidate has at
	// most this many average prompts of load queued (a backend that could
	// start the request almost at once): in a fleet where every backend is
	// queued, sparing the bound requests sends a long prompt to a longer
	// queue, and those prompts are its slowest. 0: always on.
	BlockIdleLoad float64 `yaml:"block_idle_load"`
	// BlockFleetLoad turns the term on only while the fleet's mean load,
	// a time-decayed mean over the last BlockWindow of decisions of the
	// mean candidate's queued prefill, is at most this many average
	// prompts: a fleet with slack can spare the bound requests at little
	// cost to the long prompt, a saturated one sends its long prompts,
	// its slowest, to longer queues. Unlike BlockIdleLoad it tells a
	// fleet that is saturated from one with a moment's burst. 0: always
	// on. The mean at each decision is /debug/route's fleet_load_prompts.
	// With the term off, Mooncake at 2x kept it at 1.17-1.32 average
	// prompts (10th to 90th percentile over a run), at 3x 1.42-2.24, while
	// the mean candidate's load at a decision spans 0.5-2.6 and 1.2-4.0:
	// the decayed mean tells the two apart, a decision's loads do not. At
	// 1.5 with BlockFence 1 the term keeps Mooncake 2x's p50 gain and no
	// longer costs 3x, but 2x's p99 is slower (5 of 6 pairs) and the
	// agent workload loses a point of hit rate (docs/claims.md).
	BlockFleetLoad float64 `yaml:"block_fleet_load"`
	// BlockFence keeps the term from moving a request to a queue more
	// than this many average prompts longer than the candidate it would
	// go to without the term: the request pays at most that much of its
	// own wait for the others. 0: no fence.
	BlockFence float64 `yaml:"block_fence"`
	// BlockMaxReuse turns the term on only while the share of prompt
	// tokens the backends answered were cached (Request.Reuse; 0.5 before
	// any answer) is at most this: where most of every prompt is a hit,
	// moving a request off its holder recomputes what the holder kept,
	// which costs more than the wait it spares the bound requests. 0:
	// always on. Mooncake reuses ~0.15 of its prompt tokens, customers
	// ~0.5, the coding agent ~0.85.
	//
	// With BlockWeight 1, BlockFleetLoad 1.5 and BlockFence 1, at 0.7
	// against the term off (kvmesh arm, runs alternating; medians, pairs
	// won): Mooncake 2x, 8 pairs: TTFT p50 0.440 against 0.454 s (8 of
	// 8), p99 5.86 against 5.81 s (faster in 2 of 8); Mooncake 3x, 8 pairs:
	// p50 level (5 of 8), p99 6.51 against 6.40 s (slower in 7 of 8);
	// customers, 8 pairs: p90 faster in 8 of 8, hit rate behind in 6 of 8
	// (50.08% against 50.23%); the agent workload, 6 pairs: level (hit
	// rate 84.3% against 84.0%), where without this gate it lost a point.
	// docs/claims.md.
	BlockMaxReuse float64 `yaml:"block_max_reuse"`
	// HoldMinPrompts, HoldQueuePrompts and HoldMax: late binding of long
	// prompts (hold.go). A request whose prefill at the best candidate
	// is at least HoldMinPrompts average prompts, arriving while every
	// candidate has more than HoldQueuePrompts average prompts of prefill
	// queued, waits at the router until a booking ends (a first byte)
	// and is decided again then, oldest first, for HoldMax at most. An
	// engine prefills in arrival order, so meanwhile shorter requests go
	// ahead of it, and it goes to the backend that frees first instead
	// of the queue that looked shortest when it came. 0 (HoldMinPrompts):
	// off. 0.5: the prompts held are the upper half of the prefill work
	// (on Mooncake, fresh prefills over ~6,500 tokens); HoldQueuePrompts
	// 0.3: a backend with less than a third of an average prompt queued
	// is as good as idle for a long prompt (with HoldSpareShare, the
	// number of such backends kept for the short ones); HoldMax 3 s: a held prompt
	// is one of the longest, seconds of prefill itself, and 3 s bounds
	// what it can lose when no queue empties.
	//
	// Measured on Mooncake (kvmesh+evict arm, 8 backends; docs/bench/
	// HISTORY.md, "Late binding"): at 3x the trace's rate, published at
	// 6edf10f (4 repeats), TTFT p50 0.730 s against the oracle's 0.848
	// (0.885 s before, at bbae0be), p99 5.96 against 5.99 s; at 2x, over
	// 6 repeats (resolution-evict-2x), level with the oracle at p50
	// (1.007x) and behind at p99 (1.027x), as before: at 2x the fleet is
	// rarely busy everywhere.
	HoldMinPrompts   float64       `yaml:"hold_min_prompts"`
	HoldQueuePrompts float64       `yaml:"hold_queue_prompts"`
	HoldMax          time.Duration `yaml:"hold_max"`
	// HoldMaxPrompts exempts the longest prompts: one whose prefill is
	// over this many average prompts is never held. They are the TTFT
	// p99 (on Mooncake, prefills of 90,000 tokens and more); a hold adds
	// to their time what it spares the others. 3: Mooncake's prompts
	// over ~40,000 fresh tokens. 0: none exempt.
	HoldMaxPrompts float64 `yaml:"hold_max_prompts"`
	// HoldSpareShare keeps backends free for short prompts: a long one is
	// held unless more than this share of the candidates (rounded down)
	// have at most HoldQueuePrompts average prompts queued. 0: held only
	// while none has. 1/8 with HoldQueuePrompts 0.3: of 8 backends, one
	// with less than a third of an average prompt queued is left to the
	// short prompts; a long prompt waits for a second (for HoldMax at
	// most). Fewer than 8 backends keep none spare (the share rounds down
	// to 0) and hold while every queue has more than HoldQueuePrompts.
	//
	// Measured against 0 and 0 (kvmesh+evict arm, 8 backends, runs
	// alternating, one each; docs/bench/HISTORY.md, "A backend kept for
	// short prompts"): Mooncake 3x, 4 against 4: TTFT p50 0.594, 0.571,
	// 0.586, 0.575 s against 0.663, 0.682, 0.694, 0.682 (0.86x), p99 5.93
	// against 5.87 s (medians), hit rate 14.83% against 14.93%; Mooncake
	// 2x, 3 against 3: p50 0.426, 0.435, 0.428 s against 0.445, 0.434,
	// 0.438, p99 and hit rate level. With HoldMax 1.5 s the p50 gain went
	// (0.701, 0.642, 0.679 s at 3x): the held prompts wait longer for a
	// second free backend. An offline model of the engines had promised
	// this (docs/bench/model/qsim.py); a first try, 1 pair, had said the
	// opposite.
	HoldSpareShare float64 `yaml:"hold_spare_share"`
	// HoldMaxReuse turns late binding on only while the share of prompt
	// tokens the backends answered were cached (Request.Reuse; 0.5 before
	// any answer) is at most this: where most of each prompt is a hit,
	// the fresh prefills are short and a held prompt is a new context
	// whose conversation is waiting for it. 0.3: on for Mooncake (reuse
	// ~0.15), off for the customers (~0.5) and agent (~0.85) shapes,
	// where it moved nothing measurable (customers, 2 pairs: p50 0.377
	// against 0.371 s, p99 1.22 against 1.32 s). 0: always on.
	HoldMaxReuse float64 `yaml:"hold_max_reuse"`
	// InitialPromptUnits is the average prompt size assumed before any
	// request was seen. 4096 units (about 1,000 tokens in byte mode).
	InitialPromptUnits float64 `yaml:"initial_prompt_units"`
}

// KVPenalty is kv_i before the signal's weight: what placing a prompt of
// prompt units on a backend whose KV cache is kvUsage (0..1) used costs
// (KVUsageThreshold, KVUsageWeight). A policy of its own (the benchmark's
// oracle) prices a full cache as kvmesh does with it.
func (cfg *KVMeshConfig) KVPenalty(prompt, kvUsage float64) float64 {
	if kvUsage <= cfg.KVUsageThreshold {
		return 0
	}
	return prompt * cfg.KVUsageWeight * (kvUsage - cfg.KVUsageThreshold) / (1 - cfg.KVUsageThreshold)
}

// DefaultKVMeshConfig returns the defaults documented on KVMeshConfig.
func DefaultKVMeshConfig() KVMeshConfig {
	return KVMeshConfig{
		PrefillWeight:      1,
		CacheWeight:        16,
		DoubtCacheShare:    1,
		CopyWriteShare:     1,
		PendingWeight:      1,
		LoadWeight:         0.01,
		SpreadWeight:       12,
		SpreadMinReuse:     2,
		QueueWeight:        1,
		KVUsageThreshold:   0.9,
		KVUsageWeight:      4,
		TieBand:            0,
		LoadOverrideFactor: 8,
		LoadOverrideFloor:  4,
		WaitGuardFloor:     2,
		HotWindow:          10 * time.Second,
		HotThreshold:       20,
		HotMaxHolders:      2,
		HotSlots:           4096,
		BlockWindow:        time.Minute,
		HoldMinPrompts:     0.5,
		HoldQueuePrompts:   0.3,
		HoldSpareShare:     0.125,
		HoldMaxPrompts:     3,
		HoldMax:            3 * time.Second,
		HoldMaxReuse:       0.3,
		InitialPromptUnits: 4096,
	}
}

func (c KVMeshConfig) validate() []error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf("router: kvmesh."+format, args...)) }
	nonNeg := func(name string, v float64) {
		if !(v >= 0) || math.IsInf(v, 0) {
			bad("%s must be a non-negative number, got %v", name, v)
		}
	}
	share := func(name string, v float64) {
		if !(v >= 0 && v <= 1) {
			bad("%s must be in [0, 1], got %v", name, v)
		}
	}
	nonNeg("prefill_weight", c.PrefillWeight)
	nonNeg("cache_weight", c.CacheWeight)
	share("doubt_cache_share", c.DoubtCacheShare)
	share("copy_write_share", c.CopyWriteShare)
	nonNeg("pending_weight", c.PendingWeight)
	nonNeg("load_weight", c.LoadWeight)
	nonNeg("spread_weight", c.SpreadWeight)
	nonNeg("spread_min_reuse", c.SpreadMinReuse)
	nonNeg("queue_weight", c.QueueWeight)
	nonNeg("kv_usage_weight", c.KVUsageWeight)
	nonNeg("tie_band", c.TieBand)
	nonNeg("load_override_floor", c.LoadOverrideFloor)
	nonNeg("hot_threshold", c.HotThreshold)
	nonNeg("overdue_slack", c.OverdueSlack)
	nonNeg("wait_guard_floor", c.WaitGuardFloor)
	nonNeg("block_weight", c.BlockWeight)
	nonNeg("block_max_share", c.BlockMaxShare)
	nonNeg("block_idle_load", c.BlockIdleLoad)
	nonNeg("block_fleet_load", c.BlockFleetLoad)
	nonNeg("block_fence", c.BlockFence)
	share("block_max_reuse", c.BlockMaxReuse)
	share("shallow_match_share", c.ShallowMatchShare)
	nonNeg("hold_min_prompts", c.HoldMinPrompts)
	nonNeg("hold_queue_prompts", c.HoldQueuePrompts)
	nonNeg("hold_max_prompts", c.HoldMaxPrompts)
	share("hold_max_reuse", c.HoldMaxReuse)
	if !(c.HoldSpareShare >= 0 && c.HoldSpareShare < 1) {
		bad("hold_spare_share must be in [0, 1), got %v", c.HoldSpareShare)
	}
	if c.HoldMinPrompts > 0 && c.HoldMaxPrompts > 0 && c.HoldMaxPrompts < c.HoldMinPrompts {
		bad("hold_max_prompts (%v) is below hold_min_prompts (%v): no prompt could be held; raise it, or set hold_max_prompts 0 to exempt none, or hold_min_prompts 0 to turn late binding off", c.HoldMaxPrompts, c.HoldMinPrompts)
	}
	if c.HoldMinPrompts > 0 && c.HoldMax <= 0 {
		bad("hold_max must be positive when hold_min_prompts is set, got %v", c.HoldMax)
	}
	if c.BlockWeight > 0 && c.BlockWindow <= 0 {
		bad("block_window must be positive when block_weight is set, got %v", c.BlockWindow)
	}
	if !(c.WaitGuardFactor == 0 || c.WaitGuardFactor >= 1) || math.IsInf(c.WaitGuardFactor, 0) {
		bad("wait_guard_factor must be 0 (off) or at least 1, got %v", c.WaitGuardFactor)
	}
	if !(c.OverdueFactor == 0 || c.OverdueFactor >= 1) || math.IsInf(c.OverdueFactor, 0) {
		bad("overdue_factor must be 0 (off) or at least 1, got %v", c.OverdueFactor)
	}
	if c.PrefillWeight == 0 && c.PendingWeight == 0 && c.LoadWeight == 0 && c.QueueWeight == 0 {
		errs = append(errs, errors.New("router: kvmesh: prefill_weight, pending_weight, load_weight and queue_weight are all 0"))
	}
	if !(c.KVUsageThreshold >= 0 && c.KVUsageThreshold < 1) {
		bad("kv_usage_threshold must be in [0, 1), got %v", c.KVUsageThreshold)
	}
	if !(c.LoadOverrideFactor >= 1) || math.IsInf(c.LoadOverrideFactor, 0) {
		bad("load_override_factor must be at least 1, got %v", c.LoadOverrideFactor)
	}
	if c.HotWindow < time.Millisecond {
		// Shorter, no two matches ever fall in one window: nothing is hot.
		bad("hot_window must be at least 1ms, got %v", c.HotWindow)
	}
	if c.SpreadMinReuse >= maxReuseRatio {
		// The reads per unit written are capped at maxReuseRatio: at or
		// past it the spread term could never act.
		bad("spread_min_reuse must be below %d (the reads per write are capped there; the spread term would never act), got %v", maxReuseRatio, c.SpreadMinReuse)
	}
	if c.HotMaxHolders < 1 {
		bad("hot_max_holders must be at least 1, got %d", c.HotMaxHolders)
	}
	if c.HotSlots < 1 || c.HotSlots > 1<<24 {
		bad("hot_slots must be in [1, 2^24], got %d", c.HotSlots)
	}
	if !(c.InitialPromptUnits > 0) || math.IsInf(c.InitialPromptUnits, 0) {
		bad("initial_prompt_units must be positive, got %v", c.InitialPromptUnits)
	}
	return errs
}
