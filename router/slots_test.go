package router

import (
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"
)

// slotsHeld is how many names hold a slot, the highest slot given plus
// one, and how many written counts the router keeps for removed names.
func slotsHeld(rt *Router) (names, next, retired int) {
	rt.setMu.Lock()
	defer rt.setMu.Unlock()
	return len(rt.slots.byName), rt.slots.next, len(rt.retired)
}

// A router whose backends roll (every pod a new name, as under a
// Deployment) keeps per-name state only for the names it or the Index
// still knows: once the Index forgets a removed name, its slot, admission
// count and written count go, and the next new name reuses the slot.
// Before, 12 rolls left 13 slots and 11 written counts for good.
func TestSlotsOfForgottenNamesAreReused(t *testing.T) {
	a := newFakeBackend(t, "a")
	g := newDynRig(t, func(cfg *Config, _ *Deps) {
		cfg.Discovery.Models = nil
		cfg.Backends = []BackendConfig{{Name: "fixed", URL: a.URL()}}
	})
	later := func() int64 { return time.Now().Add(7 * time.Hour).UnixMilli() } // past the 6 h horizon
	prev := ""
	for i := range 12 {
		name := fmt.Sprintf("pod-%d", i)
		if err := g.rt.SetBackends([]BackendConfig{{Name: "fixed", URL: a.URL()}, {Name: name, URL: a.URL()}}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, name+" serving", func() bool { _, serving := g.member(name); return serving })
		if prev != "" {
			waitFor(t, prev+"'s removal", func() bool { return g.removed(prev) })
		}
		// The Index has not forgotten prev yet: its slot stays.
		if g.rt.reclaimSlots() != 0 {
			t.Fatalf("roll %d: a slot freed before the Index forgot its name", i)
		}
		g.ix.ForgetRemoved(later(), nil)
		if prev != "" {
			if n := g.rt.reclaimSlots(); n != 1 {
				t.Fatalf("roll %d: freed %d slots, want %s's", i, n, prev)
			}
		}
		prev = name
	}
	names, next, retired := slotsHeld(g.rt)
	if names != 2 || next > 3 || retired != 0 {
		t.Fatalf("after 12 rolls: %d names hold slots, %d slots given, %d written counts kept; want 2, at most 3, 0", names, next, retired)
	}
	// The fixed slot (the configured backend's: precise mode's tables
	// name it) and the current pod's are distinct, and both route.
	f, p := g.rt.backendByName("fixed"), g.rt.backendByName(prev)
	if f == nil || p == nil || f.slot != 0 || p.slot == 0 {
		t.Fatalf("slots: fixed %v, %s %v", f, prev, p)
	}
	for range 4 {
		resp := g.do(http.MethodPost, "/v1/chat/completions", `{"model":"m1","messages":[{"role":"user","content":"hello"}]}`)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("request after the rolls: %d %s", resp.StatusCode, body)
		}
	}
}

// A name given back before the Index forgot it, or the fixed slots, are
// never handed to another name.
func TestSlotTable(t *testing.T) {
	st := newSlotTable(2)
	for _, n := range []string{"a", "b"} {
		s, fresh := st.take(n)
		if !fresh {
			t.Fatalf("%s: not fresh", n)
		}
		st.keep(n, s)
	}
	st.fixed = st.next
	if s, fresh := st.take("a"); fresh || s != 0 {
		t.Fatalf("a again: slot %d fresh %v, want 0 kept", s, fresh)
	}
	if s, ok := st.release("a"); ok || s != 0 {
		t.Fatalf("release a: slot %d freed %v; a fixed slot stays its name's", s, ok)
	}
	if s, fresh := st.take("a"); fresh || s != 0 {
		t.Fatalf("a after its release: slot %d fresh %v, want 0 kept", s, fresh)
	}
	c, _ := st.take("c")
	if c != 2 {
		t.Fatalf("c took slot %d: a fixed slot was reused or a slot skipped", c)
	}
	st.keep("c", c)
	if s, ok := st.release("c"); !ok || s != 2 {
		t.Fatalf("release c: slot %d freed %v", s, ok)
	}
	d, fresh := st.take("d")
	if d != 2 || !fresh {
		t.Fatalf("d took %d (fresh %v), want c's freed slot 2", d, fresh)
	}
	st.giveBack(d) // the backend could not be built
	if e, _ := st.take("e"); e != 2 {
		t.Fatalf("e took %d, want the slot d gave back", e)
	}
}

// A backend configured at New in precise mode that is removed, forgotten
// by the Index and listed again is in precise mode again: precise mode's
// tables name the configured backends by slot, so the name must find its
// slot again. Before, the reclaim dropped the name's hold on its fixed
// slot (the slot itself was never reused), and the name came back in a
// new slot, past precise mode's tables: silently approximate.
func TestFixedSlotKeepsItsName(t *testing.T) {
	a, b := newTokenizingBackend(t, "a"), newFakeBackend(t, "b")
	g := preciseRig(t, func(pc *PreciseConfig) { pc.Backends = []string{"a"} }, a.fakeBackend, b)
	ca := BackendConfig{Name: "a", URL: a.URL(), Models: a.models}
	cb := BackendConfig{Name: "b", URL: b.URL(), Models: b.models}
	if !g.rt.precise.on(g.rt.backendByName("a")) {
		t.Fatal("a is not in precise mode at start")
	}
	if err := g.rt.SetBackends([]BackendConfig{cb}); err != nil {
		t.Fatal(err)
	}
	for range removeIdleChecks {
		g.rt.sweepRemoved()
	}
	if g.rt.backendByName("a") != nil {
		t.Fatal("a was not removed")
	}
	g.ix.ForgetRemoved(time.Now().Add(7*time.Hour).UnixMilli(), nil) // past the 6 h horizon
	if _, known := g.ix.BackendByName("a"); known {
		t.Fatal("the Index did not forget a")
	}
	g.rt.reclaimSlots()
	if err := g.rt.SetBackends([]BackendConfig{ca, cb}); err != nil {
		t.Fatal(err)
	}
	back := g.rt.backendByName("a")
	if back == nil {
		t.Fatal("a is not listed again")
	}
	if back.slot != 0 || !g.rt.precise.on(back) {
		t.Fatalf("a listed again: slot %d, precise mode %v; want slot 0, on", back.slot, g.rt.precise.on(back))
	}
	if names, next, _ := slotsHeld(g.rt); names != 2 || next != 2 {
		t.Fatalf("%d names hold slots, %d slots given; want 2 and 2", names, next)
	}
}
