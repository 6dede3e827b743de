package router

// holds says whether the kvmesh policy asks the router to hold a request
// whose best candidate is cands[best] (KVMeshConfig.HoldMinPrompts): its
// prefill there is long, and every candidate has prefill queued ahead of
// it. An engine prefills in arrival order, so a long prompt sent now
// delays every request sent to the same backend after it; held at the
// router, it lets shorter ones go first and takes the first backend whose
// queue empties rather than the one that looked shortest on arrival. Not
// while the backends answer that most of each prompt is cached
// (HoldMaxReuse).
func (cfg *KVMeshConfig) holds(req *Request, cands []Candidate, best int, total, avg float64) bool {
	c := &cands[best]
	if !cfg.LateBinds(req, total-c.TrustedUnits(req.Chain)-c.DoubtedWorth(req.Chain), avg) {
		return false
	}
	floor, spare := cfg.HoldFree(avg, len(cands))
	free := 0
	for i := range cands {
		l := &cands[i].Load
		if (l.PendingPrefill+l.PeerPendingPrefill)/cands[i].Weight <= floor {
			if free++; free > spare {
				return false
			}
		}
	}
	return true
}

// LateBinds says whether late binding would hold a request whose prefill
// at its best candidate is fresh, in the units of avg (the average
// prompt), were every queue busy: it is on, the backends' answers show
// little reuse (HoldMaxReuse), and fresh is within HoldMinPrompts and
// HoldMaxPrompts average prompts. A policy of its own (the benchmark's
// oracle) holds as kvmesh does with it and HoldFree.
func (cfg *KVMeshConfig) LateBinds(req *Request, fresh, avg float64) bool {
	if cfg.HoldMinPrompts <= 0 || cfg.HoldMaxReuse > 0 && req.reuse() > cfg.HoldMaxReuse {
		return false
	}
	return fresh >= cfg.HoldMinPrompts*avg && (cfg.HoldMaxPrompts <= 0 || fresh <= cfg.HoldMaxPrompts*avg)
}

// HoldFree is when late binding's queues are busy, of n candidates: a
// candidate with at most floor queued (per unit of weight, in avg's units)
// is free, and the request is held while at most spare are.
func (cfg *KVMeshConfig) HoldFree(avg float64, n int) (floor float64, spare int) {
	return cfg.HoldQueuePrompts * avg, int(cfg.HoldSpareShare * float64(n))
}
