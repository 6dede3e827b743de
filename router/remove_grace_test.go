package router

import (
	"sync"
	"testing"
	"time"

	"github.com/kvmesh/kvmesh/tree"
)

// A backend that leaves the list and comes back within
// Discovery.RemoveGrace (a readiness flap) keeps its claims and
// generation; one that stays out past it is removed, its claims
// invalidated, as before.
func TestRemoveGraceKeepsAFlappingBackend(t *testing.T) {
	a, b := newFakeBackend(t, "a"), newFakeBackend(t, "b")
	var mu sync.Mutex
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	g := newRig(t, func(c *Config, d *Deps) {
		c.Discovery.RemoveGrace = 30 * time.Second
		c.ProbeInterval = 0
		d.Now = clock
	}, a, b)
	A := BackendConfig{Name: "a", URL: a.URL(), Models: []string{"m1"}}
	B := BackendConfig{Name: "b", URL: b.URL(), Models: []string{"m1"}}
	id := g.rt.backendByName("a").id
	state := func() (uint16, tree.BackendState) {
		gen, _ := g.ix.Generation(id)
		e, _ := g.ix.Backend(id)
		return gen, e.State
	}
	sweep := func() {
		for i := 0; i < removeIdleChecks+1; i++ {
			g.rt.sweepRemoved()
		}
	}

	if err := g.rt.SetBackends([]BackendConfig{B}); err != nil {
		t.Fatal(err)
	}
	advance(20 * time.Second)
	sweep()
	if g.rt.backendByName("a") == nil {
		t.Fatal("a removed 20 s after it left the list, inside its 30 s grace")
	}
	if err := g.rt.SetBackends([]BackendConfig{A, B}); err != nil {
		t.Fatal(err)
	}
	if gen, st := state(); gen != 0 || st == tree.BackendRemoved || !g.rt.backendByName("a").inRotation() {
		t.Fatalf("a back within the grace: generation %d, state %v, in rotation %v", gen, st, g.rt.backendByName("a").inRotation())
	}

	if err := g.rt.SetBackends([]BackendConfig{B}); err != nil {
		t.Fatal(err)
	}
	advance(31 * time.Second)
	sweep()
	if g.rt.backendByName("a") != nil {
		t.Fatal("a still a member 31 s after it left the list")
	}
	if _, st := state(); st != tree.BackendRemoved {
		t.Errorf("a's registry state %v after its grace, want removed", st)
	}
}
