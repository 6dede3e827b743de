package sim

import (
	"testing"
	"time"
)

// Engine tests drive the step loop by hand (manual.step), so simulated
// durations and step counts are exact and nothing depends on wall-clock time.

func TestRepeatedPromptHitsAllButLastBlock(t *testing.T) {
	for _, n := range []int{40, 48, 49, 15, 16, 17} { // 16-token blocks
		m := newManual(t, nil)
		toks := seqTokens("p", n)
		m.add(t, toks, 1, 7)
		m.runUntilIdle(t)
		s := m.add(t, toks, 1, 7)
		m.runUntilIdle(t)
		want := (n - 1) / 16 * 16
		if got := int(s.cached.Load()); got != want {
			t.Errorf("prompt of %d: second request cached %d tokens, want %d", n, got, want)
		}
		if q, h := m.ctr.queries.Load(), m.ctr.hits.Load(); q != uint64(2*n) || h != uint64(want) {
			t.Errorf("prompt of %d: queries %d hits %d, want %d and %d", n, q, h, 2*n, want)
		}
	}
}

func TestSharedPrefixHitsExactlyItsFullBlocks(t *testing.T) {
	m := newManual(t, nil)
	shared := seqTokens("sys", 70) // 4 full blocks + 6 tokens
	m.add(t, concat(shared, seqTokens("q1-", 30)), 1, 7)
	m.runUntilIdle(t)
	s := m.add(t, concat(shared, seqTokens("q2-", 30)), 1, 7)
	m.runUntilIdle(t)
	if got := s.cached.Load(); got != 64 {
		t.Fatalf("cached %d tokens, want 64 (the shared prefix's full blocks)", got)
	}
}

func TestSeedIsolatesCaches(t *testing.T) {
	m := newManual(t, nil)
	toks := seqTokens("p", 64)
	m.add(t, toks, 1, 1)
	m.runUntilIdle(t)
	other := m.add(t, toks, 1, 2) // another salt or model
	m.runUntilIdle(t)
	same := m.add(t, toks, 1, 1)
	m.runUntilIdle(t)
	if other.cached.Load() != 0 || same.cached.Load() != 48 {
		t.Fatalf("cached: other seed %d (want 0), same seed %d (want 48)", other.cached.Load(), same.cached.Load())
	}
}

func TestDecodeBlocksAreCached(t *testing.T) {
	// A reply sent back as the next turn hits the blocks cached while
	// decoding: prompt (32) + 40 generated tokens, 39 of them computed.
	m := newManual(t, nil)
	prompt := seqTokens("p", 32)
	m.add(t, prompt, 40, 1)
	m.runUntilIdle(t)
	next := prompt
	for i := 0; i < 40; i++ {
		next = append(next, fillerID(i))
	}
	next = append(next, seqTokens("turn2-", 10)...)
	if got := m.matchTokens(1, next); got != 64 {
		t.Fatalf("next turn matches %d tokens, want 64 (71 computed tokens = 4 full blocks)", got)
	}
}

func TestLRUEvictionProtectsReferencedBlocks(t *testing.T) {
	m := newManual(t, func(c *Config) { c.BlockSize = 4; c.CacheBlocks = 10 })
	a, b := seqTokens("a", 12), seqTokens("b", 12)
	m.add(t, a, 1, 1)
	m.runUntilIdle(t)
	m.add(t, b, 1, 1)
	m.runUntilIdle(t)
	// Both prompts cached: 6 evictable blocks, 4 free.
	if m.pool.cachedBlocks() != 6 || m.pool.inUse != 0 {
		t.Fatalf("cached %d in use %d, want 6 and 0", m.pool.cachedBlocks(), m.pool.inUse)
	}
	// Touch a again: its first two blocks become most recently used.
	m.add(t, a, 1, 1)
	m.runUntilIdle(t)

	// A long-running sequence takes the 4 free blocks (prompt 16) and grows
	// to 9 blocks while it decodes.
	d := m.add(t, seqTokens("d", 16), 20, 1)
	m.step()
	if d.state != stateRunning {
		t.Fatal("d should be running")
	}
	dKeys := append([]uint64(nil), d.keys...)
	// d's next block and e's 3 blocks must come from evictions: the least
	// recently used go first (a's unreused tail, then b's blocks).
	e := m.add(t, seqTokens("e", 9), 1, 1)
	m.step()
	if e.state != stateRunning && e.state != stateFinished {
		t.Fatalf("e state %v, want admitted", e.state)
	}
	if got := m.matchTokens(1, b); got != 0 {
		t.Fatalf("b still matches %d tokens; its blocks are the least recently used and should be gone", got)
	}
	if got := m.matchTokens(1, a); got != 8 {
		t.Fatalf("a matches %d tokens, want 8: recently used blocks must survive", got)
	}
	// d's blocks are referenced: never evicted while it runs.
	for i, k := range dKeys {
		if _, ok := m.pool.lookup(k); !ok {
			t.Fatalf("running sequence's block %d was evicted", i)
		}
	}
	// A request that needs more blocks than are evictable waits.
	f := m.add(t, seqTokens("f", 24), 1, 1)
	m.step()
	if f.state != stateWaiting || m.gauge.waiting.Load() != 1 {
		t.Fatalf("f state %v waiting gauge %d: should wait for blocks", f.state, m.gauge.waiting.Load())
	}
	m.runUntilIdle(t)
	if f.state != stateFinished || d.state != stateFinished {
		t.Fatal("everything should finish once d releases its blocks")
	}
	if m.pool.inUse != 0 || m.pool.available() != 10 {
		t.Fatalf("after idle: in use %d available %d", m.pool.inUse, m.pool.available())
	}
}

