package router

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// gatedBackend is a fake backend whose generation requests each wait for a
// token on gate before answering, and which records, in arrival order,
// each request's X-Seq header and the most requests it held at once.
type gatedBackend struct {
	*fakeBackend
	gate    chan struct{}
	cur     atomic.Int64
	most    atomic.Int64
	arrived atomic.Int64

	mu    sync.Mutex
	order []string
}

func newGatedBackend(t *testing.T, name string) *gatedBackend {
	g := &gatedBackend{fakeBackend: newFakeBackend(t, name), gate: make(chan struct{})}
	g.setHook(func(w http.ResponseWriter, r *http.Request, _ []byte) {
		n := g.cur.Add(1)
		for m := g.most.Load(); n > m && !g.most.CompareAndSwap(m, n); m = g.most.Load() {
		}
		g.mu.Lock()
		g.order = append(g.order, r.Header.Get("X-Seq"))
		g.mu.Unlock()
		g.arrived.Add(1)
		select {
		case <-g.gate:
		case <-r.Context().Done():
		}
		g.cur.Add(-1)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"ok"}}]}`)
	})
	return g
}

func (g *gatedBackend) arrivals() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), g.order...)
}

// result is one client request's answer.
type result struct {
	seq    string
	status int
	header http.Header
	body   string
}

// send issues a chat request in the background; its answer arrives on out.
func (g *testRig) send(ctx context.Context, tenant, seq string, out chan<- result) {
	body := chat("m1", "system prompt "+seq, "question "+seq)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, "POST", g.srv.URL+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("X-Tenant-ID", tenant)
		req.Header.Set("X-Seq", seq)
		resp, err := g.srv.Client().Do(req)
		if err != nil {
			out <- result{seq: seq, status: -1, body: err.Error()}
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		out <- result{seq: seq, status: resp.StatusCode, header: resp.Header, body: string(b)}
	}()
}

// waiting is the admission queue's length for stage.
func (g *testRig) waiting(stage string) int {
	return int(g.counter("kvmesh_router_admission_waiting_requests", "stage", stage))
}

// noLeaks checks that admission holds nothing and that every goroutine
// the test's requests started has ended.
func noLeaks(t *testing.T, g *testRig, before int) {
	t.Helper()
	waitFor(t, "admission to hold no slot and no waiter", g.rt.adm.idle)
	g.srv.Client().Transport.(*http.Transport).CloseIdleConnections()
	if g.rt.owned != nil {
		g.rt.owned.CloseIdleConnections()
	}
	waitFor(t, "the requests' goroutines to end", func() bool {
		runtime.GC()
		return runtime.NumGoroutine() <= before
	})
}

func admissionRig(t *testing.T, adm AdmissionConfig, backends ...*fakeBackend) *testRig {
	return newRig(t, func(c *Config, _ *Deps) {
		c.Admission = adm
		c.ProbeInterval = 0
	}, backends...)
}

func TestAdmissionNodeCapUnderConcurrency(t *testing.T) {
	be := newGatedBackend(t, "b1")
	adm := DefaultAdmissionConfig()
	adm.MaxInFlight = 3
	g := admissionRig(t, adm, be.fakeBackend)
	before := runtime.NumGoroutine()
	out := make(chan result, 20)
	for i := 0; i < 20; i++ {
		g.send(context.Background(), fmt.Sprint("t", i%3), fmt.Sprint(i), out)
	}
	waitFor(t, "3 requests at the backend and 17 waiting", func() bool {
		return be.arrived.Load() == 3 && g.waiting("node") == 17
	})
	if n := g.counter("kvmesh_router_admission_in_flight_requests"); n != 3 {
		t.Errorf("admission_in_flight_requests = %v, want 3", n)
	}
	close(be.gate)
	for i := 0; i < 20; i++ {
		if r := <-out; r.status != 200 {
			t.Errorf("request %s: %d %s", r.seq, r.status, r.body)
		}
	}
	if m := be.most.Load(); m > 3 {
		t.Errorf("the backend held %d requests at once; the node's cap is 3", m)
	}
	if q := g.counter("kvmesh_router_admission_queued_total", "stage", "node"); q != 17 {
		t.Errorf("queued_total = %v, want 17", q)
	}
	if w := g.counter("kvmesh_router_admission_wait_seconds", "stage", "node"); w != 17 {
		t.Errorf("wait_seconds observed %v waits, want 17", w)
	}
	noLeaks(t, g, before)
}

func TestAdmissionPerBackendCap(t *testing.T) {
	b1, b2 := newGatedBackend(t, "b1"), newGatedBackend(t, "b2")
	adm := DefaultAdmissionConfig()
	adm.MaxInFlightPerBackend = 2
	g := admissionRig(t, adm, b1.fakeBackend, b2.fakeBackend)
	before := runtime.NumGoroutine()
	out := make(chan result, 10)
	for i := 0; i < 10; i++ {
		g.send(context.Background(), "", fmt.Sprint(i), out)
	}
	waitFor(t, "2 requests at each backend and 6 waiting", func() bool {
		return b1.arrived.Load() == 2 && b2.arrived.Load() == 2 && g.waiting("backend") == 6
	})
	// Free the slots one at a time: each goes to a waiter.
	for i := 0; i < 6; i++ {
		select {
		case b1.gate <- struct{}{}:
		case b2.gate <- struct{}{}:
		}
		want := 6 - i - 1
		waitFor(t, fmt.Sprintf("%d waiting", want), func() bool { return g.waiting("backend") == want })
	}
	close(b1.gate)
	close(b2.gate)
	for i := 0; i < 10; i++ {
		if r := <-out; r.status != 200 {
			t.Errorf("request %s: %d %s", r.seq, r.status, r.body)
		}
	}
	for _, b := range []*gatedBackend{b1, b2} {
		if m := b.most.Load(); m > 2 {
			t.Errorf("%s held %d requests at once; its cap is 2", b.name, m)
		}
	}
	if got := b1.arrived.Load() + b2.arrived.Load(); got != 10 {
		t.Errorf("the backends got %d requests, want 10", got)
	}
	noLeaks(t, g, before)
}

// Tenant a queues four requests before tenant b queues two: they are
// served a, b, a, b, a, a — one tenant's backlog does not hold up another.
func TestAdmissionFairAcrossTenants(t *testing.T) {
	be := newGatedBackend(t, "b1")
	adm := DefaultAdmissionConfig()
	adm.MaxInFlight = 1
	g := admissionRig(t, adm, be.fakeBackend)
	before := runtime.NumGoroutine()
	out := make(chan result, 10)
	g.send(context.Background(), "a", "a0", out)
	waitFor(t, "a0 at the backend", func() bool { return be.arrived.Load() == 1 })
	queued := 0
	for _, s := range []string{"a1", "a2", "a3", "a4", "b1", "b2"} {
		g.send(context.Background(), s[:1], s, out)
		queued++
		waitFor(t, s+" queued", func() bool { return g.waiting("node") == queued })
	}
	for i := 1; i <= 6; i++ {
		be.gate <- struct{}{}
		waitFor(t, "the next request at the backend", func() bool { return be.arrived.Load() == int64(i+1) })
	}
	be.gate <- struct{}{}
	for i := 0; i < 7; i++ {
		if r := <-out; r.status != 200 {
			t.Errorf("request %s: %d %s", r.seq, r.status, r.body)
		}
	}
	got := strings.Join(be.arrivals(), " ")
	if want := "a0 a1 b1 a2 b2 a3 a4"; got != want {
		t.Errorf("served in the order %q, want %q", got, want)
	}
	noLeaks(t, g, before)
}

// fireableTimers replaces admission's timers with ones the test fires.
func fireableTimers(g *testRig) chan chan time.Time {
	timers := make(chan chan time.Time, 16)
	g.rt.adm.after = func(time.Duration) (<-chan time.Time, func() bool) {
		c := make(chan time.Time, 1)
		timers <- c
		return c, func() bool { return true }
	}
	return timers
}

func checkRateLimited(t *testing.T, r result, code string) {
	t.Helper()
	if r.status != http.StatusTooManyRequests {
		t.Fatalf("request %s: status %d (%s), want 429", r.seq, r.status, r.body)
	}
	if ra := r.header.Get("Retry-After"); ra != "2" {
		t.Errorf("Retry-After %q, want 2", ra)
	}
	var e struct {
		Error struct {
			Message, Type string
			Code          *string
		}
	}
	if err := json.Unmarshal([]byte(r.body), &e); err != nil {
		t.Fatalf("the 429's body is not JSON: %v: %s", err, r.body)
	}
	if e.Error.Type != TypeRateLimit || e.Error.Code == nil || *e.Error.Code != code || e.Error.Message == "" {
		t.Errorf("429 body %s, want type %s, code %s", r.body, TypeRateLimit, code)
	}
}

func TestAdmissionTimeoutAnswers429(t *testing.T) {
	be := newGatedBackend(t, "b1")
	adm := DefaultAdmissionConfig()
	adm.MaxInFlight = 1
	adm.RetryAfter = 1500 * time.Millisecond // rounded up to 2 s
	g := admissionRig(t, adm, be.fakeBackend)
	timers := fireableTimers(g)
	before := runtime.NumGoroutine()
	out := make(chan result, 4)
	g.send(context.Background(), "a", "held", out)
	waitFor(t, "the first request at the backend", func() bool { return be.arrived.Load() == 1 })
	g.send(context.Background(), "a", "waits", out)
	(<-timers) <- time.Now() // its wait times out
	checkRateLimited(t, <-out, "queue_timeout")
	if n := g.counter("kvmesh_router_admission_rejected_total", "reason", "timeout"); n != 1 {
		t.Errorf("rejected_total{reason=timeout} = %v, want 1", n)
	}
	// A client that leaves while it waits for the node's cap keeps its
	// place (HTTP/1.1 shows no closed connection before the body is read)
	// until its turn, when it is dropped at once.
	ctx, cancel := context.WithCancel(context.Background())
	g.send(ctx, "a", "leaves", out)
	<-timers
	cancel()
	if r := <-out; r.status != -1 {
		t.Errorf("a canceled request got %d", r.status)
	}
	be.gate <- struct{}{}
	if r := <-out; r.status != 200 {
		t.Errorf("the held request: %d %s", r.status, r.body)
	}
	noLeaks(t, g, before)
}

// A client that leaves while it waits for a backend's cap (its body read,
// so its departure is seen) frees its place at once.
func TestAdmissionClientLeavesWhileWaitingForABackend(t *testing.T) {
	be := newGatedBackend(t, "b1")
	adm := DefaultAdmissionConfig()
	adm.MaxInFlightPerBackend = 1
	g := admissionRig(t, adm, be.fakeBackend)
	before := runtime.NumGoroutine()
	out := make(chan result, 4)
	g.send(context.Background(), "a", "held", out)
	waitFor(t, "the first request at the backend", func() bool { return be.arrived.Load() == 1 })
	ctx, cancel := context.WithCancel(context.Background())
	g.send(ctx, "a", "leaves", out)
	waitFor(t, "a request waiting for the backend", func() bool { return g.waiting("backend") == 1 })
	cancel()
	if r := <-out; r.status != -1 {
		t.Errorf("a canceled request got %d", r.status)
	}
	waitFor(t, "the waiter to leave", func() bool {
		return g.waiting("backend") == 0 && g.counter("kvmesh_router_errors_total", "kind", "client_canceled") == 1
	})
	be.gate <- struct{}{}
	if r := <-out; r.status != 200 {
		t.Errorf("the held request: %d %s", r.status, r.body)
	}
	if n := be.arrived.Load(); n != 1 {
		t.Errorf("the backend got %d requests, want 1", n)
	}
	noLeaks(t, g, before)
}

// With room for two waiters, a third request of the tenant that fills the
// queue is refused at once, and another tenant's request takes the place
// of that tenant's newest waiter.
func TestAdmissionQueueFullAndDisplacement(t *testing.T) {
	be := newGatedBackend(t, "b1")
	adm := DefaultAdmissionConfig()
	adm.MaxInFlight = 1
	adm.MaxQueued = 2
	adm.RetryAfter = 2 * time.Second
	g := admissionRig(t, adm, be.fakeBackend)
	before := runtime.NumGoroutine()
	out := make(chan result, 8)
	g.send(context.Background(), "a", "a0", out)
	waitFor(t, "a0 at the backend", func() bool { return be.arrived.Load() == 1 })
	for i, s := range []string{"a1", "a2"} {
		g.send(context.Background(), "a", s, out)
		waitFor(t, s+" queued", func() bool { return g.waiting("node") == i+1 })
	}
	g.send(context.Background(), "a", "a3", out)
	r := <-out
	if r.seq != "a3" {
		t.Fatalf("%s answered first (%d)", r.seq, r.status)
	}
	checkRateLimited(t, r, "queue_full")
	g.send(context.Background(), "b", "b1", out)
	r = <-out
	if r.seq != "a2" {
		t.Fatalf("%s answered (%d), want the displaced a2", r.seq, r.status)
	}
	checkRateLimited(t, r, "queue_full")
	if n := g.counter("kvmesh_router_admission_rejected_total", "reason", "displaced"); n != 1 {
		t.Errorf("rejected_total{reason=displaced} = %v, want 1", n)
	}
	if n := g.counter("kvmesh_router_admission_rejected_total", "reason", "queue_full"); n != 1 {
		t.Errorf("rejected_total{reason=queue_full} = %v, want 1", n)
	}
	close(be.gate)
	for i := 0; i < 3; i++ {
		if r := <-out; r.status != 200 {
			t.Errorf("request %s: %d %s", r.seq, r.status, r.body)
		}
	}
	if got := strings.Join(be.arrivals(), " "); got != "a0 a1 b1" {
		t.Errorf("served %q, want a0 a1 b1", got)
	}
	noLeaks(t, g, before)
}

// Without caps (the default) nothing waits, whatever the concurrency.
func TestAdmissionOffByDefault(t *testing.T) {
	be := newGatedBackend(t, "b1")
	g := admissionRig(t, DefaultAdmissionConfig(), be.fakeBackend)
	out := make(chan result, 40)
	for i := 0; i < 40; i++ {
		g.send(context.Background(), "", fmt.Sprint(i), out)
	}
	waitFor(t, "every request at the backend", func() bool { return be.arrived.Load() == 40 })
	close(be.gate)
	for i := 0; i < 40; i++ {
		if r := <-out; r.status != 200 {
			t.Errorf("request %s: %d", r.seq, r.status)
		}
	}
	if q := g.counter("kvmesh_router_admission_queued_total"); q != 0 {
		t.Errorf("queued_total = %v without caps", q)
	}
}

func TestAdmissionConfigValidation(t *testing.T) {
	c := DefaultConfig()
	c.Backends = []BackendConfig{{URL: "http://127.0.0.1:1"}}
	c.Admission = AdmissionConfig{MaxInFlight: -1, MaxInFlightPerBackend: -1, MaxQueued: -1}
	err := c.Validate()
	if err == nil {
		t.Fatal("negative caps and zero durations accepted")
	}
	for _, want := range []string{"max_in_flight ", "max_in_flight_per_backend", "max_queued", "queue_timeout", "retry_after"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("no complaint about %s in %v", want, err)
		}
	}
}

// The fair queue's bookkeeping, with the cursor's moves.
func TestFairQueueOrder(t *testing.T) {
	var q fairQueue
	mk := func(tenant string, slots ...int) *waiter { return &waiter{tenant: tenant, slots: slots} }
	ws := map[string]*waiter{}
	for _, s := range []string{"a1", "a2", "a3", "b1", "c1", "c2"} {
		ws[s] = mk(s[:1], 0)
		q.push(ws[s])
	}
	ws["b2"] = mk("b", 1)
	q.push(ws["b2"])
	name := func(w *waiter) string {
		for k, v := range ws {
			if v == w {
				return k
			}
		}
		return "nil"
	}
	var got []string
	got = append(got, name(q.pop(1))) // only b2 can use slot 1
	for q.n > 0 {
		got = append(got, name(q.pop(-1)))
	}
	if s := strings.Join(got, " "); s != "b2 c1 a1 b1 c2 a2 a3" {
		t.Errorf("popped %s", s)
	}
	if len(q.ring) != 0 || len(q.byTenant) != 0 || q.pop(-1) != nil {
		t.Errorf("empty queue keeps %d tenants", len(q.ring))
	}
}
