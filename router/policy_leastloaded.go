package router

import "sync/atomic"

// leastLoadedPolicy picks the candidate with the fewest in-flight
// requests, then the shortest waiting queue (weighted by the signal's
// freshness); remaining ties go round-robin. The baseline a cache-aware
// policy must beat (FIELD-NOTES: "least-loaded is a baseline"). Scores are
// in-flight + waiting.
type leastLoadedPolicy struct{ next atomic.Uint64 }

func (p *leastLoadedPolicy) Name() string { return PolicyLeastLoaded }

// Choose implements Policy.
func (p *leastLoadedPolicy) Choose(req *Request, cands []Candidate, scores []float64) Decision {
	var turn uint64
	if req.Explain {
		turn = p.next.Load()
	} else {
		turn = p.next.Add(1) - 1
	}
	n := len(cands)
	start := int(turn % uint64(n))
	best := -1
	var bestFlight int
	var bestWait float64
	for k := 0; k < n; k++ {
		i := (start + k) % n
		l := &cands[i].Load
		wait := l.SignalWeight * l.Waiting
		scores[i] = float64(l.InFlight) + wait
		if best < 0 || l.InFlight < bestFlight || (l.InFlight == bestFlight && wait < bestWait) {
			best, bestFlight, bestWait = i, l.InFlight, wait
		}
	}
	return Decision{Index: best, Reason: ReasonLeastLoaded, Learn: true}
}
