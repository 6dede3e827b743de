package bench

// Moves: how often an arm sent a conversation's next request to another
// backend than its previous one, and what those moves recomputed that a
// backend held. A router that keeps each conversation where its context is
// reuses it; one that moves a conversation writes its whole context again
// elsewhere, which is worth it only when the holder's cache could not keep
// it (a crowded, thrashing holder) or its queue would delay the request
// more than the prefill costs. On the agent workload this is where kvmesh
// and sglang_cache_aware differ most: sglang never moves a session, kvmesh
// moves a few percent of steps, off holders that crowd.

// moveStats is what sessionMoves measures over one run's samples.
type moveStats struct {
	// Moved is the share of follow-up requests (a conversation's requests
	// after its first answered one) that went to another backend than the
	// conversation's previous request.
	Moved float64
	// Regret is the share of the run's prompt tokens that moved requests
	// recomputed while some backend held them (Sample.Available, from the
	// simulated backends' caches; 0 when not measured): the part of the
	// run's regret (RunResult.RegretTokens) that moves caused.
	Regret float64
}

// sessionMoves measures moves over samples (indexed by request), given
// each request's conversation. Requests are taken in workload order, which
// is each conversation's turn order.
func sessionMoves(samples []Sample, conversation func(i int) int) moveStats {
	prev := make(map[int]string)
	var follow, moved int
	var prompt, regret float64
	for i := range samples {
		s := &samples[i]
		if !s.OK() || s.Backend == "" {
			continue
		}
		prompt += float64(s.PromptTokens)
		c := conversation(s.Index)
		if b, ok := prev[c]; ok {
			follow++
			if b != s.Backend {
				moved++
				if s.Available > s.CachedTokens {
					regret += float64(s.Available - s.CachedTokens)
				}
			}
		}
		prev[c] = s.Backend
	}
	var st moveStats
	if follow > 0 {
		st.Moved = float64(moved) / float64(follow)
	}
	if prompt > 0 {
		st.Regret = regret / prompt
	}
	return st
}
