package router

import "math/rand/v2"

// randomPolicy picks a candidate uniformly at random, what a plain
// Kubernetes Service does. Scores are 1 for the chosen candidate.
type randomPolicy struct{}

func (randomPolicy) Name() string { return PolicyRandom }

// Choose implements Policy.
func (randomPolicy) Choose(_ *Request, cands []Candidate, scores []float64) Decision {
	i := rand.IntN(len(cands))
	clear(scores)
	scores[i] = 1
	return Decision{Index: i, Reason: ReasonRandom, Learn: true}
}
