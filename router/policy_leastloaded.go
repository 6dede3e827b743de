package router

import "sync/atomic"

// leastLoadedPolicy picks the candidate with the fewest in-flight
// requests, then the shortest waiting queue (weighted by the signal's
// freshness); remaining ties take turns. The baseline a cache-aware policy
// must beat (FIELD-NOTES: "least-loaded is a baseline"). Scores are
// in-flight + waiting.
type leastLoadedPolicy struct{ next atomic.Uint64 }

func (p *leastLoadedPolicy) Name() string { return PolicyLeastLoaded }

// Choose implements Policy.
func (p *leastLoadedPolicy) Choose(req *Request, cands []Candidate, scores []float64) Decision {
	best, ties := 0, 0
	for i := range cands {
		l := &cands[i].Load
		scores[i] = float64(l.InFlight) + l.SignalWeight*l.Waiting
		switch b := &cands[best].Load; {
		case i == 0 || l.InFlight < b.InFlight || (l.InFlight == b.InFlight && l.SignalWeight*l.Waiting < b.SignalWeight*b.Waiting):
			best, ties = i, 1
		case l.InFlight == b.InFlight && l.SignalWeight*l.Waiting == b.SignalWeight*b.Waiting:
			ties++
		}
	}
	if ties > 1 {
		var turn uint64
		if req.Explain {
			turn = p.next.Load()
		} else {
			turn = p.next.Add(1) - 1
		}
		k := int(turn % uint64(ties))
		lo := &cands[best].Load
		for i := best; i < len(cands); i++ {
			l := &cands[i].Load
			if l.InFlight == lo.InFlight && l.SignalWeight*l.Waiting == lo.SignalWeight*lo.Waiting {
				if k == 0 {
					best = i
					break
				}
				k--
			}
		}
	}
	return Decision{Index: best, Reason: ReasonLeastLoaded, Learn: true}
}
