package sim

// The scheduler follows vLLM V1's: each step has a token budget
// (MaxBatchedTokens). Running sequences are served first, in admission order,
// each with all the tokens it still has to compute (one for a decoding
// sequence, a prefill chunk otherwise) as far as the budget goes. If a
// running sequence needs a KV block and none can be freed, the most recently
// admitted sequence is preempted (its blocks released, recompute later) and
// goes back to the front of the waiting queue. Then, if nothing was
// preempted, waiting sequences are admitted in FIFO order while a slot, budget
// and blocks remain; the head of the queue blocks the rest (no skipping).
//
// At admission the prefix cache is consulted: the longest run of leading full
// blocks that are cached, limited to the first promptLen-1 tokens so that at
// least one token is computed (vLLM recomputes the last block of a fully
// cached prompt). The prefix-cache counters are updated at a request's first
// admission only: queries += prompt tokens, hits += cached tokens.
//
// Blocks become cache entries as soon as a step completes all their tokens,
// for prompt and generated tokens alike (vLLM caches full blocks as they are
// computed), so a concurrent or later request can share them.

// schedule builds the step plan and returns the step's simulated duration.
func (e *engine) schedule() float64 {
	B := e.cfg.BlockSize
	budget := e.cfg.MaxBatchedTokens
	prefillTokens, decodeSeqs := 0, 0
	e.plan = e.plan[:0]
	add := func(s *seq, n int) {
		e.plan = append(e.plan, planItem{s: s, n: n})
		budget -= n
		if n == 1 && s.generated > 0 && s.computed == len(s.tokens)-1 {
			decodeSeqs++
		} else {
			prefillTokens += n
		}
	}

	e.mu.Lock()
	preempted := false
	for i := 0; i < len(e.running) && budget > 0; i++ {
		s := e.running[i]
		n := min(len(s.tokens)-s.computed, budget)
		for s != nil && !e.grow(s, s.computed+n) {
			victim := e.running[len(e.running)-1]
			e.running[len(e.running)-1] = nil
			e.running = e.running[:len(e.running)-1]
			e.preempt(victim)
			preempted = true
			if victim == s {
				s = nil
			}
		}
		if s == nil {
			break
		}
		add(s, n)
	}
	if !preempted {
		for budget > 0 && len(e.running) < e.cfg.MaxRunning && e.waiting.len() > 0 {
			s := e.waiting.front()
			limit := (len(s.tokens) - 1) / B
			hitBlocks := e.pool.match(s.keys, limit)
			hit := hitBlocks * B
			n := min(len(s.tokens)-hit, budget)
			need := ceilDiv(hit+n, B) - hitBlocks
			avail := e.pool.available()
			for k := 0; k < hitBlocks; k++ {
				if id, _ := e.pool.lookup(s.keys[k]); e.pool.evictable(id) {
					avail-- // taking the hit removes it from the evictable set
				}
			}
			if need > avail {
				break
			}
			for k := 0; k < hitBlocks; k++ {
				id, _ := e.pool.lookup(s.keys[k])
				e.pool.acquire(id)
				s.blocks = append(s.blocks, id)
			}
			s.computed, s.registered = hit, hitBlocks
			e.grow(s, hit+n)
			if !s.admitted {
				s.admitted = true
				s.cached.Store(int64(hit))
				e.ctr.queries.Add(uint64(s.promptLen))
				e.ctr.hits.Add(uint64(hit))
				e.ctr.admitted.Add(1)
			}
			e.waiting.popFront()
			s.state = stateRunning
			e.running = append(e.running, s)
			add(s, n)
			e.log.Debug().Uint64("seq", s.id).Int("tokens", len(s.tokens)).Int("cached", hit).
				Int("chunk", n).Int("running", len(e.running)).Int("waiting", e.waiting.len()).Msg("admit")
		}
	}
	e.mu.Unlock()
	return e.stepFix + e.perTok*float64(prefillTokens) + e.perSeq*float64(decodeSeqs)
}

// grow gives s enough blocks to hold total tokens. It returns false, changing
// nothing, if the pool cannot supply them. The caller holds mu.
func (e *engine) grow(s *seq, total int) bool {
	need := ceilDiv(total, e.cfg.BlockSize) - len(s.blocks)
	if need <= 0 {
		return true
	}
	if need > e.pool.available() {
		return false
	}
	for ; need > 0; need-- {
		id, _ := e.pool.allocate()
		s.blocks = append(s.blocks, id)
	}
	return true
}

// preempt returns a running sequence to the front of the waiting queue,
// releasing its blocks; its full blocks stay cached, so recomputation usually
// hits them. The caller holds mu and has removed s from running.
func (e *engine) preempt(s *seq) {
	e.releaseBlocks(s)
	s.state = stateWaiting
	e.waiting.pushFront(s)
	e.ctr.preemptions.Add(1)
	e.log.Debug().Uint64("seq", s.id).Int("generated", s.generated).Msg("preempt: out of KV blocks")
}

// apply makes the planned step happen: computed tokens advance, full blocks
// become cache entries, sequences whose tokens are all computed sample one,
// and finished ones leave.
func (e *engine) apply() {
	B := e.cfg.BlockSize
	e.mu.Lock()
	for _, it := range e.plan {
		s := it.s
		s.computed += it.n
		for b := s.registered; b < s.computed/B; b++ {
			if b == len(s.keys) {
				parent := s.seed
				if b > 0 {
					parent = s.keys[b-1]
				}
				s.keys = append(s.keys, chainKey(parent, s.tokens[b*B:(b+1)*B]))
			}
			e.register(s, b)
		}
		s.registered = s.computed / B
		if s.computed < len(s.tokens) {
			continue // prefill chunk; more to come
		}
		if s.generated == 0 {
			e.hooks.ttft(e.v - s.arrivalV)
			s.ttftV.Store(max(int64((e.v-s.arrivalV)*1e9), 1))
			e.ctr.promptTokens.Add(uint64(s.promptLen))
		}
		s.tokens = append(s.tokens, fillerID(s.generated))
		s.generated++
		e.ctr.genTokens.Add(1)
		if e.streams(s) {
			s.progress.Store(int64(s.generated))
		}
	}

	j := 0
	for _, s := range e.running {
		if s.generated < s.maxOut {
			e.running[j] = s
			j++
			continue
		}
		e.releaseBlocks(s)
		e.ctr.success.Add(1)
		e.hooks.e2e(e.v - s.arrivalV)
		s.state = stateFinished
		e.ended = append(e.ended, s)
	}
	clear(e.running[j:])
	e.running = e.running[:j]
	e.mu.Unlock()
	e.flushKV()
	// Publish before anyone learns a sequence ended, so a reply's load
	// report no longer counts it.
	e.publish()
	for _, it := range e.plan {
		if it.s.generated > 0 && e.streams(it.s) {
			it.s.wake()
		}
	}
	for _, s := range e.ended {
		s.progress.Store(int64(s.generated)) // the rest, before done says it is final
		close(s.done)
	}
	clear(e.plan)
	e.plan = e.plan[:0]
	clear(e.ended)
	e.ended = e.ended[:0]
}

// streams says whether s's tokens so far go out now (Config.StreamInterval):
// its first token, then every StreamInterval-th. Its last tokens go out
// when it ends. Engine goroutine.
func (e *engine) streams(s *seq) bool {
	k := e.cfg.StreamInterval
	return k <= 1 || s.generated == 1 || s.generated%k == 0
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }
