package router

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/kvmesh/kvmesh/tree"
)

// claimsOf counts the live claims the index holds for backend id.
func claimsOf(ix *tree.Index, id tree.BackendID) int {
	n := 0
	ix.Range(time.Now().UnixMilli(), func(c *tree.Claim) bool {
		if c.Backend == id {
			n++
		}
		return true
	})
	return n
}

// The Index forgets a removed backend's name (and gives its id to a new
// one) only once the router no longer holds it: a listed backend that a
// peer removed keeps its id, a backend the router swept out does not, and
// a request of the swept one still in flight learns nothing for the
// backend that takes its id.
func TestForgetOnlyWhatTheRouterLetGo(t *testing.T) {
	a, b := newFakeBackend(t, "a"), newFakeBackend(t, "b")
	g := newDynRig(t, func(cfg *Config, _ *Deps) {
		cfg.Discovery.Models = nil
		cfg.Backends = []BackendConfig{{Name: "a", URL: a.URL()}, {Name: "b", URL: b.URL()}}
	})
	later := time.Now().Add(7 * time.Hour).UnixMilli() // past the default 6 h horizon
	// A peer removes a, which this node still lists.
	NewLocalLearner(g.ix, "peer").Invalidate("a", true)
	idA := g.rt.backendByName("a").id
	if freed := g.ix.ForgetRemoved(later, nil); len(freed) != 0 {
		t.Fatalf("forgot %v: a is listed here", freed)
	}
	if id, ok := g.ix.BackendByName("a"); !ok || id != idA {
		t.Fatalf("a: id %d %v, want kept at %d", id, ok, idA)
	}
	// b leaves the list and is swept out.
	old := g.rt.backendByName("b")
	if err := g.rt.SetBackends([]BackendConfig{{Name: "a", URL: a.URL()}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "b's removal", func() bool { return g.removed("b") })
	if !old.gone.Load() {
		t.Fatal("the swept b is not marked gone")
	}
	freed := g.ix.ForgetRemoved(later, nil)
	if len(freed) != 1 || freed[0] != old.id {
		t.Fatalf("freed %v, want b's id %d", freed, old.id)
	}
	c, err := g.ix.EnsureBackend("c")
	if err != nil || c != old.id {
		t.Fatalf("c got id %d (%v), want b's %d", c, err, old.id)
	}
	// b's request still in flight ends: it must not learn for c.
	var ch tree.Chain
	g.ix.Keyer().Bytes(&ch, tree.NewSeed("m1", "", ""), []byte("a prompt long enough to make a few blocks of claims, a few blocks of claims"), nil)
	g.rt.learnOn(old, &ch, time.Minute)
	if n := claimsOf(g.ix, c); n != 0 {
		t.Fatalf("a late answer of the removed b made %d claims for c", n)
	}
	// The same learn for c itself does (the check is not vacuous).
	g.rt.learner.Learn(&ch, c, time.Minute)
	if claimsOf(g.ix, c) == 0 {
		t.Fatal("the prompt makes no claim for c")
	}
}

// A backend name the mesh's wire cannot carry is refused in the
// configuration and in a backend list, with the reason.
func TestBackendNameTooLong(t *testing.T) {
	long := "http://b.example/" + strings.Repeat("p", tree.MaxBackendNameBytes)
	cfg := DefaultConfig()
	cfg.Backends = []BackendConfig{{URL: long}}
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "256-byte limit") {
		t.Fatalf("config with a %d-byte name: %v", len(long), err)
	}
	if err := (BackendConfig{URL: long}).check(); err == nil || !strings.Contains(err.Error(), "shorter name") {
		t.Fatalf("backend list entry: %v", err)
	}
	if err := (BackendConfig{Name: "short", URL: long}).check(); err != nil {
		t.Fatalf("a long URL with a short name: %v", err)
	}
}

