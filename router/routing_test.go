package router

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
)

func fourBackends(t *testing.T) []*fakeBackend {
	return []*fakeBackend{newFakeBackend(t, "a"), newFakeBackend(t, "b"), newFakeBackend(t, "c"), newFakeBackend(t, "d")}
}

// kvmesh sends a conversation's next turn to the backend that served the
// turn before, with most of the prompt matched.
func TestKVMeshConversationNextTurnSameBackend(t *testing.T) {
	g := newRig(t, nil, fourBackends(t)...)
	used := map[string]bool{}
	for c := 0; c < 8; c++ {
		sys := longText(fmt.Sprintf("system prompt of app %d", c), 1500)
		u1 := longText(fmt.Sprintf("conversation %d question", c), 400)
		status, r1, _ := g.call("POST", "/v1/chat/completions", chat("m1", sys, u1))
		if status != 200 {
			t.Fatal(status)
		}
		first := routeField(r1, "backend")
		used[first] = true
		status, r2, _ := g.call("POST", "/v1/chat/completions", chat("m1", sys, u1, "an answer", "a follow-up"))
		if status != 200 {
			t.Fatal(status)
		}
		if got := routeField(r2, "backend"); got != first || routeField(r2, "reason") != "prefix" {
			t.Fatalf("conversation %d: turn 1 on %s, turn 2 %q", c, first, r2)
		}
		m, tot, _ := strings.Cut(routeField(r2, "matched"), "/")
		mi, _ := strconv.Atoi(m)
		ti, _ := strconv.Atoi(tot)
		if mi < ti*8/10 {
			t.Errorf("turn 2 matched only %d of %d units", mi, ti)
		}
	}
	if len(used) < 2 {
		t.Errorf("8 conversations all started on %v: new conversations should spread", used)
	}
	if g.counter("kvmesh_router_decisions_total", "policy", "kvmesh", "reason", "prefix") < 8 {
		t.Error("prefix decisions not counted")
	}
}

// A system prompt shared by every conversation stays on its holder while
// that is idle; when the holder is busy, the cost model sends a new
// conversation to another backend, which then holds the system prompt too,
// and later conversations tie-break between the holders.
func TestSharedSystemPromptSpreadsUnderLoad(t *testing.T) {
	g := newRig(t, nil, fourBackends(t)...)
	sys := longText("common system prompt", 1200)
	_, r0, _ := g.call("POST", "/v1/chat/completions", chat("m1", sys, longText("first user", 200)))
	holder := routeField(r0, "backend")
	_, r1, _ := g.call("POST", "/v1/chat/completions", chat("m1", sys, longText("second user", 200)))
	if routeField(r1, "backend") != holder || routeField(r1, "reason") != "prefix" {
		t.Fatalf("idle holder %s not reused: %q", holder, r1)
	}
	// More prefill queued at the holder than the system prompt saves,
	// counting the cache a copy elsewhere displaces (cache_weight), but
	// not so much that the load override (which learns nothing) steps in.
	matched, _, _ := strings.Cut(routeField(r1, "matched"), "/")
	m, _ := strconv.Atoi(matched)
	cw := DefaultKVMeshConfig().CacheWeight
	busy := g.rt.backendByName(holder).addPending(int((1+cw)*float64(m))+1000, 0, time.Time{})
	_, r2, _ := g.call("POST", "/v1/chat/completions", chat("m1", sys, longText("third user", 200)))
	busy.release(time.Time{}, false)
	second := routeField(r2, "backend")
	if second == holder || routeField(r2, "reason") != "cost" {
		t.Fatalf("busy holder %s: third conversation %q, want another backend by cost", holder, r2)
	}
	got := map[string]bool{}
	for i := 0; i < 24; i++ {
		_, r, _ := g.call("POST", "/v1/chat/completions", chat("m1", sys, longText(fmt.Sprint("user ", i), 200)))
		got[routeField(r, "backend")] = true
	}
	if !got[holder] || !got[second] || len(got) != 2 {
		t.Fatalf("conversations after the spread went to %v, want both holders %s and %s only", got, holder, second)
	}
}

