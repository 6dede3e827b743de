package bench

import "time"

// Late binding in a run: the kvmesh policy holds a long prompt at the
// router while every backend is busy (router.KVMeshConfig.HoldMinPrompts)
// and decides it when a queue frees, for hold_max at most. How many
// requests it held, how long, and how many waited the whole hold_max
// (decided then wherever they went) say whether it worked as meant: on
// Mooncake at 3x the 8-node mesh's held requests ran out hold_max about
// four times as often as one router's (129 against 33 in one run;
// docs/bench/HISTORY.md, stop 73).

// HeldSummary is late binding's figures in one run, from the requests'
// x-kvmesh-route held_ms. N is the requests held (0: none; the rest is
// then 0 too).
type HeldSummary struct {
	N int `json:"n"`
	// Share is N over the run's requests.
	Share float64 `json:"share"`
	// P50 and P90 are how long the held requests waited (simulated s).
	P50 float64 `json:"p50_s"`
	P90 float64 `json:"p90_s"`
	// RanOut is the share of the held requests held for the whole
	// hold_max.
	RanOut float64 `json:"ran_out_share"`
}

// heldSummary computes a run's HeldSummary: scale converts wall time to
// simulated time; holdMax is the routers' hold_max (wall time, as the
// routers ran it; 0: RanOut is not counted). held_ms is whole
// milliseconds, so a hold within 1 ms of holdMax ran out.
func heldSummary(samples []Sample, scale float64, holdMax time.Duration) HeldSummary {
	var held []float64
	ranOut := 0
	for i := range samples {
		h := samples[i].Held
		if h <= 0 {
			continue
		}
		held = append(held, h.Seconds()*scale)
		if holdMax > 0 && h+time.Millisecond >= holdMax {
			ranOut++
		}
	}
	if len(held) == 0 {
		return HeldSummary{}
	}
	q := summarizeLatency(held)
	return HeldSummary{N: q.N, Share: float64(q.N) / float64(len(samples)),
		P50: q.P50, P90: q.P90, RanOut: float64(ranOut) / float64(q.N)}
}

// HeldSpread is an arm's HeldSummary over its repeats, of the runs that
// held anything.
type HeldSpread struct {
	Share  Spread `json:"share"`
	P50    Spread `json:"p50_s"`
	P90    Spread `json:"p90_s"`
	RanOut Spread `json:"ran_out_share"`
}

// heldSpreads summarises runs' HeldSummary; nil when none held anything.
func heldSpreads(runs []*RunResult) *HeldSpread {
	var share, p50, p90, out []float64
	for _, r := range runs {
		if r.Held.N == 0 {
			continue
		}
		share = append(share, r.Held.Share)
		p50 = append(p50, r.Held.P50)
		p90 = append(p90, r.Held.P90)
		out = append(out, r.Held.RanOut)
	}
	if len(share) == 0 {
		return nil
	}
	return &HeldSpread{Share: SpreadOf(share), P50: SpreadOf(p50), P90: SpreadOf(p90), RanOut: SpreadOf(out)}
}

// writeHeld writes late binding's table for the arms that held requests.
func writeHeld(ew *errWriter, r *Report) {
	arms := armsWhere(r, func(a *ArmSummary) bool { return a.Held != nil })
	if len(arms) == 0 {
		return
	}
	ew.printf("Late binding: the share of requests the router held before deciding (a long prompt while every backend ")
	ew.printf("was busy), how long they waited (median and p90, simulated s), and the share of the held that waited the ")
	ew.printf("whole `hold_max` and were then decided wherever they went.\n\n")
	ew.printf("| arm | held | hold p50 s | hold p90 s | ran out hold_max |\n|---|---|---|---|---|\n")
	for _, a := range arms {
		h := a.Held
		ew.printf("| %s | %s | %s | %s | %s |\n", a.Arm.Name, spreadPct(h.Share), spreadNum(h.P50, 3), spreadNum(h.P90, 3), spreadPct(h.RanOut))
	}
	ew.printf("\n")
}
