package router

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvmesh/kvmesh/router/kvevents"
	"github.com/kvmesh/kvmesh/tree"
)

// evictRig is a router whose backends are in eviction-link mode, with
// 32-token engine blocks (two index blocks).
func evictRig(t testing.TB, mod func(*PreciseConfig), backends ...*fakeBackend) *testRig {
	return preciseRig(t, func(pc *PreciseConfig) {
		pc.EvictionBackends, pc.Backends = pc.Backends, nil
		if mod != nil {
			mod(pc)
		}
	}, backends...)
}

// evictRigAt is evictRig on the clock now.
func evictRigAt(t testing.TB, now func() time.Time, mod func(*PreciseConfig), backends ...*fakeBackend) *testRig {
	return preciseRigDeps(t, func(pc *PreciseConfig) {
		pc.EvictionBackends, pc.Backends = pc.Backends, nil
		if mod != nil {
			mod(pc)
		}
	}, func(d *Deps) { d.Now = now }, backends...)
}

// postLinked posts body to g and waits until its answer's claims are
// linked: the n-th prompt linked since the router started.
func postLinked(t *testing.T, g *testRig, body string, n int) {
	t.Helper()
	g.post(t, body, 200)
	waitFor(t, fmt.Sprintf("prompt %d linked", n), func() bool {
		return g.counter("kvmesh_router_eviction_link_prompts_total", "outcome", "linked") == float64(n)
	})
}

// engineBlocks returns the keys the engine's events name body's blocks by
// (one per 32-token engine block), from the first whole block past from
// tokens on.
func engineBlocks(t testing.TB, g *testRig, body string, from int) []tree.Key {
	toks := engineTokens(t, []byte(body))
	ch := wantChain(t, g, "m1", "", toks)
	var out []tree.Key
	for end := 32; end <= len(toks); end += 32 {
		if end > from {
			out = append(out, ch.Keys[end/16-1])
		}
	}
	return out
}

func TestEvictionLinksEndByteClaims(t *testing.T) {
	a := newTokenizingBackend(t, "a")
	g := evictRig(t, nil, a.fakeBackend)
	sys := longText("system", 3000)
	body := chat("m1", sys, longText("a question about the system prompt", 1500))
	ch := chainFor(t, g, EndpointChat, body, "")
	st := g.rt.getState()
	if aerr := g.rt.prepare(st, EndpointChat, []byte(body), ""); aerr != nil {
		t.Fatal(aerr)
	}
	sysDepth := st.prompt.Ends[0] / 64 // the system message's claim, in blocks
	g.rt.putState(st)
	if ch.UnitsPerBlock != 64 || a.calls.Load() != 0 {
		t.Fatalf("keyed in units of %d per block after %d tokenizations: eviction-link mode must key by bytes without tokenizing", ch.UnitsPerBlock, a.calls.Load())
	}
	if len(ch.Learn) < 2 {
		t.Fatalf("learn depths %v: want the system message's end and the prompt's", ch.Learn)
	}
	deepest := int(ch.Learn[len(ch.Learn)-1])
	g.post(t, body, 200)
	waitFor(t, "the answered prompt linked", func() bool {
		return g.counter("kvmesh_router_eviction_link_prompts_total", "outcome", "linked") == 1
	})
	if a.calls.Load() != 1 || g.counter("kvmesh_router_eviction_links") != float64(len(ch.Learn)) {
		t.Fatalf("%d tokenizations, %v links; want 1 and one per learn depth %v", a.calls.Load(), g.counter("kvmesh_router_eviction_links"), ch.Learn)
	}
	if h := g.holders(EndpointChat, body, ""); h["a"] != deepest {
		t.Fatalf("a holds %d blocks, want %d", h["a"], deepest)
	}
	sink := g.rt.EvictionSink(nil)
	id := g.rt.set.Load().listed[0].id

	// Blocks of another prompt end nothing.
	sink.End(engineBlocks(t, g, chat("m1", longText("other", 3000), "q"), 0), id)
	if h := g.holders(EndpointChat, body, ""); h["a"] != deepest {
		t.Fatalf("another prompt's evictions left a %d blocks, want %d", h["a"], deepest)
	}
	// The engine evicts the blocks past the system message (tail first):
	// the claim on the whole prompt ends, the system message's stays.
	sysEnd := len(engineTokens(t, []byte(chat("m1", sys)))) - 1 // without the generation prompt
	sink.End(engineBlocks(t, g, body, sysEnd+32), id)
	if h := g.holders(EndpointChat, body, ""); h["a"] >= deepest || h["a"] < sysDepth {
		t.Fatalf("after the tail's eviction a holds %d blocks, want the system message's %d (or a checkpoint just past it), not the prompt's %d", h["a"], sysDepth, deepest)
	}
	// Then the rest.
	sink.End(engineBlocks(t, g, body, 0), id)
	if h := g.holders(EndpointChat, body, ""); h["a"] != 0 {
		t.Fatalf("after every block's eviction a holds %d blocks", h["a"])
	}
	if got := g.counter("kvmesh_router_eviction_link_claims_ended_total"); got != float64(len(ch.Learn)) {
		t.Fatalf("%v claims ended, want %d", got, len(ch.Learn))
	}
	if g.counter("kvmesh_router_eviction_links") != 0 {
		t.Fatal("links left after every linked block was evicted")
	}
}

