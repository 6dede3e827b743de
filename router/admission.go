package router

import (
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// AdmissionConfig bounds how much work a node takes on at once (admission
// control). A request past a cap waits in a bounded queue, in FIFO order
// within its tenant and round-robin across tenants, for at most
// QueueTimeout; a full queue or a wait that times out is answered 429 with
// Retry-After. Both caps are off by default: nothing waits and nothing is
// refused unless an operator sets one.
type AdmissionConfig struct {
	// MaxInFlight caps the requests this node works on at once (routed and
	// forwarded; from before the body is read until the answer's last
	// byte). 0, the default, is no cap: a router cannot know what its fleet
	// can take, the engines queue what they cannot run yet, and a cap set
	// without measuring turns working traffic into 429s. Set it to protect
	// the node (memory, goroutines) or to move queueing from the engines to
	// the router, where a request still goes to the best backend free when
	// its turn comes.
	MaxInFlight int `yaml:"max_in_flight"`
	// MaxInFlightPerBackend caps the attempts this node has outstanding at
	// one backend, scaled by the backend's weight (at least 1). A backend at
	// its cap is no candidate; when every backend serving a request's model
	// is at its cap, the request waits for the first that frees a slot. 0,
	// the default, is no cap, for the reason above; vLLM runs 256 sequences
	// at once by default (max_num_seqs), so 256 divided by the number of
	// router nodes keeps each engine's own queue empty.
	MaxInFlightPerBackend int `yaml:"max_in_flight_per_backend"`
	// MaxQueued bounds the requests waiting for either cap, together; past
	// it a request is answered 429 at once, unless its tenant has at least
	// two fewer waiting than the tenant with the most, whose newest waiter then gives
	// up its place (one tenant cannot fill the queue). 0 refuses at once
	// what a cap does not admit. 1,024: a few seconds of a busy node's
	// arrivals, each waiter a goroutine and a connection (a request waiting
	// for the node's cap has not had its body read yet).
	MaxQueued int `yaml:"max_queued"`
	// QueueTimeout bounds each wait; then the request is answered 429. 30 s
	// absorbs a burst several completions long, and answers a client before
	// the usual 60 s gateway and client timeouts would give up on it.
	QueueTimeout time.Duration `yaml:"queue_timeout"`
	// RetryAfter is the Retry-After of a 429, rounded up to whole seconds:
	// OpenAI's clients wait that long before trying again. 1 s: a queue
	// that overflowed moves on within a completion or two.
	RetryAfter time.Duration `yaml:"retry_after"`
}

// DefaultAdmissionConfig returns the defaults documented on each field:
// no caps, so admission changes nothing.
func DefaultAdmissionConfig() AdmissionConfig {
	return AdmissionConfig{MaxQueued: 1024, QueueTimeout: 30 * time.Second, RetryAfter: time.Second}
}

func (c *AdmissionConfig) validate() []error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("router: admission: "+format, args...))
	}
	if c.MaxInFlight < 0 {
		bad("max_in_flight must not be negative (0: no cap), got %d", c.MaxInFlight)
	}
	if c.MaxInFlightPerBackend < 0 {
		bad("max_in_flight_per_backend must not be negative (0: no cap), got %d", c.MaxInFlightPerBackend)
	}
	if c.MaxQueued < 0 {
		bad("max_queued must not be negative (0: refuse at once past a cap), got %d", c.MaxQueued)
	}
	if c.QueueTimeout <= 0 {
		bad("queue_timeout must be positive, got %v", c.QueueTimeout)
	}
	if c.RetryAfter <= 0 {
		bad("retry_after must be positive, got %v", c.RetryAfter)
	}
	return errs
}

// admStage is where a request waits: for the node's cap (before its body
// is read) or for a backend's (after the decision).
type admStage uint8

const (
	stageNode admStage = iota
	stageBackend
	numAdmStages
)

var admStageNames = [numAdmStages]string{"node", "backend"}

// admReason is why a request was refused.
type admReason uint8

