package bench

import (
	"sort"
	"time"

	"github.com/kvmesh/kvmesh/integration/workload"
)

// RunResult is one arm's run against one fresh fleet. Latencies and rates
// are in simulated time.
type RunResult struct {
	Arm      string `json:"arm"`
	Repeat   int    `json:"repeat"`   // 0-based
	Position int    `json:"position"` // 0-based place in its repeat's order

	Requests   int            `json:"requests"`
	OK         int            `json:"ok"`
	Errors     int            `json:"errors"`
	ErrorKinds map[string]int `json:"error_kinds,omitempty"`

	// HitRate is the fleet's token hit rate: the sum over backends of
	// prefix-cache hits over the sum of queries, from their own counters.
	HitRate float64 `json:"hit_rate"`
	Queries uint64  `json:"prefix_cache_queries"`
	Hits    uint64  `json:"prefix_cache_hits"`
	// ClientCachedTokens sums usage.prompt_tokens_details.cached_tokens as
	// the clients saw it: a cross-check of Hits, not a figure.
	ClientCachedTokens int64 `json:"client_cached_tokens"`

	TTFT LatencySummary `json:"ttft_s"`
	// EngineTTFT is the engines' own time to first token, from arrival at
	// the engine (engine_ttft.go); N 0 when the fleet does not measure it.
	EngineTTFT QuantileSummary `json:"engine_ttft_s,omitzero"`
	// Outside is, request by request, the client's TTFT less the engine's
	// own and less the router's hold: the router's work, the HTTP hops and
	// any wait for a CPU (simulated s; engine_ttft.go). N 0 when the
	// backends do not report their TTFT per request.
	Outside LatencySummary `json:"outside_s,omitzero"`
	// BySize is the TTFT and cached share of each fifth of the answered
	// requests by prompt length (bysize.go).
	BySize []SizeClass    `json:"by_size,omitempty"`
	E2E    LatencySummary `json:"e2e_s"`
	// Late summarises how much later than scheduled requests were sent
	// (open loop), in simulated seconds.
	Late LatencySummary `json:"late_s"`

	WallSeconds        float64 `json:"wall_seconds"`
	SimSeconds         float64 `json:"sim_seconds"`
	RequestsPerSec     float64 `json:"requests_per_s"`
	OutputTokensPerSec float64 `json:"output_tokens_per_s"`

	// WorkCV is the coefficient of variation of the prompt tokens each
	// backend computed (queries - hits); RequestsCV of the requests each
	// admitted.
	WorkCV     float64 `json:"work_cv"`
	RequestsCV float64 `json:"requests_cv"`

	Backends  []BackendCounters  `json:"backends"`
	Decisions map[string]float64 `json:"decisions,omitempty"` // router decisions by reason
	// Beliefs is the first router node's cache model of each backend at
	// the end of the run (router.BeliefJSON; empty for arms without one):
	// the capacity it learned and what it counted as written, to set
	// against the backend's own counters.
	Beliefs []BackendBelief `json:"beliefs,omitempty"`
	// MaxEngineLag is the largest lag (real seconds) of any engine behind its
	// model clock: above a few tens of ms the machine was too slow for the
	// time scale.
	MaxEngineLag float64 `json:"max_engine_lag_s"`
	// CappedRequests waited for the open loop's in-flight cap;
	// DispatchLateP99 is the 99th percentile of how late (wall seconds) the
	// other requests were sent: the load generator's own delay.
	CappedRequests  int     `json:"capped_requests"`
	DispatchLateP99 float64 `json:"dispatch_late_p99_wall_s"`
	// Invalid says why the run is not trusted ("" when it is): the machine
	// fell behind (see Config.MaxLag).
	Invalid string `json:"invalid,omitempty"`
	// Attempt is 0 for a first run, n for the n-th rerun of an untrusted one.
	Attempt int `json:"attempt,omitempty"`
	// Precision is the share of the requests routed for a prefix the
	// router believed the backend held (reason prefix, matched > 0) that
	// the backend confirmed: its cached_tokens reached at least half the
	// tokens the router believed matched, over PrecisionRoutes such
	// routes. 0 when there were none (PrecisionRoutes 0: not measured,
	// as against a measured 0).
	Precision       float64 `json:"precision,omitempty"`
	PrecisionRoutes int     `json:"precision_routes,omitempty"`
	// DoubtPrecision is the same share over the routes made on a claim the
	// router doubted (reason doubt: past the edge of the backend's cache).
	DoubtPrecision float64 `json:"doubt_precision,omitempty"`
	DoubtRoutes    int     `json:"doubt_routes,omitempty"`
	// Reach is the share of the tokens the best-placed backend held when
	// each request was sent (the simulator's real caches) that the request
	// reused; RegretTokens the tokens per request that some backend held
	// but the request recomputed; ReachRequests the answered requests they
	// are over. All 0 when not measured (ReachRequests 0 tells that from
	// a measured 0).
	Reach         float64 `json:"reach,omitempty"`
	RegretTokens  float64 `json:"regret_tokens_per_request,omitempty"`
	ReachRequests int     `json:"reach_requests,omitempty"`
	// Moved is the share of a conversation's follow-up requests sent to
	// another backend than its previous one; MoveRegret the share of the
	// prompt tokens those moves recomputed while some backend held them
	// (0 when not measured: measured with Reach, so ReachRequests says).
	// See moves.go.
	Moved      float64 `json:"moved_share"`
	MoveRegret float64 `json:"move_regret_share,omitempty"`
	// Agreement is, for a multi-node arm, the share of requests the nodes
	// sent where one router seeing all the traffic (shadowRouter) would
	// have, of those not held by late binding (see agreement); 0 for one
	// node.
	Agreement float64 `json:"agreement,omitempty"`
	// LoadBytesPerRequestPeer is the load channel's cost: bytes the nodes
	// sent on it per request they routed, per peer (mesh arms).
	LoadBytesPerRequestPeer float64 `json:"load_bytes_per_request_peer,omitempty"`
	// Held is late binding's figures (held.go).
	Held HeldSummary `json:"held,omitzero"`
	// OracleMisses counts oracle decisions made without the body.
	OracleMisses uint64 `json:"oracle_misses,omitempty"`

	Samples []Sample `json:"samples,omitempty"`
	// Counters are the router nodes' counters and gauges at the end of the
	// run, summed over the nodes (deployment.counters), kept with the
	// samples (Config.KeepSamples).
	Counters map[string]float64 `json:"counters,omitempty"`
}

