package router

import (
	"net/http"
	"testing"

	"github.com/kvmesh/kvmesh/tree"
)

// A request routed on claims that its engine's events then end while it
// waits for its first byte has its booking restated: the backend's pending
// prefill counts the blocks past the deepest of its claims still standing,
// and all of it once every claim is gone; its release takes it all off.
func TestRestateBookingWhenItsClaimsAreEvicted(t *testing.T) {
	a := newTokenizingBackend(t, "a")
	g := evictRig(t, nil, a.fakeBackend)
	sys := longText("system", 3000)
	body := chat("m1", sys, longText("a question about the system prompt", 1500))
	g.post(t, body, 200)
	waitFor(t, "the answered prompt linked", func() bool {
		return g.counter("kvmesh_router_eviction_link_prompts_total", "outcome", "linked") == 1
	})
	ch := chainFor(t, g, EndpointChat, body, "")
	st := g.rt.getState()
	if aerr := g.rt.prepare(st, EndpointChat, []byte(body), ""); aerr != nil {
		t.Fatal(aerr)
	}
	sysUnits := int64(min(st.prompt.Ends[0]/ch.UnitsPerBlock*ch.UnitsPerBlock, ch.Units))
	g.rt.putState(st)
	held := int64(ch.UnitsAt(int(ch.Learn[len(ch.Learn)-1])))

	// The same prompt again, held at the backend before its first byte.
	a.mu.Lock()
	tokenizing := a.hook
	a.mu.Unlock()
	arrived, release := make(chan struct{}, 1), make(chan struct{})
	a.setHook(func(w http.ResponseWriter, r *http.Request, b []byte) {
		if r.URL.Path != "/tokenize" {
			arrived <- struct{}{}
			<-release
		}
		tokenizing(w, r, b)
	})
	done := g.postInBackground(body)
	<-arrived
	booked, n := pendingOf(g, "a")
	if n != 1 || booked != int64(ch.Units)-held {
		t.Fatalf("pending %d units in %d requests, want the %d units no claim holds in 1", booked, n, int64(ch.Units)-held)
	}
	sink := g.rt.EvictionSink(nil)
	id := g.rt.set.Load().listed[0].id
	// Another prompt's evictions restate nothing.
	sink.End(engineBlocks(t, g, chat("m1", longText("other", 3000), "q"), 0), id)
	if got, _ := pendingOf(g, "a"); got != booked {
		t.Fatalf("another prompt's evictions moved the pending units from %d to %d", booked, got)
	}
	// The engine evicts the blocks past the system message: the booking
	// counts them.
	sysEnd := len(engineTokens(t, []byte(chat("m1", sys)))) - 1
	sink.End(engineBlocks(t, g, body, sysEnd+32), id)
	if got, want := pendingOf2(g, "a"), booked+held-sysUnits; got != want {
		t.Fatalf("after the tail's eviction pending %d units, want %d (+%d past the system message's %d)", got, want, held-sysUnits, sysUnits)
	}
	// Then the rest: the whole prompt, counted once.
	sink.End(engineBlocks(t, g, body, 0), id)
	if got, want := pendingOf2(g, "a"), int64(ch.Units); got != want {
		t.Fatalf("after every block's eviction pending %d units, want the whole prompt's %d", got, want)
	}
	close(release)
	<-done
	if got, n := pendingOf(g, "a"); got != 0 || n != 0 {
		t.Fatalf("after the answer %d units in %d requests pending, want none", got, n)
	}
}

func pendingOf2(g *testRig, name string) int64 { u, _ := pendingOf(g, name); return u }

func TestBookedClaimsLost(t *testing.T) {
	ch := &tree.Chain{UnitsPerBlock: 64, Units: 64 * 100}
	for i := range 100 {
		ch.Keys = append(ch.Keys, tree.Key(1000+i))
	}
	ch.Learn = []int32{10, 20, 30, 40, 50, 60, 100}
	var c bookedClaims
	c.routedOn(ch, 60, 64*60)
	if c.n != maxBookedClaims || c.keys[0] != ch.Keys[29] || c.units[c.n-1] != 64*60 {
		t.Fatalf("remembered %d claims from %v (deepest %v units): want the 4 deepest within the match, 30..60", c.n, c.keys[:c.n], c.units[c.n-1])
	}
	for _, tc := range []struct {
		ended []tree.Key
		want  float64
	}{
		{nil, 0},
		{[]tree.Key{ch.Keys[99]}, 0}, // past the match
		{[]tree.Key{ch.Keys[59]}, 64 * (60 - 50)},       // the deepest: down to the next
		{[]tree.Key{ch.Keys[39]}, 64 * (60 - 30)},       // a middle one: all past the one before it
		{[]tree.Key{ch.Keys[49], ch.Keys[29]}, 64 * 60}, // the shallowest remembered: everything
	} {
		if got := c.lost(tc.ended); got != tc.want {
			t.Errorf("ended %v: lost %v, want %v", tc.ended, got, tc.want)
		}
	}
	c.routedOn(ch, 60, 64*5) // a booking that counted little as held loses no more
	if got := c.lost([]tree.Key{ch.Keys[29]}); got != 64*5 {
		t.Errorf("lost %v, want the saved 320", got)
	}
	c.routedOn(ch, 60, 0)
	if c.n != 0 {
		t.Errorf("a booking that counted nothing held remembers %d claims", c.n)
	}
}