func TestEvictionLinksAreExactUnlessDistrusted(t *testing.T) {
	a := newTokenizingBackend(t, "a")
	for _, trust := range []bool{true, false} {
		g := evictRig(t, func(pc *PreciseConfig) { pc.TrustEvictionLinks = trust }, a.fakeBackend)
		st := g.rt.getState()
		if got := g.rt.exact(st, g.rt.set.Load().listed[0]); got != trust {
			t.Errorf("TrustEvictionLinks %v: exact %v", trust, got)
		}
		g.rt.putState(st)
	}
}

func TestEvictionLinksBound(t *testing.T) {
	l := newEvictionLinks(3)
	k := func(i int) linkKey { return linkKey{backend: 1, block: tree.Key(i)} }
	l.add(k(1), 10, 100, 3)
	l.add(k(1), 10, 150, 3) // held already: kept, at the later release
	l.add(k(1), 11, 120, 3)
	l.add(k(2), 20, 90, 3)
	if l.len() != 3 {
		t.Fatalf("%d links, want 3", l.len())
	}
	l.add(k(3), 30, 110, 3) // drops the oldest, 1 -> 10
	if got, newest := l.take(1, []tree.Key{2, 3}, nil); len(got) != 2 || got[0] != 20 || got[1] != 30 || newest != 110 {
		t.Fatalf("took %v, newest %d, want [20 30], 110", got, newest)
	}
	if got, newest := l.take(1, []tree.Key{1}, nil); len(got) != 1 || got[0] != 11 || newest != 120 {
		t.Fatalf("took %v, newest %d, want [11], 120", got, newest)
	}
	l.add(k(5), 50, 100, 3)
	l.add(k(5), 50, 170, 3)
	if _, newest := l.take(1, []tree.Key{5}, nil); newest != 170 {
		t.Fatalf("a link made again took the release %d, want the later 170", newest)
	}
	if l.len() != 0 {
		t.Fatalf("%d links left", l.len())
	}
	l.add(k(4), 40, 1, 3)
	if got, newest := l.take(2, []tree.Key{4}, nil); len(got) != 0 || newest != 0 {
		t.Fatalf("another backend's block took %v (newest %d)", got, newest)
	}
}

