package router

import (
	"context"
	"sync"
	"testing"
)

// opener closes b's gate once, now or when the test ends (a failed wait
// must not leave the backends' handlers blocked, hanging the test).
func opener(t *testing.T, b *gatedBackend) func() {
	open := sync.OnceFunc(func() { close(b.gate) })
	t.Cleanup(open)
	return open
}

// capRig is a router over backends with a per-backend cap of perBackend,
// no probes.
func capRig(t *testing.T, perBackend int, backends ...*fakeBackend) *testRig {
	adm := DefaultAdmissionConfig()
	adm.MaxInFlightPerBackend = perBackend
	return admissionRig(t, adm, backends...)
}

// usedAt is how many slots admission counts taken at b.
func usedAt(g *testRig, name string) int64 {
	return (*g.rt.adm.back.Load())[g.rt.backendByName(name).slot].used.Load()
}

// A backend added for the model while a request waits for a full one
// takes the waiter (its list of slots was fixed when it queued), before
// any newcomer.
func TestAdmissionWaiterTakesABackendAddedMeanwhile(t *testing.T) {
	b1, b2 := newGatedBackend(t, "b1"), newGatedBackend(t, "b2")
	g := capRig(t, 1, b1.fakeBackend)
	open1, open2 := opener(t, b1), opener(t, b2)
	out := make(chan result, 2)
	g.send(context.Background(), "t", "held", out)
	waitFor(t, "b1 to hold the first request", func() bool { return b1.arrived.Load() == 1 })
	g.send(context.Background(), "t", "waiter", out)
	waitFor(t, "the second to wait", func() bool { return g.waiting("backend") == 1 })

	if err := g.rt.SetBackends([]BackendConfig{{Name: "b1", URL: b1.URL(), Models: []string{"m1"}}, {Name: "b2", URL: b2.URL(), Models: []string{"m1"}}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the waiter to reach b2", func() bool { return b2.arrived.Load() == 1 && g.waiting("backend") == 0 })
	if got := b2.arrivals(); len(got) != 1 || got[0] != "waiter" {
		t.Errorf("b2 served %q, want the waiter", got)
	}
	open1()
	open2()
	for i := 0; i < 2; i++ {
		if r := <-out; r.status != 200 {
			t.Errorf("%s: %d %s", r.seq, r.status, r.body)
		}
	}
}

// A waiter whose model stopped being served while it waited is answered
// 503 when a slot frees, never sent to the backend that left.
func TestAdmissionWaiterOfARemovedModel(t *testing.T) {
	b1 := newGatedBackend(t, "b1")
	other := newFakeBackend(t, "other", "m2")
	g := capRig(t, 1, b1.fakeBackend, other)
	open1 := opener(t, b1)
	out := make(chan result, 2)
	g.send(context.Background(), "t", "held", out)
	waitFor(t, "b1 to hold the first request", func() bool { return b1.arrived.Load() == 1 })
	g.send(context.Background(), "t", "waiter", out)
	waitFor(t, "the second to wait", func() bool { return g.waiting("backend") == 1 })

	if err := g.rt.SetBackends([]BackendConfig{{Name: "other", URL: other.URL(), Models: []string{"m2"}}}); err != nil {
		t.Fatal(err)
	}
	open1() // the held request ends: its slot goes to the waiter
	got := map[string]int{}
	for i := 0; i < 2; i++ {
		r := <-out
		got[r.seq] = r.status
	}
	if got["held"] != 200 || got["waiter"] != 503 {
		t.Errorf("statuses %v, want held 200 and waiter 503", got)
	}
	if n := b1.arrived.Load(); n != 1 {
		t.Errorf("the removed b1 received %d requests, want 1", n)
	}
}

// A cap lowered (the backend's weight halved) while its slots are held is
// kept once one frees: the slot is not handed to a waiter.
func TestAdmissionLoweredCapHoldsWhileQueued(t *testing.T) {
	b1 := newGatedBackend(t, "b1")
	g := capRig(t, 2, b1.fakeBackend)
	open1 := opener(t, b1)
	out := make(chan result, 4)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	g.send(ctx, "t", "first", out)
	waitFor(t, "b1 to hold the first", func() bool { return b1.arrived.Load() == 1 })
	g.send(context.Background(), "t", "second", out)
	waitFor(t, "b1 to hold two", func() bool { return b1.arrived.Load() == 2 })
	g.send(context.Background(), "t", "w1", out)
	g.send(context.Background(), "t", "w2", out)
	waitFor(t, "two waiting", func() bool { return g.waiting("backend") == 2 })

	if err := g.rt.SetBackends([]BackendConfig{{Name: "b1", URL: b1.URL(), Models: []string{"m1"}, Weight: 0.5}}); err != nil {
		t.Fatal(err)
	}
	cancel() // the first ends: b1 is at its new cap of 1 with the second
	waitFor(t, "b1 at its new cap with both still waiting", func() bool {
		return usedAt(g, "b1") == 1 && g.waiting("backend") == 2
	})
	open1()
	for i := 0; i < 4; i++ {
		r := <-out
		if r.seq != "first" && r.status != 200 {
			t.Errorf("%s: %d %s", r.seq, r.status, r.body)
		}
	}
	if m := b1.most.Load(); m > 2 {
		t.Errorf("b1 held %d at once", m)
	}
}
