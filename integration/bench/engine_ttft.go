package bench

import "github.com/kvmesh/kvmesh/integration/sim"

// The engines' own time to first token.
//
// A run's TTFT is the client's: from the moment the load generator sent a
// request to its first token, in wall time times the time scale. It holds
// the router's work, two HTTP hops and any wait for a CPU, each multiplied
// by the time scale: at time scale 10 a millisecond the process spent
// elsewhere is 10 ms of TTFT. The simulated engines measure their own, in
// simulated time from the request's arrival at the engine (its queue and
// its prefill: what routing decides), and the difference between the two
// is the time spent outside the engines. When a multi-node arm is slower
// than one node by the client's measure but not by the engines', the
// difference is the harness (eight routers sharing the benchmark's
// cores), not where the requests went.

// QuantileSummary is a latency distribution known by its quantiles only.
type QuantileSummary struct {
	P50 float64 `json:"p50"`
	P90 float64 `json:"p90"`
	P99 float64 `json:"p99"`
	N   int     `json:"n"`
}

// engineTTFT merges the backends' engine TTFT sketches; zero (N 0) when
// none has one (an ExternalFleet: a vLLM histogram's buckets are too
// coarse for a median).
func engineTTFT(counters []BackendCounters) QuantileSummary {
	var all sim.LatencySketch
	for _, c := range counters {
		if c.TTFT != nil {
			all.Add(c.TTFT)
		}
	}
	n := all.N()
	if n == 0 {
		return QuantileSummary{}
	}
	return QuantileSummary{P50: all.Quantile(0.5), P90: all.Quantile(0.9), P99: all.Quantile(0.99), N: int(n)}
}

// writeEngineTTFT writes each arm's TTFT as the client and as the engines
// measured it.
func writeEngineTTFT(ew *errWriter, r *Report) {
	arms := armsWhere(r, func(a *ArmSummary) bool { return a.EngineTTFTP50.N > 0 })
	if len(arms) == 0 {
		return
	}
	ew.printf("Where the time to first token goes: *engine* TTFT is the simulated engines' own measure, from a request's ")
	ew.printf("arrival at the engine to its first token (its queue and its prefill, which routing decides); the client's ")
	ew.printf("also holds the router, two HTTP hops and any wait for a CPU, each multiplied by the time scale. ")
	ew.printf("*Outside* is the difference of the medians. Engine quantiles are within 0.5%%.\n\n")
	ew.printf("| arm | TTFT p50 s | engine TTFT p50 s | outside p50 s | TTFT p99 s | engine TTFT p99 s |\n|---|---|---|---|---|---|\n")
	for _, a := range arms {
		ew.printf("| %s | %s | %s | %.3f | %s | %s |\n", a.Arm.Name, spreadNum(a.TTFTP50, 3), spreadNum(a.EngineTTFTP50, 3),
			a.TTFTP50.Median-a.EngineTTFTP50.Median, spreadNum(a.TTFTP99, 3), spreadNum(a.EngineTTFTP99, 3))
	}
	ew.printf("\n")
}