func TestEvictionConfigRefusals(t *testing.T) {
	pc := DefaultPreciseConfig()
	pc.Backends, pc.EvictionBackends = []string{"a"}, []string{"a"}
	if err := pc.Validate(16); err == nil || !strings.Contains(err.Error(), "eviction_backends[0]") {
		t.Fatalf("a backend in both modes: %v", err)
	}
	pc.Backends, pc.MaxEvictionLinks = nil, 0
	if err := pc.Validate(16); err == nil || !strings.Contains(err.Error(), "max_eviction_links") {
		t.Fatalf("no room for links: %v", err)
	}
}

var _ kvevents.Sink = (*evictionSink)(nil)

// recordingEnder records End calls (a mesh node owning the streams).
type recordingEnder struct {
	mu    sync.Mutex
	ended []tree.Key
}

func (r *recordingEnder) End(keys []tree.Key, _ tree.BackendID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ended = append(r.ended, keys...)
}

// With an owner (a mesh), the router also claims the blocks it linked in
// the engines' keys, for the owner's removals to end everywhere, and the
// sink ends the removed blocks' claims through the owner.
func TestEvictionLinksClaimTheLinkedBlocksForTheOwner(t *testing.T) {
	a := newTokenizingBackend(t, "a")
	g := evictRig(t, nil, a.fakeBackend)
	owner := &recordingEnder{}
	sink := g.rt.EvictionSink(owner)
	body := chat("m1", longText("system", 3000), longText("question", 1500))
	g.post(t, body, 200)
	waitFor(t, "the answered prompt linked", func() bool {
		return g.counter("kvmesh_router_eviction_link_prompts_total", "outcome", "linked") == 1
	})
	toks := engineTokens(t, []byte(body))
	ch := wantChain(t, g, "m1", "", toks)
	var res tree.Result
	waitFor(t, "the linked blocks claimed in the engine's keys", func() bool {
		g.ix.Lookup(&ch, time.Now().UnixMilli(), &res)
		return len(res.Matches) == 1 && res.Matches[0].Blocks > 0
	})
	depth := int(res.Matches[0].Blocks)
	if depth%2 != 0 || depth > len(ch.Keys) {
		t.Fatalf("claimed %d blocks of %d: not at a whole 32-token engine block", depth, len(ch.Keys))
	}
	id := g.rt.set.Load().listed[0].id
	sink.End([]tree.Key{ch.Keys[depth-1]}, id)
	owner.mu.Lock()
	defer owner.mu.Unlock()
	if len(owner.ended) != 1 || owner.ended[0] != ch.Keys[depth-1] {
		t.Fatalf("the owner ended %v, want the removed block", owner.ended)
	}
}

// An engine that cleared its cache or restarted (kvevents.Emptier) leaves
// no byte claim of its answers live; a stream that only lost track of it
// (Invalidate) leaves them.
func TestEvictionLinksEmptiedEngine(t *testing.T) {
	a := newTokenizingBackend(t, "a")
	g := evictRig(t, nil, a.fakeBackend)
	body := chat("m1", longText("system", 3000), longText("a question", 1500))
	g.post(t, body, 200)
	waitFor(t, "the answered prompt linked", func() bool {
		return g.counter("kvmesh_router_eviction_link_prompts_total", "outcome", "linked") == 1
	})
	held := g.holders(EndpointChat, body, "")["a"]
	if held == 0 {
		t.Fatal("the answer left no claim")
	}
	sink := g.rt.EvictionSink(nil)
	sink.Invalidate("a", false)
	if h := g.holders(EndpointChat, body, ""); h["a"] != held {
		t.Fatalf("a lost stream left a holding %d blocks, want %d", h["a"], held)
	}
	e, ok := sink.(kvevents.Emptier)
	if !ok {
		t.Fatal("the eviction sink is no kvevents.Emptier")
	}
	e.Emptied("a")
	if h := g.holders(EndpointChat, body, ""); h["a"] != 0 {
		t.Fatalf("after the engine emptied its cache a holds %d blocks", h["a"])
	}
}
