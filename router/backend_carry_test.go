package router

import (
	"net/http"
	"testing"
	"time"
)

// TestReplaceKeepsWhatAgesClaims: a backend rebuilt because its settings
// changed keeps its claims, so it keeps the written count and belief that
// age them; on the same URL it keeps its health (an ejected backend is not
// readmitted by a weight edit), on a new URL its health starts afresh.
func TestReplaceKeepsWhatAgesClaims(t *testing.T) {
	a, a2 := newFakeBackend(t, "a"), newFakeBackend(t, "a2")
	g := newDynRig(t, func(c *Config, _ *Deps) {
		c.Discovery.Models = nil
		c.EjectionTime = time.Hour // no probe readmits it during the test
		c.Backends = []BackendConfig{{Name: "a", URL: a.URL()}}
	})
	if st, _, body := g.call(http.MethodPost, "/v1/chat/completions", chat("m1", "a long system prompt for the cache", "q")); st != 200 {
		t.Fatalf("%d %s", st, body)
	}
	old := g.rt.backendByName("a")
	written := old.written.Load()
	if written == 0 {
		t.Fatal("nothing written by the request")
	}
	old.mu.Lock()
	old.health.ejectedAt, old.health.fails, old.health.ejections = time.Now(), 5, 1
	old.healthy.Store(false)
	old.mu.Unlock()
	old.belief.mu.Lock()
	old.belief.scale = 0.25
	old.belief.mu.Unlock()
	old.belief.doubt.Store(0x3fe0000000000000) // 0.5
	old.edge.observe(1000, 5000)
	old.order.release(segs(10, 1), 2000)

	if err := g.rt.SetBackends([]BackendConfig{{Name: "a", URL: a.URL(), Weight: 2}}); err != nil {
		t.Fatal(err)
	}
	nb := g.rt.backendByName("a")
	if nb == old || nb.weight != 2 {
		t.Fatalf("not replaced: same object %v, weight %v", nb == old, nb.weight)
	}
	if got := nb.written.Load(); got != written {
		t.Errorf("written %d after the weight edit, want %d (the mesh keeps the largest count it heard)", got, written)
	}
	nb.belief.mu.Lock()
	scale := nb.belief.scale
	nb.belief.mu.Unlock()
	if scale != 0.25 || nb.belief.doubt.Load() != 0x3fe0000000000000 {
		t.Errorf("belief lessons lost: scale %v, doubt bits %x", scale, nb.belief.doubt.Load())
	}
	if r, ok := nb.edge.retention(); !ok || r != 4000 {
		t.Errorf("eviction edge lost: retention %v (seen %v), want 4000 ms", r, ok)
	}
	if nb.order != old.order || nb.order.segments() != 1 {
		t.Errorf("eviction order not shared: same %v, %d segments", nb.order == old.order, nb.order.segments())
	}
	nb.mu.Lock()
	ejected := !nb.health.ejectedAt.IsZero()
	nb.mu.Unlock()
	if nb.healthy.Load() || !ejected {
		t.Errorf("an ejected backend came back by a weight edit: healthy %v, ejected %v", nb.healthy.Load(), ejected)
	}

	old.written.Add(7) // a request still in flight on the old object
	if got := nb.written.Load(); got != written+7 {
		t.Errorf("written %d after a late write on the old object, want %d", got, written+7)
	}
	written += 7

	// Readmitted from an ejection but not yet back in rotation (markSuccess
	// between its two lock sections, while it invalidates a cold cache):
	// the rebuilt object is in rotation, or nothing would ever put it back.
	nb.mu.Lock()
	nb.health.ejectedAt = time.Time{}
	nb.mu.Unlock()
	if err := g.rt.SetBackends([]BackendConfig{{Name: "a", URL: a.URL(), Weight: 1}}); err != nil {
		t.Fatal(err)
	}
	if re := g.rt.backendByName("a"); re == nb || !re.healthy.Load() {
		t.Errorf("not ejected, yet out of rotation after the rebuild (healthy %v)", re.healthy.Load())
	}

	// A new URL: another server. What ages the claims stays, health starts afresh.
	if err := g.rt.SetBackends([]BackendConfig{{Name: "a", URL: a2.URL(), Weight: 2}}); err != nil {
		t.Fatal(err)
	}
	moved := g.rt.backendByName("a")
	if moved.written.Load() != written {
		t.Errorf("written %d after the URL change, want %d", moved.written.Load(), written)
	}
	moved.mu.Lock()
	ejected = !moved.health.ejectedAt.IsZero()
	moved.mu.Unlock()
	if !moved.healthy.Load() || ejected {
		t.Errorf("a new URL inherited the old server's ejection: healthy %v, ejected %v", moved.healthy.Load(), ejected)
	}
}

// TestColdCacheOnlyForTheCurrentMember: a probe or scrape of an object
// that was replaced on another URL, or of a backend being removed, must not
// start a new generation of it in the registry (which, after the removal,
// would make it active again mesh-wide); one replaced on the same URL (its
// settings changed, not its server) saw that server restart, and the
// current object takes it.
func TestColdCacheOnlyForTheCurrentMember(t *testing.T) {
	a, a2, b := newFakeBackend(t, "a"), newFakeBackend(t, "a2"), newFakeBackend(t, "b")
	g := newDynRig(t, func(c *Config, _ *Deps) {
		c.Discovery.Models = nil
		c.Backends = []BackendConfig{{Name: "a", URL: a.URL()}, {Name: "b", URL: b.URL()}}
	})
	gen := func(name string) (uint16, bool) {
		id, _ := g.ix.BackendByName(name)
		gn, active := g.ix.Generation(id)
		return uint16(gn), active
	}
	// Each call is a new restart: seen after the generation before it.
	restart := func() time.Time { return time.Now().Add(time.Second) }
	old := g.rt.backendByName("a")
	if err := g.rt.SetBackends([]BackendConfig{{Name: "a", URL: a.URL(), Weight: 3}, {Name: "b", URL: b.URL()}}); err != nil {
		t.Fatal(err)
	}
	before, _ := gen("a")
	g.rt.coldCache(old, restart())
	after, _ := gen("a")
	if after == before {
		t.Error("a restart seen through the object replaced on the same URL started no new generation")
	}
	moved := g.rt.backendByName("a")
	if err := g.rt.SetBackends([]BackendConfig{{Name: "a", URL: a2.URL(), Weight: 3}, {Name: "b", URL: b.URL()}}); err != nil {
		t.Fatal(err)
	}
	before = after
	g.rt.coldCache(moved, restart()) // the old server, no longer this backend's
	if after, _ := gen("a"); after != before {
		t.Errorf("the object replaced on another URL started generation %d (was %d)", after, before)
	}
	g.rt.coldCache(g.rt.backendByName("a"), restart())
	if after, _ := gen("a"); after == before {
		t.Error("the current object's cold cache started no new generation")
	}

	bb := g.rt.backendByName("b")
	if err := g.rt.SetBackends([]BackendConfig{{Name: "a", URL: a2.URL(), Weight: 3}}); err != nil {
		t.Fatal(err)
	}
	before, _ = gen("b")
	g.rt.coldCache(bb, restart()) // draining
	if after, _ := gen("b"); after != before {
		t.Errorf("a draining backend's cold cache started generation %d (was %d)", after, before)
	}
	waitFor(t, "b's removal", func() bool { return g.removed("b") })
	g.rt.coldCache(bb, restart()) // removed
	if _, active := gen("b"); active {
		t.Error("a removed backend's cold cache made it active again in the registry")
	}
}
