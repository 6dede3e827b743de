package router

import (
	"math/rand/v2"
	"testing"

	"github.com/kvmesh/kvmesh/tree"
)

func segs(units float64, keys ...tree.Key) []segment {
	out := make([]segment, len(keys))
	for i, k := range keys {
		out[i] = segment{key: k, units: units}
	}
	return out
}

// aheadOf is o.ahead without a limit, failing unless k is queued.
func aheadOf(t *testing.T, o *evictOrder, k tree.Key) float64 {
	t.Helper()
	a, st := o.ahead(k, 1e18)
	if st != orderQueued {
		t.Fatalf("claim %d: state %d, want queued", k, st)
	}
	return a
}

// The order is the engine's: released prompts queue in release order,
// their deepest claim first; a pinned claim leaves the queue until its
// request ends; evicted claims and what was released before them go.
func TestEvictOrderQueuesInReleaseOrder(t *testing.T) {
	o := newEvictOrder()
	o.release(segs(100, 1, 2), 10) // a prompt of claims 1 (shallow) and 2 (deep)
	o.release(segs(50, 3), 20)
	if a := aheadOf(t, o, 2); a != 0 {
		t.Fatalf("deepest claim of the first release: ahead %v, want 0 (released tail first)", a)
	}
	if a := aheadOf(t, o, 1); a != 100 {
		t.Fatalf("claim 1: ahead %v, want 100", a)
	}
	if a := aheadOf(t, o, 3); a != 200 {
		t.Fatalf("claim 3: ahead %v, want 200", a)
	}
	// A request matching claim 1 pins it: it leaves the queue.
	o.pin([]tree.Key{1})
	if _, st := o.ahead(1, 1e18); st != orderPinned {
		t.Fatalf("a pinned claim: state %d, want pinned", st)
	}
	if a := aheadOf(t, o, 3); a != 100 {
		t.Fatalf("claim 3 with claim 1 pinned: ahead %v, want 100", a)
	}
	// Its answer releases claim 1 (pinned) and its new claim 4 at 30.
	o.release([]segment{{key: 1, units: 100, pinned: true}, {key: 4, units: 40}}, 30)
	if a := aheadOf(t, o, 1); a != 100+50+40 {
		t.Fatalf("claim 1 released again: ahead %v, want 190", a)
	}
	// The engine evicts claim 2: what was released before it went too.
	o.drop([]tree.Key{2})
	o.trim(10)
	if _, st := o.ahead(2, 1e18); st != orderUnknown {
		t.Fatalf("an evicted claim: state %d, want unknown (its claim ended)", st)
	}
	if a := aheadOf(t, o, 3); a != 0 {
		t.Fatalf("claim 3 after claim 2's eviction: ahead %v, want 0", a)
	}
	o.trim(21)
	if _, st := o.ahead(3, 1e18); st != orderGone {
		t.Fatalf("claim 3, released before the newest evicted release: state %d, want gone", st)
	}
	if a := aheadOf(t, o, 1); a != 40 {
		t.Fatalf("claim 1 after the trim: ahead %v, want 40", a)
	}
	// Released again, a trimmed claim is queued again.
	o.release(segs(50, 3), 40)
	if a := aheadOf(t, o, 3); a != 140 {
		t.Fatalf("claim 3 released again: ahead %v, want 140", a)
	}
	// The count stops at its limit.
	if a, _ := o.ahead(3, 10); a <= 10 {
		t.Fatalf("ahead past a limit of 10: %v, want above it", a)
	}
	o.clear()
	if _, st := o.ahead(1, 1e18); st != orderUnknown || len(o.nodes) != 0 || len(o.gone) != 0 {
		t.Fatal("clear left segments")
	}
}

// Two requests pinning the same claim hold it until both have ended.
// refAhead is ahead as one walk per claim: the units queued before k's
// segment, more than limit once they pass it or the walk passes orderWalk.
func refAhead(o *evictOrder, k tree.Key, limit float64) (float64, orderState) {
	n := o.nodes[k]
	switch {
	case n == nil:
		if _, ok := o.gone[k]; ok {
			return 0, orderGone
		}
		return 0, orderUnknown
	case !n.queued:
		return 0, orderPinned
	}
	sum, walked := 0.0, 0
	for p := o.head; p != n; p = p.next {
		sum += p.units
		if walked++; sum > limit || walked >= orderWalk {
			return max(sum, limit+1), orderQueued
		}
	}
	return sum, orderQueued
}

