package sim

import (
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
)

// engine is one simulated inference engine: a waiting queue, a running
// batch, a paged KV cache and a step loop on its own goroutine.
//
// Time. The engine keeps a simulated clock v (seconds). Each step advances v
// by the step's modelled cost; the loop then sleeps until the wall clock
// reaches start + v/TimeScale, but only once it is at least SleepGranularity
// ahead, so at high TimeScales one sleep covers many steps. When idle the
// clock jumps to the wall clock's simulated time. When the machine cannot keep
// up (TimeScale too high) v falls behind the wall clock; latencies in the
// metrics stay pure model time and the lag is exported as
// kvmesh_sim_engine_lag_seconds.
type engine struct {
	cfg     *Config
	log     zerolog.Logger
	stepFix float64 // Timing in seconds
	perTok  float64
	perSeq  float64
	start   time.Time
	hooks   engineHooks

	// mu guards pool against the oracle's concurrent reads; only the engine
	// goroutine writes.
	mu   sync.RWMutex
	pool *blockPool
	kv   *kvRecorder // KV-event publisher; nil when off (kvevents.go)

	// The inbox: what handlers hand to the engine between steps.
	inMu     sync.Mutex
	arrivals []*seq
	cancels  []*seq
	down     bool        // restarting: submissions are refused
	downGen  uint64      // identifies the restart whose timer may clear down
	upTimer  *time.Timer // ends the current simulated restart; stopped by shutdown
	closed   bool
	wakeCh   chan struct{}
	restartC chan restartReq
	quit     chan struct{}
	exited   chan struct{}
	stopOnce sync.Once

	// Owned by the engine goroutine.
	v        float64 // simulated clock, seconds since start
	running  []*seq
	waiting  seqQueue
	plan     []planItem
	ended    []*seq // finished in the current apply, told after publish
	spareArr []*seq
	spareCan []*seq
	timer    *time.Timer

	ctr   counters
	gauge gauges
}

// engineHooks receive per-request latencies (simulated seconds).
type engineHooks struct {
	ttft func(seconds float64)
	e2e  func(seconds float64)
}

// counters are cumulative and never reset, not even by a restart, so a
// harness summing them over a run loses nothing.
type counters struct {
	queries      atomic.Uint64 // vllm:prefix_cache_queries_total (tokens)
	hits         atomic.Uint64 // vllm:prefix_cache_hits_total (tokens)
	promptTokens atomic.Uint64 // vllm:prompt_tokens_total
	genTokens    atomic.Uint64 // vllm:generation_tokens_total
	success      atomic.Uint64 // vllm:request_success_total
	preemptions  atomic.Uint64 // vllm:num_preemptions_total
	admitted     atomic.Uint64 // requests scheduled at least once
	cancelled    atomic.Uint64
	dropped      atomic.Uint64 // failed by a restart or Close
	restarts     atomic.Uint64
	evictions    atomic.Uint64 // cached blocks evicted
	steps        atomic.Uint64 // engine steps run
	busyNanos    atomic.Uint64 // simulated time spent in steps
}

// gauges are snapshots published at every step boundary.
type gauges struct {
	running      atomic.Int64
	waiting      atomic.Int64
	kvUsageBits  atomic.Uint64 // float64 bits
	cachedBlocks atomic.Int64
	lagBits      atomic.Uint64 // float64 bits, real seconds behind the model
}

type planItem struct {
	s *seq
	n int // tokens computed for s in this step
}

func newEngine(cfg *Config, log zerolog.Logger, hooks engineHooks) *engine {
	e := &engine{
		cfg:      cfg,
		log:      log,
		stepFix:  cfg.Timing.StepOverhead.Seconds(),
		perTok:   cfg.Timing.PrefillPerToken.Seconds(),
		perSeq:   cfg.Timing.DecodePerSeq.Seconds(),
		start:    time.Now(),
		hooks:    hooks,
		pool:     newBlockPool(cfg.CacheBlocks),
		wakeCh:   make(chan struct{}, 1),
		restartC: make(chan restartReq, 1),
		quit:     make(chan struct{}),
		exited:   make(chan struct{}),
		timer:    time.NewTimer(time.Hour),
	}
	e.timer.Stop()
	e.publish()
	return e
}

// submit hands s to the engine. It fails while restarting or after close.
func (e *engine) submit(s *seq) error {
	e.inMu.Lock()
	switch {
	case e.closed:
		e.inMu.Unlock()
		return errClosed
	case e.down:
		e.inMu.Unlock()
		return errRestarting
	}
	e.arrivals = append(e.arrivals, s)
	e.inMu.Unlock()
	e.wake()
	return nil
}

// cancel asks the engine to drop s and free its blocks (client went away).
func (e *engine) cancel(s *seq) {
	e.inMu.Lock()
	if !e.closed {
		e.cancels = append(e.cancels, s)
	}
	e.inMu.Unlock()
	e.wake()
}

// restartReq asks the loop for a restart; ack is closed once it happened.
type restartReq struct {
	downtime time.Duration
	ack      chan struct{}
}