// ArmSummary is an arm's figures over its repeats: median and spread.
type ArmSummary struct {
	Arm     Arm    `json:"arm"`
	HitRate Spread `json:"hit_rate"`
	TTFTP50 Spread `json:"ttft_p50_s"`
	TTFTP90 Spread `json:"ttft_p90_s"`
	TTFTP99 Spread `json:"ttft_p99_s"`
	// EngineTTFTP50 and EngineTTFTP99: RunResult.EngineTTFT's, over the
	// runs that measured it.
	EngineTTFTP50 Spread `json:"engine_ttft_p50_s,omitzero"`
	EngineTTFTP99 Spread `json:"engine_ttft_p99_s,omitzero"`
	// OutsideP50 and OutsideP90: RunResult.Outside's, over the runs that
	// measured it.
	OutsideP50         Spread `json:"outside_p50_s,omitzero"`
	OutsideP90         Spread `json:"outside_p90_s,omitzero"`
	E2EP50             Spread `json:"e2e_p50_s"`
	E2EP99             Spread `json:"e2e_p99_s"`
	RequestsPerSec     Spread `json:"requests_per_s"`
	OutputTokensPerSec Spread `json:"output_tokens_per_s"`
	WorkCV             Spread `json:"work_cv"`
	RequestsCV         Spread `json:"requests_cv"`
	Errors             Spread `json:"errors"`
	// Agreement and LoadBytesPerRequestPeer: see RunResult (multi-node arms).
	Agreement               Spread `json:"agreement,omitzero"`
	Precision               Spread `json:"precision,omitzero"`
	DoubtPrecision          Spread `json:"doubt_precision,omitzero"`
	Reach                   Spread `json:"reach,omitzero"`
	RegretTokens            Spread `json:"regret_tokens_per_request,omitzero"`
	Moved                   Spread `json:"moved_share,omitzero"`
	MoveRegret              Spread `json:"move_regret_share,omitzero"`
	LoadBytesPerRequestPeer Spread `json:"load_bytes_per_request_peer,omitzero"`
	// BySize: RunResult.BySize's classes over the repeats (bysize.go).
	BySize []SizeSpread `json:"by_size,omitempty"`
	// Held: RunResult.Held over the repeats that held anything; nil when
	// none did (held.go).
	Held *HeldSpread `json:"held,omitempty"`
}