// One walk answers every claim of a prompt as a walk per claim would:
// queued (within and past the limit, and past orderWalk segments), pinned,
// trimmed, unknown, and a key asked twice.
func TestEvictOrderAheadOfWalksOnce(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 2))
	o := newEvictOrder()
	for i := range 1500 {
		o.release(segs(float64(1+rnd.IntN(100)), tree.Key(i+1)), int64(i))
	}
	o.pin([]tree.Key{7, 900})
	o.drop([]tree.Key{3})
	o.trim(2) // claims 1 and 2 are gone
	for _, limit := range []float64{0, 50, 5000, 30000, 1e18} {
		keys := []tree.Key{1, 2, 3, 7, 900, 5000, 10, 600, 10, 1200, 1499, 4, 513, 514}
		for range 20 {
			keys = append(keys, tree.Key(1+rnd.IntN(1500)))
		}
		out := make([]orderPlace, len(keys))
		o.aheadOf(keys, limit, out)
		for i, k := range keys {
			a, st := refAhead(o, k, limit)
			if out[i].state != st {
				t.Fatalf("limit %v, claim %d: state %d, want %d", limit, k, out[i].state, st)
			}
			if a <= limit && out[i].ahead != a || a > limit && out[i].ahead <= limit {
				t.Fatalf("limit %v, claim %d: ahead %v, want %v", limit, k, out[i].ahead, a)
			}
		}
		for _, n := range o.nodes {
			if n.slot != 0 {
				t.Fatalf("claim %d keeps slot %d after the walk", n.key, n.slot)
			}
		}
	}
	if st := refAheadState(o, 1); st != orderGone {
		t.Fatalf("trimmed claim 1: state %d, want gone (the test's premise)", st)
	}
	if a, _ := refAhead(o, 1400, 1e18); a <= 0 {
		t.Fatalf("claim 1400: nothing ahead (the test's premise: a walk past orderWalk)")
	}
}

func refAheadState(o *evictOrder, k tree.Key) orderState {
	_, st := refAhead(o, k, 1e18)
	return st
}

func TestEvictOrderPinsCount(t *testing.T) {
	o := newEvictOrder()
	o.release(segs(10, 7), 1)
	o.pin([]tree.Key{7})
	o.pin([]tree.Key{7})
	o.release([]segment{{key: 7, units: 10, pinned: true}}, 2)
	if _, st := o.ahead(7, 1e18); st != orderPinned {
		t.Fatalf("state %d while another request still pins it, want pinned", st)
	}
	o.release([]segment{{key: 7, units: 10, pinned: true}}, 3)
	aheadOf(t, o, 7)
}

// A claim matched by a request sent but not yet scheduled is not trimmed
// as gone: the engine holds it from the request's scheduling, which the
// router learns only at the first byte. It leaves the queue (not doubted)
// until that request ends; one that ends unscheduled forgets it.
func TestEvictOrderTrimSparesAwaited(t *testing.T) {
	o := newEvictOrder()
	o.release(segs(10, 1, 2), 1)
	o.release(segs(10, 3), 2)
	o.await([]tree.Key{1})
	o.await([]tree.Key{2})
	o.trim(5) // the engine evicted something released at 5
	if _, st := o.ahead(3, 1e18); st != orderGone {
		t.Fatalf("claim 3 (no request awaits it): state %d, want gone", st)
	}
	for _, k := range []tree.Key{1, 2} {
		if _, st := o.ahead(k, 1e18); st != orderPinned {
			t.Fatalf("claim %d awaited by a request in flight: state %d, want held", k, st)
		}
	}
	// Claim 1's request is scheduled, then answered: it queues again.
	o.pin([]tree.Key{1})
	o.release([]segment{{key: 1, units: 10, pinned: true}}, 6)
	if a := aheadOf(t, o, 1); a != 0 {
		t.Fatalf("claim 1 released after its request: ahead %v, want 0", a)
	}
	// Claim 2's request ends before its first byte: the claim is unknown.
	o.unawait([]tree.Key{2})
	if _, st := o.ahead(2, 1e18); st != orderUnknown || len(o.nodes) != 1 {
		t.Fatalf("claim 2 after its request ended unscheduled: state %d (%d segments), want unknown", st, len(o.nodes))
	}
	// A queued claim whose request ends unscheduled stays queued.
	o.await([]tree.Key{1})
	o.unawait([]tree.Key{1})
	aheadOf(t, o, 1)
}