const (
	rejectQueueFull admReason = iota // the queue was full
	rejectTimeout                    // it waited QueueTimeout
	rejectDisplaced                  // a tenant with fewer waiting took its place
	numAdmReasons
)

var admReasonNames = [numAdmReasons]string{"queue_full", "timeout", "displaced"}

// slotCount is a capped count of slots in use, taken without a lock.
type slotCount struct {
	used  atomic.Int64
	limit atomic.Int64 // a backend's: its cap, kept by hasRoom
}

func (s *slotCount) tryTake(limit int64) bool {
	for {
		u := s.used.Load()
		if u >= limit {
			return false
		}
		if s.used.CompareAndSwap(u, u+1) {
			return true
		}
	}
}

// admission is the router's admission control. With no cap configured it
// is never consulted beyond one comparison. With caps, a request that finds
// room takes its slot with one compare-and-swap; the lock is taken only to
// wait, to leave while others wait, or to hand a slot to a waiter.
type admission struct {
	cfg        AdmissionConfig
	nodeCap    int64     // 0: no node cap
	perBackend int64     // MaxInFlightPerBackend; 0: no backend caps
	node       slotCount // node slots in use (counted only with a node cap)
	// back is each backend slot's count (backends.go keeps a name's slot
	// for the router's life), grown under mu as slots appear.
	back       atomic.Pointer[[]*slotCount]
	retryAfter []string // the Retry-After value (shared, never modified)
	now        func() time.Time
	// after starts a wait's timer (tests replace it to fire timeouts at will).
	after func(time.Duration) (<-chan time.Time, func() bool)

	mu                       sync.Mutex
	nodeQ, backQ             fairQueue
	nodeWaiting, backWaiting atomic.Int64 // nodeQ.n and backQ.n, readable without mu

	queued   [numAdmStages]prometheus.Counter
	rejected [numAdmStages][numAdmReasons]prometheus.Counter
	wait     [numAdmStages]prometheus.Observer
}

func realAfter(d time.Duration) (<-chan time.Time, func() bool) {
	t := time.NewTimer(d)
	return t.C, t.Stop
}

// newAdmission builds the admission control and registers its metrics
// (kvmesh_router_admission_*) with reg, if not nil.
func newAdmission(cfg AdmissionConfig, now func() time.Time, reg prometheus.Registerer) (*admission, error) {
	a := &admission{cfg: cfg, nodeCap: int64(cfg.MaxInFlight), perBackend: int64(cfg.MaxInFlightPerBackend), now: now, after: realAfter}
	a.back.Store(new([]*slotCount))
	a.retryAfter = []string{strconv.Itoa(max(1, int(math.Ceil(cfg.RetryAfter.Seconds()))))}

	const ns, sub = "kvmesh", "router"
	queued := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "admission_queued_total",
		Help: "Requests that found the node's cap (stage node) or every backend serving their model at its cap (stage backend) and waited in the admission queue."}, []string{"stage"})
	rejected := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "admission_rejected_total",
		Help: "Requests answered 429 by admission control, by reason: queue_full (no room to wait), timeout (waited queue_timeout), displaced (gave its place to a tenant with fewer waiting)."}, []string{"stage", "reason"})
	wait := prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub, Name: "admission_wait_seconds",
		Help:    "Time requests spent in the admission queue, whatever the outcome (requests that found room at once are not counted).",
		Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 14)}, []string{"stage"})
	waiting := prometheus.NewDesc("kvmesh_router_admission_waiting_requests",
		"Requests waiting in the admission queue now.", []string{"stage"}, nil)
	for s := admStage(0); s < numAdmStages; s++ {
		a.queued[s] = queued.WithLabelValues(admStageNames[s])
		a.wait[s] = wait.WithLabelValues(admStageNames[s])
		for r := admReason(0); r < numAdmReasons; r++ {
			a.rejected[s][r] = rejected.WithLabelValues(admStageNames[s], admReasonNames[r])
		}
	}
	if reg == nil {
		return a, nil
	}
	inFlight := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "admission_in_flight_requests",
		Help: "Requests holding one of the node's admission slots (max_in_flight; 0 without a node cap)."},
		func() float64 { return float64(a.node.used.Load()) })
	for _, c := range []prometheus.Collector{queued, rejected, wait, inFlight, &waitingCollector{a: a, desc: waiting}} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return a, nil
}