// WorkloadInfo describes the replayed workload and how it compares with the
// fleet's capacity.
type WorkloadInfo struct {
	Name            string  `json:"name"`
	Requests        int     `json:"requests"`
	PromptTokens    int64   `json:"prompt_tokens"`
	OutputTokens    int64   `json:"output_tokens"`
	MaxPromptTokens int     `json:"max_prompt_tokens"`
	SpanSeconds     float64 `json:"span_s"` // simulated
	Conversations   int     `json:"conversations"`
	Groups          int     `json:"groups"`
	// Bound is the infinite-cache hit rate of the replayed prompts at the
	// backends' block size (Workload.PrefixCacheBound): what a single
	// backend with unlimited KV cache would hit. WorkingSetBlocks is the
	// number of distinct blocks it stores.
	Bound            float64 `json:"bound"`
	BoundBlockTokens int     `json:"bound_block_tokens"`
	WorkingSetBlocks int     `json:"working_set_blocks"`
	// TraceBound is the trace's own bound at its 512-token granularity
	// (Mooncake only; 0 otherwise).
	TraceBound float64 `json:"trace_bound,omitempty"`
	// FleetBlocks is the fleet's total KV capacity in blocks, and
	// CapacityRatio FleetBlocks / WorkingSetBlocks: below 1 the fleet cannot
	// hold the working set, and routing decides what stays cached.
	FleetBlocks   int     `json:"fleet_blocks"`
	CapacityRatio float64 `json:"capacity_ratio"`
}

// DescribeWorkload fills a WorkloadInfo for w on a fleet of fleetBlocks
// blocks of blockTokens tokens. It computes the infinite-cache bound, which
// takes about a second per 10M prompt tokens.
func DescribeWorkload(w *workload.Workload, blockTokens, fleetBlocks int) WorkloadInfo {
	b := w.PrefixCacheBound(blockTokens)
	info := WorkloadInfo{
		Name:             w.Name,
		Requests:         len(w.Requests),
		PromptTokens:     w.PromptTokens,
		OutputTokens:     w.OutputTokens,
		MaxPromptTokens:  w.MaxPromptTokens,
		SpanSeconds:      w.Span.Seconds(),
		Conversations:    w.Conversations,
		Groups:           w.Groups,
		Bound:            b.HitRate(),
		BoundBlockTokens: b.BlockTokens,
		WorkingSetBlocks: b.UniqueBlocks,
		FleetBlocks:      fleetBlocks,
	}
	if b.UniqueBlocks > 0 {
		info.CapacityRatio = float64(fleetBlocks) / float64(b.UniqueBlocks)
	}
	if w.Trace != nil {
		info.TraceBound = w.Trace.Bound.HitRate()
	}
	return info
}

// Setup records how the experiment ran.
type Setup struct {
	Backends         int     `json:"backends"`
	CacheBlocks      int     `json:"cache_blocks_per_backend"`
	BlockTokens      int     `json:"block_tokens"`
	TimeScale        float64 `json:"time_scale"`
	Mode             Mode    `json:"mode"`
	Concurrency      int     `json:"concurrency"`
	Repeats          int     `json:"repeats"`
	ScaleRouterTimes bool    `json:"scale_router_times"`
	// StreamInterval is the backends' tokens per streamed event after the
	// first (sim.Config.StreamInterval; 0 in reports from before it, which
	// streamed every token).
	StreamInterval int    `json:"stream_interval,omitempty"`
	Notes          string `json:"notes,omitempty"`
}

// Report is a whole experiment: what ran, every run, and the summaries.
type Report struct {
	Title    string       `json:"title"`
	Command  string       `json:"command"`
	Revision string       `json:"revision,omitempty"` // the code measured (VCS revision of the binary)
	Started  time.Time    `json:"started"`
	Elapsed  float64      `json:"elapsed_s"` // wall
	Workload WorkloadInfo `json:"workload"`
	Setup    Setup        `json:"setup"`
	Arms     []ArmSummary `json:"arms"`
	Runs     []RunResult  `json:"runs"`
	// Discarded are untrusted runs that were run again (kept for the record;
	// not in the summaries).
	Discarded []RunResult `json:"discarded,omitempty"`
}

