package tree

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
)

const hour = 60 * minute

// forgetRig is an Index that forgets removals after one hour, with backend
// "a" holding a learned conversation and removed at removedAt.
type forgetRig struct {
	ix        *Index
	a, b      BackendID
	ch        *Chain
	removedAt int64
	removal   BackendEntry
}

func newForgetRig(t *testing.T, mod func(*Config)) *forgetRig {
	t.Helper()
	ix := newTestIndex(t, func(c *Config) {
		c.ForgetRemovedMillis = hour
		if mod != nil {
			mod(c)
		}
	})
	ids := backends(t, ix, "a", "b")
	r := rand.New(rand.NewPCG(7, 7))
	toks := randTokens(r, 16*12)
	ch := chainOf(ix, toks, 16*6, len(toks))
	now := int64(10 * hour)
	ix.Learn(ch, ids[0], MakeTimestamp(now, 0), minute, 1, now, nil)
	ix.Learn(ch, ids[1], MakeTimestamp(now, 0), minute, 1, now, nil)
	removedAt := now + 1000
	e, err := ix.Invalidate("a", true, MakeTimestamp(removedAt, 0), 1)
	if err != nil {
		t.Fatal(err)
	}
	return &forgetRig{ix: ix, a: ids[0], b: ids[1], ch: ch, removedAt: removedAt, removal: e}
}

// slotsOf counts the table's slots that name backend id, dead or alive.
func slotsOf(ix *Index, id BackendID) int {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	n := 0
	for i := range ix.t.slots {
		if ix.t.slots[i].key.Load() != 0 && BackendID(ix.t.slots[i].meta.Load()) == id {
			n++
		}
	}
	return n
}

func TestForgetRemovedFreesTheIDForANewName(t *testing.T) {
	g := newForgetRig(t, nil)
	ix := g.ix
	if freed := ix.ForgetRemoved(g.removedAt+hour-1, nil); len(freed) != 0 {
		t.Fatalf("forgot %v before the horizon", freed)
	}
	if _, ok := ix.BackendByName("a"); !ok {
		t.Fatal("a lost its id before the horizon")
	}
	if slotsOf(ix, g.a) == 0 {
		t.Fatal("the rig has no slot of a to sweep (the test would prove nothing)")
	}
	now := g.removedAt + hour + 1
	freed := ix.ForgetRemoved(now, nil)
	if len(freed) != 1 || freed[0] != g.a {
		t.Fatalf("freed %v, want [%d]", freed, g.a)
	}
	if n := slotsOf(ix, g.a); n != 0 {
		t.Fatalf("%d slots still name the freed id", n)
	}
	if _, ok := ix.BackendByName("a"); ok {
		t.Fatal("a still has an id")
	}
	if e, ok := ix.Forgotten("a"); !ok || e != g.removal {
		t.Fatalf("forgotten a = %+v, %v; want its removal %+v", e, ok, g.removal)
	}
	s := ix.Stats()
	if s.Backends != 1 || s.Forgotten != 1 || s.ForgotTotal != 1 {
		t.Fatalf("stats: %d backends, %d forgotten, %d forgot in all; want 1, 1, 1", s.Backends, s.Forgotten, s.ForgotTotal)
	}
	// The next new name takes a's id, active at generation 0, and matches
	// nothing of a's.
	c, err := ix.EnsureBackend("c")
	if err != nil || c != g.a {
		t.Fatalf("c got id %d (%v), want the freed %d", c, err, g.a)
	}
	if gen, active := ix.Generation(c); gen != 0 || !active {
		t.Fatalf("c: generation %d active %v, want 0 and active", gen, active)
	}
	var res Result
	ix.Lookup(g.ch, now, &res)
	if res.Depth(c) != 0 {
		t.Fatalf("c matches %d blocks of a's conversation", res.Depth(c))
	}
	// A second pass has nothing to do.
	if freed := ix.ForgetRemoved(now+hour, nil); len(freed) != 0 {
		t.Fatalf("second pass freed %v", freed)
	}
}

