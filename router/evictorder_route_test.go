package router

import (
	"sync/atomic"
	"testing"
	"time"
)

// The eviction order doubts a claim with less of the engine's LRU queued
// ahead of it than the prefill booked ahead of the request, and only the
// blocks no claim with enough ahead of it covers: an older conversation at
// the front of the queue, not the system prompt a newer conversation
// released since.
func TestEvictionOrderDoubtsWhatTheQueueWillReach(t *testing.T) {
	a := newTokenizingBackend(t, "a")
	g := evictRig(t, func(pc *PreciseConfig) { pc.EvictionOrder = true }, a.fakeBackend) // evictlinks_test.go
	sys := longText("system", 3000)
	older := chat("m1", sys, longText("an older conversation", 1500))
	newer := chat("m1", sys, longText("a newer conversation", 1500))
	postLinked(t, g, older, 1)
	postLinked(t, g, newer, 2) // matches the system prompt: pinned, then released after its own turn
	b := g.rt.set.Load().listed[0]
	if got, want := g.counter("kvmesh_router_backend_eviction_order_segments"), float64(b.order.segments()); got != want || got == 0 {
		t.Fatalf("order segments gauge %v, want %v (and some)", got, want)
	}

	st := g.rt.getState()
	if aerr := g.rt.prepare(st, EndpointChat, []byte(older), ""); aerr != nil {
		t.Fatal(aerr)
	}
	upb := st.chain.UnitsPerBlock
	sysDepth := st.prompt.Ends[0] / upb
	sysUnits := st.chain.UnitsAt(sysDepth)
	sysKey := st.chain.Keys[sysDepth-1]
	deepKey := st.chain.Keys[st.chain.Learn[len(st.chain.Learn)-1]-1]
	defer g.rt.putState(st)
	if a, state := b.order.ahead(deepKey, 1e18); state != orderQueued || a != 0 {
		t.Fatalf("the older conversation's deepest claim: %v units ahead (state %d), want 0, queued: it is the engine's next eviction", a, state)
	}
	nst := g.rt.getState()
	if aerr := g.rt.prepare(nst, EndpointChat, []byte(newer), ""); aerr != nil {
		t.Fatal(aerr)
	}
	newerUnits := nst.chain.UnitsAt(int(nst.chain.Learn[len(nst.chain.Learn)-1]))
	g.rt.putState(nst)
	olderUnits := st.chain.UnitsAt(int(st.chain.Learn[len(st.chain.Learn)-1]))
	// The newer conversation took the system prompt out of the queue while
	// it ran and put it back behind its own turn.
	aSys, state := b.order.ahead(sysKey, 1e18)
	if want := float64(olderUnits - sysUnits + newerUnits - sysUnits); state != orderQueued || aSys != want {
		t.Fatalf("the system prompt's claim: %v units ahead (state %d), want %v, queued: both conversations' turns", aSys, state, want)
	}

	discount := func() (float64, int) {
		t.Helper()
		c := explainCandidate(t, g, older, "a") // evictedge_test.go
		return c.Discount, c.MatchedUnits
	}
	booked := func(units float64) { b.pendingUnits.Store(int64(units)) }
	defer booked(0)

	// Before any eviction the engine allocates from blocks it never used.
	booked(aSys)
	if d, _ := discount(); d != 0 {
		t.Fatalf("before any eviction: discount %v, want 0", d)
	}
	b.edge.observe(1, time.Now().UnixMilli()) // the cache has filled
	// Nothing booked ahead: nothing evicted before the request is scheduled.
	booked(0)
	if d, _ := discount(); d != 0 {
		t.Fatalf("nothing booked: discount %v, want 0", d)
	}
	// As much booked as is queued ahead of the system prompt: the older
	// conversation's blocks past it are doubted, the system prompt's not.
	booked(aSys)
	d, units := discount()
	band := orderBandShare*aSys + float64(orderBandBlocks*upb)
	if want := orderRisk(0, aSys, band) * float64(units-sysUnits) / float64(units); d < want-1e-9 || d > want+1e-9 || d == 0 {
		t.Fatalf("booked %v: discount %v, want %v (the %d units past the system prompt's %d of %d)", aSys, d, want, units-sysUnits, sysUnits, units)
	}
	// Far more booked: the whole prompt is doubted.
	booked(aSys + float64(units)*10)
	if d, _ := discount(); d != maxEdgeDiscount {
		t.Fatalf("booked past the whole queue: discount %v, want %v", d, maxEdgeDiscount)
	}
	// Off: no doubt.
	g.rt.precise.cfg.EvictionOrder = false
	if d, _ := discount(); d != 0 {
		t.Fatalf("eviction order off: discount %v, want 0", d)
	}
	g.rt.precise.cfg.EvictionOrder = true

	// The engine evicts the older conversation past the system prompt:
	// its claims end and leave the order, and the system prompt moves up.
	sysEnd := len(engineTokens(t, []byte(chat("m1", sys)))) - 1
	g.rt.EvictionSink(nil).End(engineBlocks(t, g, older, sysEnd+32), b.id)
	if _, state := b.order.ahead(deepKey, 1e18); state != orderUnknown {
		t.Fatalf("an evicted claim: state %d, want unknown", state)
	}
	if a, _ := b.order.ahead(sysKey, 1e18); a <= 0 || a >= aSys {
		t.Fatalf("the system prompt after the older conversation's eviction: %v units ahead, want fewer than %v and some (the newer conversation's)", a, aSys)
	}
}