func TestSchedulerQueueing(t *testing.T) {
	m := newManual(t, func(c *Config) { c.MaxRunning = 2 })
	s1 := m.add(t, seqTokens("a", 20), 5, 1)
	s2 := m.add(t, seqTokens("b", 20), 5, 1)
	s3 := m.add(t, seqTokens("c", 20), 5, 1)
	m.step()
	if r, w, kv := m.load(); r != 2 || w != 1 || kv != 4.0/4096 {
		t.Fatalf("running %d waiting %d kv %v, want 2, 1 and 4 blocks of 4096", r, w, kv)
	}
	if s3.state != stateWaiting || s1.state != stateRunning || s2.state != stateRunning {
		t.Fatal("FIFO: the first two should run, the third wait")
	}
	for s1.state != stateFinished {
		m.step()
	}
	if s3.state != stateWaiting {
		t.Fatal("s3 must not run before a slot frees")
	}
	m.step()
	if s3.state != stateRunning {
		t.Fatalf("s3 state %v after a slot freed, want running", s3.state)
	}
	m.runUntilIdle(t)
	if r, w, kv := m.load(); r != 0 || w != 0 || kv != 0 {
		t.Fatalf("idle load %d/%d/%v", r, w, kv)
	}
}

func TestPrefillTimeGrowsWithUncachedTokens(t *testing.T) {
	m := newManual(t, nil)
	tm := m.cfg.Timing
	ttft := func(toks []uint32) float64 {
		t.Helper()
		n := len(m.ttfts)
		m.add(t, toks, 1, 1)
		m.runUntilIdle(t)
		return m.ttfts[n]
	}
	long := seqTokens("long", 4000)
	cold := ttft(long)
	short := ttft(seqTokens("short", 100))
	warm := ttft(long)
	want := func(tokens int) float64 {
		return tm.StepOverhead.Seconds() + float64(tokens)*tm.PrefillPerToken.Seconds()
	}
	if !approx(cold, want(4000)) || !approx(short, want(100)) || !approx(warm, want(4000-3984)) {
		t.Fatalf("TTFT cold %v short %v warm %v; want %v %v %v", cold, short, warm, want(4000), want(100), want(16))
	}
	if !(cold > short && short > warm) {
		t.Fatal("TTFT must grow with uncached tokens")
	}
}

func TestChunkedPrefillAndSharedSteps(t *testing.T) {
	m := newManual(t, func(c *Config) { c.MaxBatchedTokens = 4096 })
	tm := m.cfg.Timing
	// 10,000 tokens in chunks of 4,096: three steps before the first token.
	m.add(t, seqTokens("x", 10000), 1, 1)
	if steps := m.runUntilIdle(t); steps != 3 {
		t.Fatalf("%d steps, want 3", steps)
	}
	if want := 3*tm.StepOverhead.Seconds() + 10000*tm.PrefillPerToken.Seconds(); !approx(m.ttfts[0], want) {
		t.Fatalf("TTFT %v, want %v", m.ttfts[0], want)
	}
	// Two 1,500-token prompts arriving together share one step, so each
	// waits for both.
	m.add(t, seqTokens("y", 1500), 1, 1)
	m.add(t, seqTokens("z", 1500), 1, 1)
	m.runUntilIdle(t)
	want := tm.StepOverhead.Seconds() + 3000*tm.PrefillPerToken.Seconds()
	if !approx(m.ttfts[1], want) || !approx(m.ttfts[2], want) {
		t.Fatalf("concurrent TTFTs %v %v, want %v each", m.ttfts[1], m.ttfts[2], want)
	}
}