// restart drops every request, clears the cache and refuses submissions for
// downtime (simulated). It returns once the engine is down, or false if a
// restart is already pending or the engine is closed.
func (e *engine) restart(downtime time.Duration) bool {
	req := restartReq{downtime: downtime, ack: make(chan struct{})}
	select {
	case <-e.exited:
		return false
	case e.restartC <- req:
	default:
		return false
	}
	select {
	case <-req.ack:
		return true
	case <-e.exited:
		return false
	}
}

// isDown reports whether the engine is restarting.
func (e *engine) isDown() bool {
	e.inMu.Lock()
	defer e.inMu.Unlock()
	return e.down
}

// close stops the loop and fails every request still inside.
func (e *engine) close() {
	e.stopOnce.Do(func() {
		e.inMu.Lock()
		e.closed = true
		e.inMu.Unlock()
		close(e.quit)
	})
	<-e.exited
}

func (e *engine) wake() {
	select {
	case e.wakeCh <- struct{}{}:
	default:
	}
}

// simNow is the wall clock expressed in simulated seconds.
func (e *engine) simNow() float64 {
	return time.Since(e.start).Seconds() * e.cfg.TimeScale
}

// run is the engine loop; New starts it on its own goroutine.
func (e *engine) run() {
	defer close(e.exited)
	idle := true
	stepStart := 0.0
	for {
		if idle {
			e.v = math.Max(e.v, e.simNow())
			stepStart = e.v
		}
		e.drain(idle, stepStart)
		if len(e.running) == 0 && e.waiting.len() == 0 {
			e.publish()
			e.gauge.lagBits.Store(0) // idle: the clock catches up on wake-up
			idle = true
			select {
			case <-e.wakeCh:
			case req := <-e.restartC:
				e.doRestart(req)
			case <-e.quit:
				e.shutdown()
				return
			}
			continue
		}
		idle = false
		dt := e.schedule()
		e.publish()
		stepStart = e.v
		e.v += dt
		e.ctr.steps.Add(1)
		e.ctr.busyNanos.Add(uint64(dt * 1e9))
		switch e.sleepUntil(e.v) {
		case sleepRestart:
			idle = true
			continue
		case sleepQuit:
			e.shutdown()
			return
		}
		e.apply()
	}
}

type sleepResult uint8

const (
	sleptOK sleepResult = iota
	sleepRestart
	sleepQuit
)

// sleepUntil waits until the wall clock reaches simulated time v. A restart
// or close interrupts the wait (the step in flight is abandoned).
func (e *engine) sleepUntil(v float64) sleepResult {
	target := e.start.Add(time.Duration(v / e.cfg.TimeScale * 1e9))
	ahead := time.Until(target)
	if ahead < 0 {
		e.gauge.lagBits.Store(math.Float64bits(-ahead.Seconds()))
	} else {
		e.gauge.lagBits.Store(0)
	}
	if ahead < e.cfg.SleepGranularity || ahead <= 0 {
		// Still give restart and close a chance between busy steps.
		select {
		case req := <-e.restartC:
			e.doRestart(req)
			return sleepRestart
		case <-e.quit:
			return sleepQuit
		default:
			return sleptOK
		}
	}
	e.timer.Reset(ahead)
	select {
	case <-e.timer.C:
		return sleptOK
	case req := <-e.restartC:
		e.timer.Stop()
		e.doRestart(req)
		return sleepRestart
	case <-e.quit:
		e.timer.Stop()
		return sleepQuit
	}
}

// drain moves new arrivals into the waiting queue and applies cancels.
// An arrival on an idle engine starts at the current simulated time; one that
// came in during a step is placed inside that step's interval.
func (e *engine) drain(idle bool, stepStart float64) {
	e.inMu.Lock()
	arr, can := e.arrivals, e.cancels
	e.arrivals, e.cancels = e.spareArr[:0], e.spareCan[:0]
	e.inMu.Unlock()

	for _, s := range arr {
		a := e.v
		if !idle {
			a = math.Min(math.Max(s.arrivalReal.Sub(e.start).Seconds()*e.cfg.TimeScale, stepStart), e.v)
		}
		s.arrivalV = a - s.extraV
		s.state = stateWaiting
		e.waiting.pushBack(s)
	}
	if len(can) > 0 {
		e.mu.Lock()
		for _, s := range can {
			e.drop(s, stateDropped, errCancelled)
		}
		e.mu.Unlock()
	}
	clear(arr)
	clear(can)
	e.spareArr, e.spareCan = arr[:0], can[:0]
}

// drop removes s wherever it is, frees its blocks and ends it with err.
// The caller holds mu.
func (e *engine) drop(s *seq, state seqState, err error) {
	switch s.state {
	case stateWaiting:
		e.waiting.remove(s)
	case stateRunning:
		for i, r := range e.running {
			if r == s {
				copy(e.running[i:], e.running[i+1:])
				e.running[len(e.running)-1] = nil
				e.running = e.running[:len(e.running)-1]
				break
			}
		}
		e.releaseBlocks(s)
	case stateNew:
	default:
		return // already ended
	}
	if err == errCancelled {
		e.ctr.cancelled.Add(1)
		e.log.Debug().Uint64("seq", s.id).Int("generated", s.generated).Msg("cancelled; blocks freed")
	} else {
		e.ctr.dropped.Add(1)
	}
	s.end(state, err)
}