// waitingCollector reports the queues' lengths at scrape time.
type waitingCollector struct {
	a    *admission
	desc *prometheus.Desc
}

func (c *waitingCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *waitingCollector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(c.a.nodeWaiting.Load()), admStageNames[stageNode])
	ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(c.a.backWaiting.Load()), admStageNames[stageBackend])
}

// ---- the node's cap ----

// enterNode takes one of the node's slots for r, waiting for one if
// needed. It returns 0 when r may go on (the caller must leaveNode when it
// is done) or the status it answered (429, or 499 when the client left).
// Only called with a node cap.
func (rt *Router) enterNode(w http.ResponseWriter, r *http.Request) int {
	a := rt.adm
	if a.nodeWaiting.Load() == 0 && a.node.tryTake(a.nodeCap) {
		return 0
	}
	wt := &waiter{tenant: rt.tenant(r), stage: stageNode}
	return rt.admissionWait(w, r, wt)
}

// leaveNode gives back a node slot: to the next waiter in fair order, if
// any, else to the pool.
func (a *admission) leaveNode() {
	if a.nodeWaiting.Load() > 0 {
		a.mu.Lock()
		if w := a.nodeQ.pop(-1); w != nil {
			a.grant(w, -1) // the slot passes on as it is
			a.nodeWaiting.Store(int64(a.nodeQ.n))
		} else {
			a.node.used.Add(-1)
		}
		a.mu.Unlock()
		return
	}
	a.node.used.Add(-1)
	// A request may have queued between the check and the release: it
	// looked for room after queueing (see enqueue), or it is seen here.
	if a.nodeWaiting.Load() > 0 {
		a.mu.Lock()
		a.grantNode()
		a.mu.Unlock()
	}
}

// grantNode hands free node slots to waiters, in fair order. mu is held.
func (a *admission) grantNode() {
	for a.nodeQ.n > 0 && a.node.tryTake(a.nodeCap) {
		a.grant(a.nodeQ.pop(-1), -1)
	}
	a.nodeWaiting.Store(int64(a.nodeQ.n))
}

// ---- the backends' caps ----

// decideAdmitted is decide under the backends' caps: backends at their cap
// are no candidates, and when every candidate is at its cap the request
// waits (fairly, bounded) for the first slot freed on one of them. The
// chosen backend's slot is taken for the attempt (runAttempt gives it
// back). status is 0 when d is the decision, else the status already
// answered (429 from admission, 499 when the client left, 503 when no
// backend is left in rotation after a wait). st.cands must not be empty.
func (rt *Router) decideAdmitted(w http.ResponseWriter, r *http.Request, st *reqState, ep Endpoint, now time.Time, attempt int) (d Decision, status int) {
	a := rt.adm
	if a.perBackend == 0 {
		return rt.decide(st, ep, now, attempt, false), 0
	}
	held := -1          // a slot handed to this request while it waited
	var since time.Time // when it first waited (a rewoken request waits on from there)
	for {
		if held >= 0 && !slices.ContainsFunc(st.backs, func(b *backend) bool { return b.slot == held }) {
			a.leaveBackend(held) // the backend left rotation while the request waited
			held = -1
		}
		if slots := a.filterFull(st, held); slots != nil {
			wt := &waiter{tenant: rt.tenant(r), stage: stageBackend, slots: slots, model: st.model, since: since}
			if status := rt.admissionWait(w, r, wt); status != 0 {
				return Decision{}, status
			}
			since = wt.since
			// wt.slot is -1 when the backends changed while it waited
			// (rewake): it decides again among the backends now listed.
			held, now = wt.slot, rt.now()
			if !rt.gather(st, st.model, now) || len(st.cands) == 0 {
				if held >= 0 {
					a.leaveBackend(held)
				}
				return Decision{}, rt.fail(w, errNoBackend, NewAPIError(http.StatusServiceUnavailable, "",
					"no backend in rotation serves model %q (each is ejected, drained or being removed); try again shortly", st.model))
			}
			continue
		}
		d = rt.decide(st, ep, now, attempt, false)
		if d.Hold { // nothing is sent: a slot handed over while it waited goes on
			if held >= 0 {
				a.leaveBackend(held)
			}
			return d, 0
		}
		slot := st.backs[d.Index].slot
		switch {
		case slot == held:
			return d, 0
		case a.takeBackend(st.backs[d.Index]):
			if held >= 0 {
				a.leaveBackend(held)
			}
			return d, 0
		}
		// Another request took the last slot since filterFull: decide again
		// without that backend.
	}
}

