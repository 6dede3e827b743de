package router

import "sync/atomic"

// roundRobinPolicy takes the candidates in turn. A baseline: it spreads
// requests evenly and ignores both prefixes and load. Scores are 1 for the
// chosen candidate, 0 for the others.
type roundRobinPolicy struct{ next atomic.Uint64 }

func (p *roundRobinPolicy) Name() string { return PolicyRoundRobin }

// Choose implements Policy.
func (p *roundRobinPolicy) Choose(req *Request, cands []Candidate, scores []float64) Decision {
	var turn uint64
	if req.Explain {
		turn = p.next.Load()
	} else {
		turn = p.next.Add(1) - 1
	}
	i := int(turn % uint64(len(cands)))
	clear(scores)
	scores[i] = 1
	return Decision{Index: i, Reason: ReasonRoundRobin, Learn: true}
}