// releaseBlocks frees s's blocks, last block first so that a prefix's tail is
// evicted before its head (as vLLM does). The caller holds mu.
func (e *engine) releaseBlocks(s *seq) {
	for i := len(s.blocks) - 1; i >= 0; i-- {
		e.pool.release(s.blocks[i])
	}
	s.blocks = s.blocks[:0]
	s.computed = 0
	s.registered = 0
}

// doRestart fails everything, empties the cache and refuses work for the
// downtime.
func (e *engine) doRestart(req restartReq) {
	defer close(req.ack)
	downtime := req.downtime
	e.inMu.Lock()
	e.down = true
	e.downGen++
	gen := e.downGen
	pending := e.arrivals
	e.arrivals = nil
	e.cancels = e.cancels[:0]
	e.inMu.Unlock()

	e.failAll(pending, errRestarted)
	e.ctr.restarts.Add(1)
	e.publish()
	e.log.Info().Dur("downtime_sim", downtime).Msg("simulated restart: requests dropped, cache cleared")
	t := time.AfterFunc(e.cfg.realDuration(downtime), func() {
		e.inMu.Lock()
		current := e.downGen == gen
		if current {
			e.down = false
		}
		e.inMu.Unlock()
		if current {
			e.log.Info().Msg("simulated restart finished; serving with a cold cache")
		}
	})
	e.inMu.Lock()
	if e.upTimer != nil {
		e.upTimer.Stop()
	}
	e.upTimer = t
	e.inMu.Unlock()
}

// shutdown fails everything on Close.
func (e *engine) shutdown() {
	e.inMu.Lock()
	pending := e.arrivals
	e.arrivals = nil
	if e.upTimer != nil {
		e.upTimer.Stop() // a restart in progress ends with the engine
		e.upTimer = nil
	}
	e.downGen++
	e.inMu.Unlock()
	e.failAll(pending, errClosed)
	e.publish()
}

// failAll ends every running, waiting and pending sequence with err and
// resets the cache.
func (e *engine) failAll(pending []*seq, err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	all := append(append(append([]*seq(nil), e.running...), e.waiting.drain()...), pending...)
	for _, s := range all {
		// Out of the queues already, and the pool reset below frees every
		// block, so drop only has to count and end it.
		if s.state == stateWaiting || s.state == stateRunning {
			s.state = stateNew
		}
		s.blocks = nil
		e.drop(s, stateDropped, err)
	}
	clear(e.running)
	e.running = e.running[:0]
	e.pool.reset()
	e.mu.Unlock()
	e.clearedKV()
	e.mu.Lock()
}

// publish stores the load gauges for readers on other goroutines.
func (e *engine) publish() {
	e.mu.RLock()
	usage, cached, ev := e.pool.usage(), e.pool.cachedBlocks(), e.pool.evictions
	e.mu.RUnlock()
	e.gauge.running.Store(int64(len(e.running)))
	e.gauge.waiting.Store(int64(e.waiting.len()))
	e.gauge.kvUsageBits.Store(math.Float64bits(usage))
	e.gauge.cachedBlocks.Store(int64(cached))
	e.ctr.evictions.Store(ev)
}

// load returns the last published running, waiting and KV usage.
func (e *engine) load() (running, waiting int, kvUsage float64) {
	return int(e.gauge.running.Load()), int(e.gauge.waiting.Load()), math.Float64frombits(e.gauge.kvUsageBits.Load())
}

// lag returns how many real seconds the engine is behind its model clock.
func (e *engine) lag() float64 { return math.Float64frombits(e.gauge.lagBits.Load()) }

// matchKeys is matchTokens for block keys computed already.
func (e *engine) matchKeys(keys []uint64) int {
	e.mu.RLock()
	defer e.mu.RUnlock()
	for i, k := range keys {
		if _, ok := e.pool.lookup(k); !ok {
			return i * e.cfg.BlockSize
		}
	}
	return len(keys) * e.cfg.BlockSize
}

// matchTokens reports how many leading tokens of a prompt the engine would
// serve from the cache if it scheduled it now: the longest run of cached
// leading full blocks within the first len(toks)-1 tokens. It hashes block by
// block and stops at the first miss, and touches neither LRU order nor
// counters.
func (e *engine) matchTokens(seed uint64, toks []uint32) int {
	B := e.cfg.BlockSize
	limit := (len(toks) - 1) / B
	parent := seed
	e.mu.RLock()
	defer e.mu.RUnlock()
	for i := 0; i < limit; i++ {
		parent = chainKey(parent, toks[i*B:(i+1)*B])
		if _, ok := e.pool.lookup(parent); !ok {
			return i * B
		}
	}
	return max(limit, 0) * B
}
