package router

// waitGuard is the kvmesh policy's guard for the request's own first token
// (KVMeshConfig.WaitGuardFactor): the cost prices the blocks a request
// would write elsewhere at CacheWeight+PrefillWeight per unit, so a holder
// with seconds of prefill queued can still be cheaper than an idle backend
// that would compute the whole prompt in a fraction of that. The guard
// compares what each candidate would make the request wait for, in prompt
// units: the load ahead of it there (loads, as the cost prices it) plus
// what it would compute there. When the chosen backend's exceeds the
// quickest other candidate's by more than WaitGuardFloor average prompts
// and WaitGuardFactor times over, it returns that candidate; else -1.
// Off (factor 0) it returns -1.
func (cfg *KVMeshConfig) waitGuard(req *Request, cands []Candidate, loads []float64, best int, total, avg float64) int {
	if cfg.WaitGuardFactor <= 0 || len(cands) < 2 {
		return -1
	}
	wait := func(i int) float64 { return loads[i] + max(total-cands[i].SavedUnits(req.Chain), 0) }
	alt, altWait := -1, 0.0
	for i := range cands {
		if i == best {
			continue
		}
		if w := wait(i); alt < 0 || w < altWait {
			alt, altWait = i, w
		}
	}
	bestWait := wait(best)
	if alt < 0 || bestWait-altWait <= cfg.WaitGuardFloor*avg || bestWait <= cfg.WaitGuardFactor*altWait {
		return -1
	}
	return alt
}