// Summarize computes each arm's summary from runs, in arms' order.
func Summarize(arms []Arm, runs []RunResult) []ArmSummary {
	out := make([]ArmSummary, 0, len(arms))
	for _, a := range arms {
		var hit, t50, t90, t99, g50, g99, o50, o90, e50, e99, rps, tps, wcv, rcv, errs, agree, lbytes, prec, dprec, rch, rgt, mv, mvr []float64
		var mine []*RunResult
		for i := range runs {
			r := &runs[i]
			if r.Arm != a.Name {
				continue
			}
			mine = append(mine, r)
			hit = append(hit, r.HitRate)
			// A run in which no request was answered has no latency: its
			// empty summary (all 0) would read as the fastest run of all.
			if r.TTFT.N > 0 {
				t50 = append(t50, r.TTFT.P50)
				t90 = append(t90, r.TTFT.P90)
				t99 = append(t99, r.TTFT.P99)
			}
			if r.EngineTTFT.N > 0 {
				g50 = append(g50, r.EngineTTFT.P50)
				g99 = append(g99, r.EngineTTFT.P99)
			}
			if r.Outside.N > 0 {
				o50 = append(o50, r.Outside.P50)
				o90 = append(o90, r.Outside.P90)
			}
			if r.E2E.N > 0 {
				e50 = append(e50, r.E2E.P50)
				e99 = append(e99, r.E2E.P99)
			}
			rps = append(rps, r.RequestsPerSec)
			tps = append(tps, r.OutputTokensPerSec)
			wcv = append(wcv, r.WorkCV)
			rcv = append(rcv, r.RequestsCV)
			errs = append(errs, float64(r.Errors))
			mv = append(mv, r.Moved)
			// Whether a figure was measured is its count, never the figure:
			// a run whose precision or reach was 0 belongs in the spread.
			if r.PrecisionRoutes > 0 {
				prec = append(prec, r.Precision)
			}
			if r.DoubtRoutes > 0 {
				dprec = append(dprec, r.DoubtPrecision)
			}
			if r.ReachRequests > 0 {
				rch = append(rch, r.Reach)
				rgt = append(rgt, r.RegretTokens)
				mvr = append(mvr, r.MoveRegret)
			}
			if a.Nodes > 1 {
				agree = append(agree, r.Agreement)
				if r.LoadBytesPerRequestPeer > 0 {
					lbytes = append(lbytes, r.LoadBytesPerRequestPeer)
				}
			}
		}
		out = append(out, ArmSummary{
			Arm: a, HitRate: SpreadOf(hit),
			TTFTP50: SpreadOf(t50), TTFTP90: SpreadOf(t90), TTFTP99: SpreadOf(t99),
			EngineTTFTP50: SpreadOf(g50), EngineTTFTP99: SpreadOf(g99),
			OutsideP50: SpreadOf(o50), OutsideP90: SpreadOf(o90),
			E2EP50: SpreadOf(e50), E2EP99: SpreadOf(e99),
			RequestsPerSec: SpreadOf(rps), OutputTokensPerSec: SpreadOf(tps),
			WorkCV: SpreadOf(wcv), RequestsCV: SpreadOf(rcv), Errors: SpreadOf(errs),
			Agreement: SpreadOf(agree), LoadBytesPerRequestPeer: SpreadOf(lbytes), Precision: SpreadOf(prec),
			DoubtPrecision: SpreadOf(dprec),
			Reach:          SpreadOf(rch), RegretTokens: SpreadOf(rgt),
			Moved: SpreadOf(mv), MoveRegret: SpreadOf(mvr),
			BySize: sizeSpreads(mine), Held: heldSpreads(mine),
		})
	}
	return out
}

// Find returns the summary of the arm named name, or nil.
func (r *Report) Find(name string) *ArmSummary {
	for i := range r.Arms {
		if r.Arms[i].Arm.Name == name {
			return &r.Arms[i]
		}
	}
	return nil
}

// sortedKeys returns m's keys in order (for stable output).
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