// Tenants never share claims: B's identical prompt matches nothing of A's,
// and neither does the same tenant with another cache_salt.
func TestTenantIsolation(t *testing.T) {
	g := newRig(t, nil, fourBackends(t)...)
	body := chat("m1", longText("shared system prompt", 2000), "same question")
	status, ra, _ := g.call("POST", "/v1/chat/completions", body, "X-Tenant-ID", "A")
	if status != 200 {
		t.Fatal(status)
	}
	if h := g.holders(EndpointChat, body, "A"); len(h) != 1 {
		t.Fatalf("tenant A holders %v", h)
	}
	if h := g.holders(EndpointChat, body, "B"); len(h) != 0 {
		t.Fatalf("tenant B sees tenant A's claims: %v", h)
	}
	_, rb, _ := g.call("POST", "/v1/chat/completions", body, "X-Tenant-ID", "B")
	if m := routeField(rb, "matched"); !strings.HasPrefix(m, "0/") || routeField(rb, "reason") != "miss" {
		t.Fatalf("tenant B's request: %q (tenant A's: %q)", rb, ra)
	}
	salted := strings.Replace(body, `"model":"m1"`, `"model":"m1","cache_salt":"s1"`, 1)
	_, rs, _ := g.call("POST", "/v1/chat/completions", salted, "X-Tenant-ID", "A")
	if m := routeField(rs, "matched"); !strings.HasPrefix(m, "0/") {
		t.Fatalf("a salted request matched the unsalted claims: %q", rs)
	}
	// And A again matches its own claims fully.
	_, ra2, _ := g.call("POST", "/v1/chat/completions", body, "X-Tenant-ID", "A")
	if routeField(ra2, "reason") != "prefix" || routeField(ra2, "backend") != routeField(ra, "backend") {
		t.Fatalf("tenant A's repeat: %q, first %q", ra2, ra)
	}
}

// Two routers that share nothing place new prompts on the same backends,
// and a router that never saw a conversation's first turn sends its second
// turn where the other router placed the first.
func TestRendezvousAgreesAcrossRouters(t *testing.T) {
	backends := fourBackends(t)
	g1 := newRig(t, nil, backends...)
	g2 := newRig(t, nil, backends...)
	sys := longText("system", 600)
	for c := 0; c < 24; c++ {
		u := longText(fmt.Sprintf("user %d", c), 300)
		body := chat("m1", longText(fmt.Sprintf("system %d", c), 600), u)
		_, r1, _ := g1.call("POST", "/v1/chat/completions", body)
		_, r2, _ := g2.call("POST", "/v1/chat/completions", body)
		if routeField(r1, "reason") != "miss" || routeField(r2, "reason") != "miss" {
			t.Fatalf("new prompts should be misses: %q %q", r1, r2)
		}
		if routeField(r1, "backend") != routeField(r2, "backend") {
			t.Fatalf("prompt %d: router 1 chose %q, router 2 %q", c, r1, r2)
		}
		// Turn 1 through router 1 only, turn 2 through router 2 only.
		turn1 := chat("m1", sys, u)
		_, t1, _ := g1.call("POST", "/v1/chat/completions", turn1)
		_, t2, _ := g2.call("POST", "/v1/chat/completions", chat("m1", sys, u, "answer", "more"))
		if routeField(t1, "backend") != routeField(t2, "backend") {
			t.Fatalf("conversation %d: turn 1 on %q (router 1), turn 2 on %q (router 2, never saw turn 1)", c, t1, t2)
		}
	}
}