// admissionWait queues wt and waits for its slot, QueueTimeout at most
// from wt.since (set: a request rewoken without a slot waits again for
// what is left). It returns 0 once wt holds its slot or was rewoken
// (wt.slot -1), else the status it answered.
func (rt *Router) admissionWait(w http.ResponseWriter, r *http.Request, wt *waiter) int {
	a := rt.adm
	now := a.now()
	again := !wt.since.IsZero()
	if !again {
		wt.since = now
	}
	left := a.cfg.QueueTimeout - now.Sub(wt.since)
	if left <= 0 {
		return rt.refuse(w, wt.stage, rejectTimeout)
	}
	wt.ready = make(chan struct{})
	a.mu.Lock()
	if !a.enqueue(wt) {
		a.mu.Unlock()
		return rt.refuse(w, wt.stage, rejectQueueFull)
	}
	done := wt.done
	a.mu.Unlock()
	if !again {
		a.queued[wt.stage].Inc()
	}
	if !done {
		timeout, stop := a.after(left)
		select {
		case <-wt.ready:
		case <-timeout:
		case <-r.Context().Done():
		}
		stop()
		a.mu.Lock()
		if !wt.done {
			a.queueOf(wt.stage).remove(wt)
			a.syncWaiting()
			wt.done, wt.refused, wt.reason = true, true, rejectTimeout
			wt.canceled = r.Context().Err() != nil
		}
		a.mu.Unlock()
	}
	if !wt.refused && wt.stage == stageBackend && wt.slot < 0 {
		return 0 // rewoken: it decides again, and its wait is measured when it ends
	}
	waited := a.now().Sub(wt.since)
	a.wait[wt.stage].Observe(waited.Seconds())
	if rt.otel != nil {
		outcome := "admitted"
		switch {
		case wt.canceled:
			outcome = "client_gone"
		case wt.refused:
			outcome = admReasonNames[wt.reason]
		}
		rt.traceAdmission(r, wt.stage, outcome, waited)
	}
	switch {
	case !wt.refused:
		return 0
	case wt.canceled:
		rt.metrics.errors[errClientCanceled].Inc()
		return 499
	}
	return rt.refuse(w, wt.stage, wt.reason)
}

func (a *admission) queueOf(s admStage) *fairQueue {
	if s == stageNode {
		return &a.nodeQ
	}
	return &a.backQ
}

func (a *admission) syncWaiting() {
	a.nodeWaiting.Store(int64(a.nodeQ.n))
	a.backWaiting.Store(int64(a.backQ.n))
}

// enqueue queues wt, making room by displacing the newest waiter of the
// tenant with the most waiting when wt's tenant has at least two fewer;
// it reports false when there is no room. A slot free by now (released
// between the caller's look and the queueing) is handed out at once, in
// fair order, possibly to wt (wt.done). mu is held.
func (a *admission) enqueue(wt *waiter) bool {
	if a.nodeQ.n+a.backQ.n >= a.cfg.MaxQueued {
		victim := a.victim(wt.tenant)
		if victim == nil {
			return false
		}
		a.queueOf(victim.stage).remove(victim)
		victim.done, victim.refused, victim.reason = true, true, rejectDisplaced
		close(victim.ready)
	}
	a.queueOf(wt.stage).push(wt)
	a.syncWaiting()
	if wt.stage == stageNode {
		a.grantNode()
	} else {
		for _, s := range wt.slots {
			a.grantBackend(s)
		}
	}
	return true
}