// An eviction trims from the order only what was released more than
// EvictionOrderSlack before the evicted release: answers that end close
// together may have been released by the engine in either order.
func TestEvictionOrderTrimsPastTheSlack(t *testing.T) {
	var clock atomic.Int64
	clock.Store(time.Now().UnixNano())
	now := func() time.Time { return time.Unix(0, clock.Load()) }
	a := newTokenizingBackend(t, "a")
	g := evictRigAt(t, now, func(pc *PreciseConfig) { pc.EvictionOrder = true }, a.fakeBackend) // evictlinks_test.go
	if s := DefaultPreciseConfig().EvictionOrderSlack; s != 200*time.Millisecond {
		t.Fatalf("default slack %v, want 200ms", s)
	}
	older := chat("m1", longText("one system prompt", 2000), longText("an older conversation", 1500))
	newer := chat("m1", longText("another system prompt", 2000), longText("a newer conversation", 1500))
	postLinked(t, g, older, 1)
	clock.Add(int64(100 * time.Millisecond))
	postLinked(t, g, newer, 2)
	b := g.rt.set.Load().listed[0]
	st := g.rt.getState()
	defer g.rt.putState(st)
	if aerr := g.rt.prepare(st, EndpointChat, []byte(older), ""); aerr != nil {
		t.Fatal(aerr)
	}
	olderDeep := st.chain.Keys[st.chain.Learn[len(st.chain.Learn)-1]-1]
	blocks := engineBlocks(t, g, newer, 0)
	ended := func() float64 { return g.counter("kvmesh_router_eviction_link_claims_ended_total") }
	// The newer answer ended 100 ms after the older: within the slack. Its
	// deepest linked block goes first.
	i := len(blocks) - 1
	for ; i >= 0 && ended() == 0; i-- {
		g.rt.EvictionSink(nil).End(blocks[i:i+1], b.id)
	}
	if ended() == 0 || i < 0 {
		t.Fatal("no eviction of the newer prompt's blocks ended a claim, or only the last one did")
	}
	if _, state := b.order.ahead(olderDeep, 1e18); state != orderQueued {
		t.Fatalf("the older answer's claim after an eviction of the newer's, 100 ms apart: state %d, want still queued", state)
	}
	// With a slack of 50 ms the older one was released before.
	g.rt.precise.cfg.EvictionOrderSlack = 50 * time.Millisecond
	before := ended()
	g.rt.EvictionSink(nil).End(blocks[:i+1], b.id)
	if ended() == before {
		t.Fatal("the rest of the newer prompt's blocks ended no claim")
	}
	if _, state := b.order.ahead(olderDeep, 1e18); state != orderGone {
		t.Fatalf("the older answer's claim after an eviction of the newer's with a 50 ms slack: state %d, want gone", state)
	}
}
