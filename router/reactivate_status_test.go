package router

import (
	"sync/atomic"
	"testing"
	"time"
)

// A backend this node no longer lists (draining its requests before its
// removal ends) that a peer has already removed from the registry is not
// shown as "removed by a peer, back in N s": this node will not bring it
// back (reactivate only overrules removals of backends it lists). Before,
// the status page and /admin/backends counted down to 0 and then said
// "back in 0 ms" until the drain ended, and the backend never came back.
func TestRemovingBackendNotShownComingBack(t *testing.T) {
	a, b := newFakeBackend(t, "a"), newFakeBackend(t, "b")
	var now atomic.Int64
	now.Store(time.Now().UnixMilli())
	g := newRig(t, func(c *Config, d *Deps) {
		c.Discovery.Interval = 10 * time.Second
		d.Now = func() time.Time { return time.UnixMilli(now.Load()) }
	}, a, b) // not started: no sweep, so a stays removing
	if err := g.rt.SetBackends([]BackendConfig{{Name: "b", URL: b.URL(), Models: b.models}}); err != nil {
		t.Fatal(err)
	}
	ba := g.rt.backendByName("a")
	if ba == nil || !ba.removing.Load() {
		t.Fatal("a is not being removed")
	}
	l := NewLocalLearner(g.ix, "peer")
	l.Now = func() time.Time { return time.UnixMilli(now.Load()) }
	l.Invalidate("a", true) // the peer's drain ended first
	now.Add((30 * time.Second).Milliseconds())
	g.rt.reactivate()
	if _, active := g.ix.Generation(ba.id); active {
		t.Fatal("a backend this node no longer lists was made active again")
	}
	var page Status
	g.rt.ReadStatus(&page)
	for _, p := range page.Backends {
		if p.Name == "a" && (p.RegistryRemoved || p.ReactivateInMs != 0) {
			t.Errorf("status page: a, removed here, reads removed by a peer, back in %d ms", p.ReactivateInMs)
		}
	}
	for _, s := range g.rt.Backends() {
		if s.Name == "a" && (s.RegistryRemoved || s.ReactivateInMs != nil) {
			t.Errorf("/admin/backends: a, removed here, has registry_removed %v, reactivate_in_ms %v", s.RegistryRemoved, *s.ReactivateInMs)
		}
	}
}