// The order is bounded: past maxOrderNodes segments the front goes, and
// past maxOrderGone trimmed ones the oldest is forgotten.
func TestEvictOrderBounds(t *testing.T) {
	o := newEvictOrder()
	for i := range maxOrderNodes + 10 {
		o.release(segs(1, tree.Key(i+1)), int64(i))
	}
	if len(o.nodes) != maxOrderNodes || o.queued != maxOrderNodes {
		t.Fatalf("%d segments (%d queued), want %d", len(o.nodes), o.queued, maxOrderNodes)
	}
	if _, st := o.ahead(1, 1e18); st != orderUnknown {
		t.Fatalf("the first segment past the bound: state %d, want forgotten", st)
	}
	o.trim(maxOrderGone + 20)
	if len(o.gone) != maxOrderGone {
		t.Fatalf("%d trimmed segments remembered, want %d", len(o.gone), maxOrderGone)
	}
	if _, st := o.ahead(tree.Key(maxOrderGone+20), 1e18); st != orderGone {
		t.Fatalf("the last segment trimmed: state %d, want gone", st)
	}
}

func TestOrderRisk(t *testing.T) {
	for _, c := range []struct{ ahead, need, band, want float64 }{
		{1000, 100, 100, 0}, {100, 100, 100, 0}, {0, 100, 100, 0.5}, {0, 1000, 100, 1}, {0, 0, 0, 0},
	} {
		if got := orderRisk(c.ahead, c.need, c.band); got != c.want {
			t.Errorf("orderRisk(%v, %v, %v) = %v, want %v", c.ahead, c.need, c.band, got, c.want)
		}
	}
}

// What the engine allocates before a request is scheduled leaves out what
// it has computed of the head's prefill, never more than its booking.
func TestOrderNeed(t *testing.T) {
	for _, c := range []struct {
		l    LoadView
		want float64
	}{
		{LoadView{}, 0},
		{LoadView{PendingPrefill: 1000}, 1000},
		{LoadView{PendingPrefill: 1000, HeadBooked: 600, HeadProgress: 200}, 800},
		{LoadView{PendingPrefill: 1000, HeadBooked: 600, HeadProgress: 5000}, 400}, // past its booking: the head's rest is its own
		{LoadView{PendingPrefill: 100, HeadBooked: 600, HeadProgress: 500}, 0},
		{LoadView{PendingPrefill: 1000, PeerPendingPrefill: 5000}, 1000},
	} {
		if got := orderNeed(c.l); got != c.want {
			t.Errorf("orderNeed(%+v) = %v, want %v", c.l, got, c.want)
		}
	}
}

// BenchmarkEvictOrder is one request's use of an order of 20,000 segments:
// the lookups of a decision (a claim 100 segments from the front, walked
// to), its pin and its release.
func BenchmarkEvictOrder(b *testing.B) {
	o := newEvictOrder()
	for i := range 20000 {
		o.release(segs(1000, tree.Key(i+1)), int64(i))
	}
	rel := []segment{{key: 101, units: 1000, pinned: true}, {key: 1 << 40, units: 1000}}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if _, st := o.ahead(101, 1e9); st != orderQueued {
			b.Fatal("not queued")
		}
		o.pin([]tree.Key{101})
		rel[1].key = tree.Key(1<<40 + i)
		o.release(rel, int64(20000+i))
		o.drop([]tree.Key{rel[1].key})
	}
}

// BenchmarkEvictOrderLongPrompt is the order's part of the decision at
// its worst: a prompt of 200 claims (100,000 tokens at a claim every 512)
// released at the front of an order of 20,000 segments, with a booking no
// claim outlasts, so every claim is looked up as orderDiscount does: the
// deepest alone, then the others in one walk (aheadOf). A walk per claim
// took 22.4 us here.
func BenchmarkEvictOrderLongPrompt(b *testing.B) {
	o := newEvictOrder()
	prompt := make([]segment, 200)
	keys := make([]tree.Key, len(prompt)-1)
	for i := range prompt {
		prompt[i] = segment{key: tree.Key(1<<40 + i), units: 3000}
		if i < len(keys) {
			keys[i] = prompt[i].key
		}
	}
	o.release(prompt, 0)
	for i := range 20000 {
		o.release(segs(1000, tree.Key(i+1)), int64(i+1))
	}
	out := make([]orderPlace, len(keys))
	b.ReportAllocs()
	for b.Loop() {
		if _, st := o.ahead(prompt[len(prompt)-1].key, 1e9); st != orderQueued {
			b.Fatal("not queued")
		}
		o.aheadOf(keys, 1e9, out)
		if out[0].state != orderQueued || out[0].ahead != 3000*199 {
			b.Fatalf("shallowest claim: %+v", out[0])
		}
	}
}