func TestForgottenNameRefusesLateCopies(t *testing.T) {
	g := newForgetRig(t, nil)
	ix := g.ix
	ix.ForgetRemoved(g.removedAt+hour+1, nil)
	before := ix.Stats().Backends
	// The entry a had before its removal (generation 0, active), and the
	// removal itself, arriving late from a peer: refused, no id taken.
	for _, e := range []BackendEntry{{Name: "a", State: BackendActive}, g.removal} {
		if _, _, err := ix.JoinBackend(e); !errors.Is(err, ErrBackendForgotten) {
			t.Fatalf("join %+v: %v, want ErrBackendForgotten", e, err)
		}
	}
	if got := ix.Stats().Backends; got != before {
		t.Fatalf("late copies took ids: %d backends, want %d", got, before)
	}
	// A newer entry (the name listed again on a peer) wins and takes an id.
	newer := BackendEntry{Name: "a", Gen: g.removal.Gen + 1, State: BackendActive, Time: MakeTimestamp(g.removedAt+2*hour, 0), Origin: 2}
	id, changed, err := ix.JoinBackend(newer)
	if err != nil || !changed {
		t.Fatalf("newer entry: changed %v, %v", changed, err)
	}
	if e, _ := ix.Backend(id); e != newer {
		t.Fatalf("a's entry %+v, want %+v", e, newer)
	}
	if _, ok := ix.Forgotten("a"); ok {
		t.Fatal("a is still kept as forgotten")
	}
}

func TestForgottenNameListedAgainGoesOnFromItsGeneration(t *testing.T) {
	g := newForgetRig(t, nil)
	ix := g.ix
	ix.ForgetRemoved(g.removedAt+hour+1, nil)
	id, err := ix.EnsureBackend("a")
	if err != nil {
		t.Fatal(err)
	}
	if gen, active := ix.Generation(id); gen != g.removal.Gen || active {
		t.Fatalf("a named again: generation %d active %v, want its removal's %d, removed", gen, active, g.removal.Gen)
	}
	e, err := ix.Invalidate("a", false, MakeTimestamp(g.removedAt+2*hour, 0), 1)
	if err != nil {
		t.Fatal(err)
	}
	if e.Gen != g.removal.Gen+1 || e.State != BackendActive {
		t.Fatalf("listed again: %+v, want generation %d, active", e, g.removal.Gen+1)
	}
	// A peer that still holds the old removal cannot take it back.
	if _, changed, _ := ix.JoinBackend(g.removal); changed {
		t.Fatal("the old removal won over the new generation")
	}
}

func TestOldRemovalOfAnUnknownNameTakesNoID(t *testing.T) {
	ix := newTestIndex(t, func(c *Config) { c.ForgetRemovedMillis = hour; c.MaxBackends = 2 })
	backends(t, ix, "x", "y")
	now := int64(10 * hour)
	ix.ForgetRemoved(now, nil) // sets the horizon; nothing to forget
	old := BackendEntry{Name: "gone", Gen: 3, State: BackendRemoved, Time: MakeTimestamp(now-2*hour, 0), Origin: 9}
	if _, _, err := ix.JoinBackend(old); !errors.Is(err, ErrBackendForgotten) {
		t.Fatalf("old removal of an unknown name: %v, want ErrBackendForgotten (the registry is full: it must not need an id)", err)
	}
	if e, ok := ix.Forgotten("gone"); !ok || e != old {
		t.Fatalf("kept %+v, %v", e, ok)
	}
	// A recent removal of an unknown name needs an id as before (full: refused).
	recent := BackendEntry{Name: "recent", Gen: 1, State: BackendRemoved, Time: MakeTimestamp(now-minute, 0), Origin: 9}
	if _, _, err := ix.JoinBackend(recent); !errors.Is(err, ErrTooManyBackends) {
		t.Fatalf("recent removal: %v, want ErrTooManyBackends", err)
	}
	// An old *active* entry of an unknown name is a joining node's view of
	// a long-lived backend: accepted.
	ix2 := newTestIndex(t, func(c *Config) { c.ForgetRemovedMillis = hour })
	ix2.ForgetRemoved(now, nil)
	if _, changed, err := ix2.JoinBackend(BackendEntry{Name: "old-active", Gen: 1, State: BackendActive, Time: MakeTimestamp(now-5*hour, 0), Origin: 9}); err != nil || !changed {
		t.Fatalf("old active entry: changed %v, %v", changed, err)
	}
}

