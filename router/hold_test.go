package router

import (
	"context"
	"net/http"
	"runtime"
	"testing"
	"time"
)

// holdRig is a router over two gated backends whose kvmesh policy holds
// any prompt while both have prefill queued (any), for at most holdMax.
func holdRig(t *testing.T, holdMax time.Duration) (*testRig, *gatedBackend, *gatedBackend) {
	b1, b2 := newGatedBackend(t, "b1"), newGatedBackend(t, "b2")
	g := newRig(t, func(c *Config, _ *Deps) {
		c.ProbeInterval = 0
		c.KVMesh.HoldMinPrompts = 0.001 // every prompt of the test is long enough
		c.KVMesh.HoldQueuePrompts = 0   // any prefill queued is busy
		c.KVMesh.HoldMax = holdMax
		c.KVMesh.HoldMaxReuse = 0 // the fake backends answer no usage: reuse stays unknown
	}, b1.fakeBackend, b2.fakeBackend)
	return g, b1, b2
}

// busyBoth sends A and B, one to each backend (the second finds the
// first's queue and the other empty), where they wait at the gates.
func busyBoth(t *testing.T, g *testRig, b1, b2 *gatedBackend, out chan result) {
	t.Helper()
	g.send(context.Background(), "t", "A", out)
	waitFor(t, "A to reach a backend", func() bool { return b1.arrived.Load()+b2.arrived.Load() == 1 })
	g.send(context.Background(), "t", "B", out)
	waitFor(t, "B to reach the other backend", func() bool { return b1.arrived.Load() == 1 && b2.arrived.Load() == 1 })
}

// sendHeld sends seq and waits until the router has held n requests.
func sendHeld(t *testing.T, g *testRig, ctx context.Context, seq string, n float64, out chan result) {
	t.Helper()
	g.send(ctx, "t", seq, out)
	waitFor(t, seq+" to be held", func() bool { return g.counter("kvmesh_router_held_requests_total") == n })
}

// cHeld is a hold rig (hold_max an hour) whose backends hold A and B at
// their gates and whose router holds C; out has room for n answers.
func cHeld(t *testing.T, n int) (g *testRig, b1, b2 *gatedBackend, open1, open2 func(), out chan result) {
	g, b1, b2 = holdRig(t, time.Hour)
	open1, open2 = opener(t, b1), opener(t, b2)
	out = make(chan result, n)
	busyBoth(t, g, b1, b2, out)
	sendHeld(t, g, context.Background(), "C", 1, out)
	return g, b1, b2, open1, open2, out
}

// A long prompt that finds every backend with prefill queued waits at the
// router and goes to the first backend whose booking ends, not to the
// queue that looked shortest when it came.
func TestHoldSendsToTheFirstBackendFreed(t *testing.T) {
	g, b1, b2, open1, open2, out := cHeld(t, 3)
	if n := b1.arrived.Load() + b2.arrived.Load(); n != 2 {
		t.Fatalf("%d requests reached the backends while C was held, want 2", n)
	}
	open1()
	waitFor(t, "C to reach b1", func() bool { return b1.arrived.Load() == 2 })
	if got := b1.arrivals(); got[1] != "C" {
		t.Fatalf("b1 served %q, want C second", got)
	}
	open2()
	var results [3]result
	for i := range results {
		if results[i] = <-out; results[i].status != 200 {
			t.Errorf("%s: %d %s", results[i].seq, results[i].status, results[i].body)
		}
	}
	if n := g.counter("kvmesh_router_hold_seconds"); n != 1 {
		t.Errorf("hold_seconds counted %v waits, want 1", n)
	}
	for i := 0; i < 3; i++ {
		r := results[i]
		held := routeField(r.header.Get(RouteHeader), "held_ms")
		if (r.seq == "C") != (held != "") {
			t.Errorf("%s: x-kvmesh-route %q: held_ms should be there for C only", r.seq, r.header.Get(RouteHeader))
		}
	}
	if g.rt.holdGate.waiting.Load() != 0 {
		t.Error("the gate still counts a waiter")
	}
}

// A request held past hold_max is decided without the option to hold: it
// goes to a busy backend rather than waiting on.
func TestHoldEndsAtHoldMax(t *testing.T) {
	g, b1, b2 := holdRig(t, 20*time.Millisecond)
	opener(t, b1)
	opener(t, b2)
	out := make(chan result, 3)
	busyBoth(t, g, b1, b2, out)
	g.send(context.Background(), "t", "C", out)
	waitFor(t, "C to reach a backend with both gates shut", func() bool { return b1.arrived.Load()+b2.arrived.Load() == 3 })
	if g.counter("kvmesh_router_held_requests_total") != 1 || g.counter("kvmesh_router_hold_seconds") != 1 {
		t.Fatalf("held %v, waits %v: want C held once", g.counter("kvmesh_router_held_requests_total"), g.counter("kvmesh_router_hold_seconds"))
	}
}

