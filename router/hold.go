package router

import (
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Late binding of long prompts (KVMeshConfig.HoldMinPrompts): a request the
// policy holds (Decision.Hold) is sent nowhere yet. It waits here until a
// booking ends at some backend (an answer's first byte: that engine's
// queue got shorter) and is decided again with the loads of that moment.
// Held requests decide again in the order they were first held: a booking
// that ends wakes the oldest only, and the next oldest when that one is
// sent, so that a long prompt is not passed over by those held after it.
//
// A request is held for KVMeshConfig.HoldMax at most; then it is decided
// without the option to hold. (Holding it no longer than its best queue
// would have taken to drain, at the rate of the answers' first bytes, gave
// up much of the gain: docs/bench/HISTORY.md, "Late binding".) Bookings
// this node's peers report change without a local event, so the oldest
// also decides again every holdPollShare of HoldMax. A wake-up only ever
// goes to the oldest, so a woken request is the oldest when it decides.

// holdPollShare is the share of HoldMax after which the oldest held
// request decides again without a local booking having ended.
const holdPollShare = 1.0 / 16

// holdGate keeps the held requests in order and wakes them. open is called
// at every release and costs an atomic add and an atomic load while
// nobody is held.
type holdGate struct {
	gen     atomic.Uint64 // bookings ended so far
	waiting atomic.Int64  // requests held now
	mu      sync.Mutex
	held    []*holdWaiter // oldest first
}

// holdWaiter is one held request. wake holds at most one pending wake-up.
type holdWaiter struct {
	wake chan struct{}
}

// enter registers a held request that last decided when the gate's count
// of ended bookings was seen (one ended since wakes it at once, if it is
// the oldest). It must leave.
func (g *holdGate) enter(seen uint64) *holdWaiter {
	w := &holdWaiter{wake: make(chan struct{}, 1)}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.held = append(g.held, w)
	g.waiting.Add(1)
	if len(g.held) == 1 && g.gen.Load() != seen {
		w.signal()
	}
	return w
}

// leave unregisters w; when it was the oldest, the next oldest is woken
// to decide (the booking that woke w may leave room for more).
func (g *holdGate) leave(w *holdWaiter) {
	g.mu.Lock()
	defer g.mu.Unlock()
	i := slices.Index(g.held, w)
	if i < 0 {
		return
	}
	g.held = slices.Delete(g.held, i, i+1)
	g.waiting.Add(-1)
	if i == 0 && len(g.held) > 0 {
		g.held[0].signal()
	}
}

// first says whether w is the oldest request held now.
func (g *holdGate) first(w *holdWaiter) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.held) > 0 && g.held[0] == w
}

// open counts a booking that ended and wakes the oldest held request.
func (g *holdGate) open() {
	g.gen.Add(1)
	if g.waiting.Load() == 0 {
		return
	}
	g.mu.Lock()
	if len(g.held) > 0 {
		g.held[0].signal()
	}
	g.mu.Unlock()
}

func (w *holdWaiter) signal() {
	select {
	case w.wake <- struct{}{}:
	default: // a wake-up is pending already
	}
}

// holdMetrics: kvmesh_router_held_requests_total and
// kvmesh_router_hold_seconds.
type holdMetrics struct {
	held prometheus.Counter
	wait prometheus.Observer
}

func newHoldMetrics(reg prometheus.Registerer) (*holdMetrics, error) {
	held := prometheus.NewCounter(prometheus.CounterOpts{Name: "kvmesh_router_held_requests_total",
		Help: "Requests the policy held at the router before deciding (kvmesh.hold_min_prompts: a long prompt while every backend had prefill queued)."})
	wait := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "kvmesh_router_hold_seconds",
		Help:    "How long held requests waited at the router before they were decided (kvmesh.hold_max bounds it).",
		Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 14)})
	return &holdMetrics{held: held, wait: wait}, registerAll(reg, held, wait)
}

// lateBinding says whether the router offers its policy to hold requests
// (kvmesh.hold_min_prompts and hold_max set).
func (rt *Router) lateBinding() bool {
	return rt.cfg.KVMesh.HoldMinPrompts > 0 && rt.cfg.KVMesh.HoldMax > 0
}

// decideHolding is decideAdmitted for a request's first attempt, holding it
// while the policy asks to. It returns the decision and the status already
// answered (as decideAdmitted, or 499 when the client left while held, 503
// when no backend was left), and sets st.heldFor to how long the request
// was held.
func (rt *Router) decideHolding(w http.ResponseWriter, r *http.Request, st *reqState, ep Endpoint, now time.Time) (Decision, int) {
	limit := rt.cfg.KVMesh.HoldMax
	poll := time.Duration(float64(limit) * holdPollShare)
	st.holdOK = rt.lateBinding()
	defer func() { st.holdOK = false }() // a retry or a shadow decision is not held
	var since time.Time
	var hw *holdWaiter // nil: not held
	held := func() {
		if hw != nil {
			rt.holdGate.leave(hw)
			st.heldFor = rt.now().Sub(since)
			rt.hold.wait.Observe(st.heldFor.Seconds())
		}
	}
	for {
		seen := rt.holdGate.gen.Load() // a booking that ends after this wakes it
		d, status := rt.decideAdmitted(w, r, st, ep, now, 0)
		if status != 0 || !d.Hold {
			held()
			return d, status
		}
		if hw == nil {
			since, hw = now, rt.holdGate.enter(seen)
			rt.hold.held.Inc()
		}
		if !rt.holdTurn(r, hw, since, limit, poll) {
			held()
			rt.metrics.errors[errClientCanceled].Inc()
			return Decision{}, 499
		}
		now = rt.now()
		st.held++
		if now.Sub(since) >= limit {
			st.holdOK = false // decided now, wherever it goes
		}
		rt.lookup(st, now)
		if !rt.gather(st, st.model, now) || len(st.cands) == 0 {
			held()
			return Decision{}, rt.fail(w, errNoBackend, NewAPIError(http.StatusServiceUnavailable, "",
				"no backend in rotation serves model %q (each is ejected, drained or being removed); try again shortly", st.model))
		}
	}
}

// holdTurn waits until the held request w may decide again: it is the
// oldest held and a booking ended (or, for peers' bookings, poll passed),
// or its hold ran out (limit from since). It reports false when the client
// left.
func (rt *Router) holdTurn(r *http.Request, w *holdWaiter, since time.Time, limit, poll time.Duration) bool {
	g := &rt.holdGate
	for {
		left := limit - rt.now().Sub(since)
		if left <= 0 {
			return true
		}
		first := g.first(w)
		if first {
			left = min(left, poll)
		}
		t := time.NewTimer(left)
		woken := false
		select {
		case <-w.wake:
			woken = true
		case <-t.C:
		case <-r.Context().Done():
		}
		t.Stop()
		if r.Context().Err() != nil {
			return false
		}
		if woken || first || rt.now().Sub(since) >= limit {
			return true
		}
	}
}