func TestRegistryNeverFillsWithRollouts(t *testing.T) {
	// Two ids; a rollout replaces both names every simulated hour for 100
	// hours. Without forgetting the third name is refused.
	ix := newTestIndex(t, func(c *Config) { c.ForgetRemovedMillis = hour; c.MaxBackends = 2; c.MaxForgotten = 8 })
	now := int64(10 * hour)
	live := []string{}
	for round := 0; round < 100; round++ {
		for _, n := range live {
			if _, err := ix.Invalidate(n, true, MakeTimestamp(now, 0), 1); err != nil {
				t.Fatal(err)
			}
		}
		now += hour + 1
		ix.ForgetRemoved(now, nil)
		live = live[:0]
		for i := 0; i < 2; i++ {
			n := fmt.Sprintf("pod-%d-%d", round, i)
			if _, err := ix.EnsureBackend(n); err != nil {
				t.Fatalf("round %d: %s: %v", round, n, err)
			}
			live = append(live, n)
		}
	}
	if s := ix.Stats(); s.Forgotten > 8 || s.Backends != 2 {
		t.Fatalf("%d forgotten (max 8), %d backends (want 2)", s.Forgotten, s.Backends)
	}
	// The newest forgotten names are kept, the oldest dropped.
	if _, ok := ix.Forgotten("pod-98-1"); !ok {
		t.Fatal("a recent name was dropped")
	}
	if _, ok := ix.Forgotten("pod-0-0"); ok {
		t.Fatal("the oldest name was kept past MaxForgotten")
	}
	// Without forgetting, the same rollouts fill the registry.
	never := newTestIndex(t, func(c *Config) { c.ForgetRemovedMillis = 0; c.MaxBackends = 2 })
	backends(t, never, "p0", "p1")
	never.Invalidate("p0", true, MakeTimestamp(now, 0), 1)
	never.ForgetRemoved(now+10*hour, nil)
	if _, err := never.EnsureBackend("p2"); !errors.Is(err, ErrTooManyBackends) {
		t.Fatalf("ForgetRemovedMillis 0 freed an id: %v", err)
	}
}

func TestClaimOfAFreeIDIsRefused(t *testing.T) {
	g := newForgetRig(t, nil)
	now := g.removedAt + hour + 1
	g.ix.ForgetRemoved(now, nil)
	c := Claim{Key: 12345, Backend: g.a, Gen: 0, Time: MakeTimestamp(now, 0), Expires: now + minute, Origin: 1}
	if o := g.ix.Upsert(c, now); o != RejectedInvalid {
		t.Fatalf("claim of a free id: %v, want invalid", o)
	}
	if n := slotsOf(g.ix, g.a); n != 0 {
		t.Fatalf("%d slots name the free id", n)
	}
}

func TestForgetConfigValidation(t *testing.T) {
	for _, mod := range []func(*Config){
		func(c *Config) { c.ForgetRemovedMillis = -1 },
		func(c *Config) { c.MaxForgotten = -1 },
	} {
		cfg := DefaultConfig()
		mod(&cfg)
		if err := cfg.Validate(); err == nil {
			t.Fatalf("%+v validated", cfg)
		}
	}
}