// A client that leaves while its request is held is let go: nothing is
// sent for it, and its goroutine and the gate's count end.
func TestHoldClientLeaves(t *testing.T) {
	g, b1, b2 := holdRig(t, time.Hour)
	open1, open2 := opener(t, b1), opener(t, b2)
	out := make(chan result, 3)
	busyBoth(t, g, b1, b2, out)
	before := runtime.NumGoroutine()
	ctx, cancel := context.WithCancel(context.Background())
	sendHeld(t, g, ctx, "C", 1, out)
	cancel()
	if r := <-out; r.seq != "C" || r.status != -1 {
		t.Fatalf("got %s %d, want C's client to give up", r.seq, r.status)
	}
	waitFor(t, "the held request to let go", func() bool {
		return g.rt.holdGate.waiting.Load() == 0 && g.counter("kvmesh_router_errors_total", "kind", "client_canceled") == 1
	})
	open1()
	open2()
	for i := 0; i < 2; i++ {
		if r := <-out; r.status != 200 {
			t.Errorf("%s: %d %s", r.seq, r.status, r.body)
		}
	}
	if got := append(b1.arrivals(), b2.arrivals()...); len(got) != 2 {
		t.Errorf("backends served %q, want A and B only", got)
	}
	g.srv.Client().Transport.(*http.Transport).CloseIdleConnections()
	waitFor(t, "the requests' goroutines to end", func() bool {
		runtime.GC()
		return runtime.NumGoroutine() <= before
	})
}

// Held requests decide again in the order they were held: when a backend
// frees, the older goes first, the younger when the older has gone. The
// order of their arrival at the backend is not the router's (the older's
// send races the younger's decision once the older has left the gate), so
// the order is the gate's test (TestHoldGateWakesOldestFirst); here both
// go to the backend that freed.
func TestHoldKeepsOrder(t *testing.T) {
	g, b1, _, open1, open2, out := cHeld(t, 4)
	sendHeld(t, g, context.Background(), "D", 2, out)
	open1()
	waitFor(t, "C and D to reach b1", func() bool { return b1.arrived.Load() == 3 })
	if got := b1.arrivals(); !(got[1] == "C" && got[2] == "D" || got[1] == "D" && got[2] == "C") {
		t.Fatalf("b1 served %q, want C and D after the first", got)
	}
	open2()
	for i := 0; i < 4; i++ {
		if r := <-out; r.status != 200 {
			t.Errorf("%s: %d %s", r.seq, r.status, r.body)
		}
	}
}

// /debug/route says whether a request would be held now and where it
// would go were it sent, and holds nothing itself.
func TestExplainSaysWouldHold(t *testing.T) {
	g, b1, b2 := holdRig(t, time.Hour)
	open1, open2 := opener(t, b1), opener(t, b2)
	body := []byte(chat("m1", "system prompt C", "question C"))
	x, aerr := g.rt.Explain("/v1/chat/completions", body, "t")
	if aerr != nil || x.Hold {
		t.Fatalf("idle fleet: hold %v (%v), want no hold", x != nil && x.Hold, aerr)
	}
	out := make(chan result, 2)
	busyBoth(t, g, b1, b2, out)
	x, aerr = g.rt.Explain("/v1/chat/completions", body, "t")
	if aerr != nil || !x.Hold || x.Chosen == "" || x.Reason == "" {
		t.Fatalf("both backends busy: %+v (%v), want hold with a placement", x, aerr)
	}
	if n := g.counter("kvmesh_router_held_requests_total"); n != 0 || g.rt.holdGate.waiting.Load() != 0 {
		t.Errorf("an explanation held a request (held %v)", n)
	}
	open1()
	open2()
	for range 2 {
		if r := <-out; r.status != 200 {
			t.Errorf("%s: %d %s", r.seq, r.status, r.body)
		}
	}
}

// The gate wakes only the oldest held request at a booking's end, and the
// next oldest when the oldest leaves.
func TestHoldGateWakesOldestFirst(t *testing.T) {
	var g holdGate
	woken := func(w *holdWaiter) bool {
		select {
		case <-w.wake:
			return true
		default:
			return false
		}
	}
	c := g.enter(g.gen.Load())
	d := g.enter(g.gen.Load())
	if woken(c) || woken(d) || !g.first(c) || g.first(d) {
		t.Fatal("entering woke a request, or the first to enter is not the oldest")
	}
	g.open()
	if !woken(c) || woken(d) {
		t.Fatal("a booking's end did not wake the oldest alone")
	}
	g.leave(c)
	if !woken(d) || !g.first(d) {
		t.Fatal("the oldest leaving did not wake the next")
	}
	g.leave(d)
	if g.waiting.Load() != 0 {
		t.Fatalf("%d still held after both left", g.waiting.Load())
	}
}