func TestDecodeStepCostGrowsWithBatch(t *testing.T) {
	m := newManual(t, nil)
	tm := m.cfg.Timing
	for i := 0; i < 10; i++ {
		m.add(t, seqTokens(string(rune('a'+i)), 8), 20, 1)
	}
	m.step() // prefill all ten
	before := m.v
	m.step() // one decode step for ten sequences
	want := tm.StepOverhead.Seconds() + 10*tm.DecodePerSeq.Seconds()
	if got := m.v - before; !approx(got, want) {
		t.Fatalf("decode step %v, want %v", got, want)
	}
}

func TestPreemptionRecomputesAndFinishes(t *testing.T) {
	// 8 blocks of 4 tokens; two sequences that each grow to 7 blocks cannot
	// both fit, so the newer one is preempted and later recomputed.
	m := newManual(t, func(c *Config) { c.BlockSize = 4; c.CacheBlocks = 8 })
	s1 := m.add(t, seqTokens("a", 8), 20, 1)
	s2 := m.add(t, seqTokens("b", 8), 20, 1)
	m.runUntilIdle(t)
	if m.ctr.preemptions.Load() == 0 {
		t.Fatal("expected a preemption")
	}
	for _, s := range []*seq{s1, s2} {
		if s.state != stateFinished || s.progress.Load() != 20 || s.generated != 20 {
			t.Fatalf("seq %d: state %v, %d tokens, want finished with 20", s.id, s.state, s.progress.Load())
		}
	}
	if m.ctr.queries.Load() != 16 || m.ctr.success.Load() != 2 || m.ctr.genTokens.Load() != 40 {
		t.Fatalf("counters: queries %d success %d gen %d", m.ctr.queries.Load(), m.ctr.success.Load(), m.ctr.genTokens.Load())
	}
	if m.pool.inUse != 0 {
		t.Fatalf("%d blocks still in use", m.pool.inUse)
	}
}

func TestCancelFreesSequence(t *testing.T) {
	m := newManual(t, nil)
	s := m.add(t, seqTokens("a", 100), 1000, 1)
	w := m.add(t, seqTokens("b", 10), 1000, 1)
	m.step()
	if m.pool.inUse == 0 {
		t.Fatal("running sequences should hold blocks")
	}
	m.cancel(s)
	m.cancel(w)
	m.step()
	if !s.finished() || s.err != errCancelled || !w.finished() {
		t.Fatal("cancelled sequences should end with errCancelled")
	}
	if r, wt, kv := m.load(); r != 0 || wt != 0 || kv != 0 || m.pool.inUse != 0 {
		t.Fatalf("after cancel: running %d waiting %d kv %v in use %d", r, wt, kv, m.pool.inUse)
	}
	if m.ctr.cancelled.Load() != 2 {
		t.Fatalf("cancelled counter %d", m.ctr.cancelled.Load())
	}
	// The computed prompt blocks stay cached for later requests.
	if m.matchTokens(1, seqTokens("a", 100)) != 96 {
		t.Fatal("a cancelled request's computed blocks should stay cached")
	}
}

func TestEngineLoopRealTime(t *testing.T) {
	// The real loop: a restart fails everything in flight and empties the
	// cache; the engine comes back after the downtime.
	cfg := testConfig()
	e := newEngine(&cfg, cfg.Logger, engineHooks{ttft: func(float64) {}, e2e: func(float64) {}})
	go e.run()
	defer e.close()
	req := request{tokens: seqTokens("a", 64), seed: 1}
	s := newSeq(1, &req, 1, 16)
	if err := e.submit(s); err != nil {
		t.Fatal(err)
	}
	<-s.done
	if s.err != nil || e.gauge.cachedBlocks.Load() != 4 {
		t.Fatalf("err %v cached blocks %d", s.err, e.gauge.cachedBlocks.Load())
	}
	req2 := request{tokens: seqTokens("b", 64), seed: 1}
	long := newSeq(2, &req2, 60000, 16)
	if err := e.submit(long); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "long request to start", func() bool { return long.progress.Load() > 0 })
	if !e.restart(100 * time.Second) {
		t.Fatal("restart refused")
	}
	<-long.done
	if long.err != errRestarted || !e.isDown() || e.gauge.cachedBlocks.Load() != 0 {
		t.Fatalf("after restart: err %v down %v cached %d", long.err, e.isDown(), e.gauge.cachedBlocks.Load())
	}
	if err := e.submit(newSeq(3, &request{tokens: seqTokens("c", 4)}, 1, 16)); err != errRestarting {
		t.Fatalf("submit while down: %v", err)
	}
	waitFor(t, "restart to finish", func() bool { return !e.isDown() })
	if e.matchTokens(1, req.tokens) != 0 {
		t.Fatal("cache must be cold after a restart")
	}
}