// sglang_cache_aware's private tree registers every backend name it sees:
// once its registry is full (a Deployment's rollouts), the names not among
// the candidates for a tree TTL make room, and a new backend is scored
// again instead of never holding anything.
func TestSGLangPrivateTreeMakesRoomForNewNames(t *testing.T) {
	cfg := DefaultSGLangConfig()
	cfg.TreeCapacity = 1 << 12
	cfg.TreeTTL = time.Minute
	tc := tree.DefaultConfig()
	tc.Capacity, tc.MaxBackends = 1<<10, 3
	shared, err := tree.New(tc)
	if err != nil {
		t.Fatal(err)
	}
	p, err := newSGLangPolicy(cfg, shared)
	if err != nil {
		t.Fatal(err)
	}
	old := newPolicyCase(20, 5, "a", "b", "c")
	old.choose(p) // the prompt goes into one of them
	// Two minutes later a rollout renamed b and c; a is still listed.
	pc := newPolicyCase(20, 5, "a", "d", "e")
	pc.req.Now = old.req.Now.Add(2 * time.Minute)
	pc.choose(p)
	for _, name := range []string{"a", "d", "e"} {
		if _, ok := p.ids[name]; !ok {
			t.Errorf("%s has no id in the private tree", name)
		}
	}
	for _, name := range []string{"b", "c"} {
		if _, ok := p.ids[name]; ok {
			t.Errorf("%s, gone for two TTLs, still holds an id", name)
		}
	}
	// d holds what it was sent: a repeat goes there by prefix.
	pc.inflight(0, 5, 0)
	if n, d := pc.choose(p); d.Reason != ReasonPrefix {
		t.Fatalf("repeat after the rollout: chose %s %v, want a prefix route", n, d.Reason)
	}
	// b, pruned, is a candidate again (a pod that kept its name): it
	// holds what it is sent from then on.
	back := newPolicyCase(20, 9, "b")
	back.req.Now = pc.req.Now.Add(2 * time.Minute) // the others unseen for a TTL: room again
	back.choose(p)
	if n, d := back.choose(p); n != "b" || d.Reason != ReasonPrefix {
		t.Fatalf("b back: repeat chose %s %v, want b by prefix", n, d.Reason)
	}
}

// A backend dropped from the list before its first probe answered (a pod
// that never became ready) is removed from the registry like one that
// served, so its name can be forgotten and its id freed.
func TestStartingBackendDroppedIsRemoved(t *testing.T) {
	a := newFakeBackend(t, "a")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() { // accepts and never answers: the first probe hangs
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() })
		}
	}()
	g := newDynRig(t, func(cfg *Config, _ *Deps) {
		cfg.Discovery.Models = nil
		cfg.Backends = []BackendConfig{{Name: "a", URL: a.URL()}}
		cfg.ProbeTimeout = 10 * time.Minute // hung stays starting however slow the machine
	})
	hung := BackendConfig{Name: "hung", URL: "http://" + ln.Addr().String(), Models: []string{"m1"}}
	if err := g.rt.SetBackends([]BackendConfig{{Name: "a", URL: a.URL()}, hung}); err != nil {
		t.Fatal(err)
	}
	if known, serving := g.member("hung"); !known || serving {
		t.Fatalf("hung: known %v serving %v, want starting", known, serving)
	}
	if err := g.rt.SetBackends([]BackendConfig{{Name: "a", URL: a.URL()}}); err != nil {
		t.Fatal(err)
	}
	id, ok := g.ix.BackendByName("hung")
	if !ok {
		t.Fatal("hung was never registered (the test would prove nothing)")
	}
	if e, _ := g.ix.Backend(id); e.State != tree.BackendRemoved {
		t.Fatalf("hung's entry %+v, want removed", e)
	}
	if freed := g.ix.ForgetRemoved(time.Now().Add(7*time.Hour).UnixMilli(), nil); len(freed) != 1 || freed[0] != id {
		t.Fatalf("freed %v, want hung's id %d", freed, id)
	}
}