// victim is the waiter that gives its place to a waiter of tenant: the
// newest of the tenant with the most waiting (the newest waiting for the
// node, which has done no work yet, before one waiting for a backend), if
// that tenant has at least two more waiting than tenant. mu is held.
func (a *admission) victim(tenant string) *waiter {
	mine := a.nodeQ.count(tenant) + a.backQ.count(tenant)
	most, top := mine+1, ""
	for _, q := range []*fairQueue{&a.nodeQ, &a.backQ} {
		for _, tq := range q.ring {
			if c := a.nodeQ.count(tq.name) + a.backQ.count(tq.name); c > most {
				most, top = c, tq.name
			}
		}
	}
	if most == mine+1 {
		return nil
	}
	if tq := a.nodeQ.byTenant[top]; tq != nil {
		return tq.ws[len(tq.ws)-1]
	}
	tq := a.backQ.byTenant[top]
	return tq.ws[len(tq.ws)-1]
}

// grant tells w it holds its slot (slot: the backend's, for a backend
// waiter). w has left its queue. mu is held.
func (a *admission) grant(w *waiter, slot int) {
	w.done, w.slot = true, slot
	close(w.ready)
}

// refuse answers 429 with Retry-After for a request admission refused.
func (rt *Router) refuse(w http.ResponseWriter, stage admStage, reason admReason) int {
	a := rt.adm
	a.rejected[stage][reason].Inc()
	what := "this router node is at its limit of requests in flight (max_in_flight)"
	if stage == stageBackend {
		what = "every backend serving the model is at its limit of requests in flight (max_in_flight_per_backend)"
	}
	var msg, code string
	switch reason {
	case rejectQueueFull:
		msg, code = what+" and its queue of waiting requests is full; retry after "+a.retryAfter[0]+" s.", "queue_full"
	case rejectDisplaced:
		msg, code = what+"; this request gave its place in the full queue to another tenant's; retry after "+a.retryAfter[0]+" s.", "queue_full"
	default:
		msg, code = what+"; the request waited "+a.cfg.QueueTimeout.String()+" (queue_timeout) without getting a slot; retry after "+a.retryAfter[0]+" s.", "queue_timeout"
	}
	w.Header()["Retry-After"] = a.retryAfter
	e := &APIError{Status: http.StatusTooManyRequests, Type: TypeRateLimit, Code: code, Message: msg}
	e.WriteTo(w)
	return e.Status
}

// runAttempt is one attempt at b (see attempt; traced when tracing is
// on), giving back the backend slot decideAdmitted took for it when it
// ends.
func (rt *Router) runAttempt(w http.ResponseWriter, r *http.Request, st *reqState, b *backend, d Decision, matched int, last bool, start time.Time, ep Endpoint) attemptResult {
	defer rt.adm.leaveBackend(b.slot)
	st.ownOutgoing() // before tracing writes its header: an earlier attempt's may still be read
	if rt.otel != nil {
		return rt.tracedAttempt(w, r, st, b, d, matched, last, start, ep, len(st.tried))
	}
	return rt.attempt(w, r, st, b, d, matched, last, start, ep)
}

// idle reports whether nothing waits and no slot is held (tests).
func (a *admission) idle() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.nodeQ.n != 0 || a.backQ.n != 0 || len(a.nodeQ.byTenant) != 0 || len(a.backQ.byTenant) != 0 || a.node.used.Load() != 0 {
		return false
	}
	for _, sc := range *a.back.Load() {
		if sc.used.Load() != 0 {
			return false
		}
	}
	return true
}
