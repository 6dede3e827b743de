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
//
// The simulated engines also say each request's engine TTFT in its answer
// (after the usage), so the split is made request by request too
// (outside), and a fleet of simulators in processes of their own, whose
// counters carry no sketch (the demo's), gets its engine TTFT from the
// answers (sampledEngineTTFT).

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

// sampledEngineTTFT is the engines' TTFT from the answers themselves
// (Sample.EngineTTFT), for a fleet whose counters carry no sketch: the
// simulators run as processes of their own (the demo's) and say each
// request's engine TTFT after its usage. Zero when no answer did (real
// engines).
func sampledEngineTTFT(samples []Sample) QuantileSummary {
	var v []float64
	for i := range samples {
		if s := &samples[i]; s.OK() && s.EngineTTFT > 0 {
			v = append(v, s.EngineTTFT.Seconds())
		}
	}
	l := summarizeLatency(v)
	return QuantileSummary{P50: l.P50, P90: l.P90, P99: l.P99, N: l.N}
}

// outside is, over the answered requests whose backend reported its own
// TTFT (Sample.EngineTTFT), the client's TTFT less the engine's and less
// the router's hold, in simulated seconds: the time a request spent
// neither in an engine's queue and prefill nor held by the router's late
// binding. N 0 when no backend reported one.
func outside(samples []Sample, scale float64) LatencySummary {
	var v []float64
	for i := range samples {
		s := &samples[i]
		if !s.OK() || s.EngineTTFT <= 0 || s.TTFT <= 0 {
			continue
		}
		v = append(v, (s.TTFT-s.Held).Seconds()*scale-s.EngineTTFT.Seconds())
	}
	return summarizeLatency(v)
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
	ew.printf("*Outside* is the difference of the medians. Engine quantiles are within 0.5%%. ")
	ew.printf("*Per request*: each request's client TTFT less its engine's TTFT and less the router's hold (late binding), ")
	ew.printf("median and p90: the router's own work, the HTTP hops and the waits for a CPU, without the engines' queues.\n\n")
	ew.printf("| arm | TTFT p50 s | engine TTFT p50 s | outside p50 s | per request p50 s | per request p90 s | TTFT p99 s | engine TTFT p99 s |\n")
	ew.printf("|---|---|---|---|---|---|---|---|\n")
	for _, a := range arms {
		ew.printf("| %s | %s | %s | %.3f | %s | %s | %s | %s |\n", a.Arm.Name, spreadNum(a.TTFTP50, 3), spreadNum(a.EngineTTFTP50, 3),
			a.TTFTP50.Median-a.EngineTTFTP50.Median, spreadNum(a.OutsideP50, 3), spreadNum(a.OutsideP90, 3),
			spreadNum(a.TTFTP99, 3), spreadNum(a.EngineTTFTP99, 3))
	}
	ew.printf("\n")
}
