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
	if cfg.HoldMinPrompts <= 0 || cfg.HoldMaxReuse > 0 && req.reuse() > cfg.HoldMaxReuse {
		return false
	}
	c := &cands[best]
	fresh := total - c.TrustedUnits(req.Chain) - c.DoubtedWorth(req.Chain)
	if fresh < cfg.HoldMinPrompts*avg || cfg.HoldMaxPrompts > 0 && fresh > cfg.HoldMaxPrompts*avg {
		return false
	}
	floor := cfg.HoldQueuePrompts * avg
	spare := int(cfg.HoldSpareShare * float64(len(cands)))
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