// A removal that arrives late (stamped long before: a healed partition, a
// lagging clock) gets the whole horizon from its arrival.
func TestLateRemovalGetsTheHorizonFromItsArrival(t *testing.T) {
	ix := newTestIndex(t, func(c *Config) { c.ForgetRemovedMillis = hour })
	backends(t, ix, "a")
	arrival := int64(10 * hour)
	removal := BackendEntry{Name: "a", Gen: 1, State: BackendRemoved, Time: MakeTimestamp(arrival-2*hour, 0), Origin: 2}
	if _, changed, err := ix.JoinBackendAt(removal, arrival); err != nil || !changed {
		t.Fatalf("removal: changed %v, %v", changed, err)
	}
	if freed := ix.ForgetRemoved(arrival+hour-1, nil); len(freed) != 0 {
		t.Fatalf("forgot %v an hour after a removal stamped two hours before it arrived", freed)
	}
	if freed := ix.ForgetRemoved(arrival+hour+1, nil); len(freed) != 1 {
		t.Fatalf("freed %v a horizon after the arrival, want one", freed)
	}
}

// A name a holder still uses (a router listing it, a KV-event stream) is
// never forgotten, whatever its registry entry says.
func TestNameInUseIsNotForgotten(t *testing.T) {
	g := newForgetRig(t, nil)
	used := true
	g.ix.AddInUse(func(name string) bool { return used && name == "a" })
	now := g.removedAt + hour + 1
	if freed := g.ix.ForgetRemoved(now, nil); len(freed) != 0 {
		t.Fatalf("forgot %v while in use", freed)
	}
	if id, ok := g.ix.BackendByName("a"); !ok || id != g.a {
		t.Fatalf("a: id %d %v, want it kept at %d", id, ok, g.a)
	}
	used = false
	if freed := g.ix.ForgetRemoved(now, nil); len(freed) != 1 {
		t.Fatalf("freed %v once no longer in use, want one", freed)
	}
}

// A stale claim no sweep has reached yet never blocks a current one, even
// once the backend's generation has moved more than half the 16-bit space
// past it (serial arithmetic would call the current one older).
func TestDeadSlotGivesWayAfterGenerationWrap(t *testing.T) {
	ix := newTestIndex(t, func(c *Config) { c.Capacity = 1 << 14; c.SweepPerWrite = 0 })
	b := backends(t, ix, "x")[0]
	now := int64(1_000_000_000)
	key := Key(0x8000_0000_0000_1234)
	if o := ix.Upsert(Claim{Key: key, Backend: b, Time: MakeTimestamp(now, 0), Expires: now + 600_000, Origin: 1}, now); o != Inserted {
		t.Fatal(o)
	}
	for i := 0; i < 40_000; i++ { // a KV-event stream losing its place, over a day
		if _, err := ix.Invalidate("x", false, MakeTimestamp(now+int64(i)+1, 0), 1); err != nil {
			t.Fatal(err)
		}
	}
	now += 50_000
	gen, _ := ix.Generation(b)
	if o := ix.Upsert(Claim{Key: key, Backend: b, Gen: gen, Time: MakeTimestamp(now, 0), Expires: now + 600_000, Origin: 1}, now); o != Replaced {
		t.Fatalf("current-generation claim over a stale one: %v, want replaced", o)
	}
	var res Result
	ix.Lookup(&Chain{Keys: []Key{key}}, now, &res)
	if res.Depth(b) != 1 {
		t.Fatalf("lookup depth %d, want 1", res.Depth(b))
	}
}

// A name the replication wire could not carry is refused when registered.
func TestBackendNameLengthLimit(t *testing.T) {
	ix := newTestIndex(t, nil)
	name := ""
	for len(name) <= MaxBackendNameBytes {
		name += "http://very-long-backend-name.example/"
	}
	if _, err := ix.EnsureBackend(name); err == nil {
		t.Fatalf("a %d-byte name was registered", len(name))
	}
	if _, err := ix.EnsureBackend(name[:MaxBackendNameBytes]); err != nil {
		t.Fatalf("a %d-byte name: %v", MaxBackendNameBytes, err)
	}
}