// A holder far busier than the median is bypassed (reason load-override)
// even when its match would pay for the wait. The backend diverted to
// learns the request's own part (it computed the whole prompt: the
// conversation's next turn must find it there) and the checkpoint below
// the holder's match (the index's lookup needs it to find the claims above
// it), but not the rest of the shared prefix, which stays with the
// holder: a new conversation on the same document matches the holder
// deeper. A turn shorter than a checkpoint interval is found too.
func TestLoadOverrideLearnsOnlyTheRequestsOwnPart(t *testing.T) {
	for _, turnChars := range []int{2000, 120} {
		g := newRig(t, func(c *Config, _ *Deps) { c.KVMesh.LoadOverrideFactor, c.KVMesh.LoadOverrideFloor = 2, 0.5 }, fourBackends(t)...)
		sys := longText("long shared document", 16000)
		body := chat("m1", sys, "q1")
		_, r1, _ := g.call("POST", "/v1/chat/completions", body)
		holder := routeField(r1, "backend")
		shared := g.holders(EndpointChat, body, "")[holder]
		// Saturated: 6,000 units > 2 * max(median 0, half an average prompt of
		// about 4,300), but less than the 16,000 its match saves.
		busy := g.rt.backendByName(holder).addPending(6000, 0, time.Time{})
		turn2 := longText("turn two", turnChars)
		next := chat("m1", sys, "q1", "a1", turn2)
		_, r2, _ := g.call("POST", "/v1/chat/completions", next)
		busy.release(time.Time{}, false)
		diverted := routeField(r2, "backend")
		if routeField(r2, "reason") != "load-override" || diverted == holder {
			t.Fatalf("turn of %d chars, %s saturated: %q", turnChars, holder, r2)
		}
		h := g.holders(EndpointChat, next, "")
		if h[holder] != shared || h[diverted] <= shared || len(h) != 2 {
			t.Fatalf("turn of %d chars: claims after the override %v, want %s at the shared %d blocks and %s deeper", turnChars, h, holder, shared, diverted)
		}
		if d := g.holders(EndpointChat, chat("m1", sys, "another question"), ""); d[diverted] >= d[holder] {
			t.Fatalf("turn of %d chars: a new conversation on the document matches %v: the shared prefix must stay with %s", turnChars, d, holder)
		}
		// The holder restarts cold: the diverted backend's claims are still
		// found on their own.
		g.rt.learner.Invalidate(holder, false)
		if h := g.holders(EndpointChat, next, ""); h[diverted] <= shared || len(h) != 1 {
			t.Fatalf("turn of %d chars: claims after %s restarted: %v, want %s's deeper than %d", turnChars, holder, h, diverted, shared)
		}
		// Load back to normal: the conversation's next turn goes where its
		// context is.
		third := chat("m1", sys, "q1", "a1", turn2, "a2", "q3")
		if _, r3, _ := g.call("POST", "/v1/chat/completions", third); routeField(r3, "backend") != diverted || routeField(r3, "reason") != "prefix" {
			t.Fatalf("turn of %d chars: turn 3 after the spike: %q, want %s by prefix", turnChars, r3, diverted)
		}
		if g.counter("kvmesh_router_decisions_total", "reason", "load-override") != 1 {
			t.Error("load-override not counted")
		}
	}
}

// Each comparison policy routes through the whole stack.
func TestComparisonPoliciesEndToEnd(t *testing.T) {
	for _, name := range []string{PolicyRoundRobin, PolicyRandom, PolicyLeastLoaded, PolicyConsistentHash, PolicySGLangCacheAware} {
		t.Run(name, func(t *testing.T) {
			g := newRig(t, func(c *Config, _ *Deps) { c.Policy = name }, fourBackends(t)...)
			seen := map[string]int{}
			for i := 0; i < 16; i++ {
				status, route, body := g.call("POST", "/v1/chat/completions", chat("m1", longText(fmt.Sprint(i), 300), "q"))
				if status != 200 {
					t.Fatalf("status %d: %s", status, body)
				}
				if routeField(route, "policy") != name {
					t.Fatalf("route %q", route)
				}
				seen[routeField(route, "backend")]++
			}
			if len(seen) < 2 {
				t.Errorf("16 different prompts all went to %v", seen)
			}
		})
	}
}

// A completions prompt given as a list is several prompts, each computed
// on its own: the claims learned are the first prompt's, never the first
// followed by the next (no engine holds that).
func TestBatchPromptLearnsItsFirstPromptOnly(t *testing.T) {
	g := newRig(t, nil, newFakeBackend(t, "a"))
	a, b := longText("first prompt", 300), longText("second prompt", 300)
	batch := fmt.Sprintf(`{"model":"m1","prompt":[%q,%q]}`, a, b)
	if code, _, body := g.call("POST", "/v1/completions", batch); code != 200 {
		t.Fatalf("%d %s", code, body)
	}
	one := chainFor(t, g, EndpointCompletions, fmt.Sprintf(`{"model":"m1","prompt":%q}`, a), "")
	joined := chainFor(t, g, EndpointCompletions, fmt.Sprintf(`{"model":"m1","prompt":%q}`, a+b), "")
	waitFor(t, "the batch's claims", func() bool {
		return g.holders(EndpointCompletions, fmt.Sprintf(`{"model":"m1","prompt":%q}`, a), "")["a"] == one.Blocks()
	})
	if got := g.holders(EndpointCompletions, fmt.Sprintf(`{"model":"m1","prompt":%q}`, a+b), ""); got["a"] > one.Blocks() {
		t.Fatalf("claims of the first prompt followed by the second: depth %d of %d (the first alone is %d)", got["a"], joined.Blocks(), one.Blocks())
	}
}
