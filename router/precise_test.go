package router

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"math"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvmesh/kvmesh/router/kvevents"
	"github.com/kvmesh/kvmesh/tree"
)

// engineTokens is the test engine's tokenizer and chat template (the
// simulator's rule): a role token, the content's words, an end token per
// message, then the generation prompt; a completions prompt is its words.
// Ids are FNV-1a of the word (the simulator reduces them modulo its
// vocabulary's size; this test engine need only agree with itself).
func engineTokens(t testing.TB, body []byte) []uint32 {
	t.Helper()
	var req struct {
		Messages []struct{ Role, Content string }
		Prompt   *string
	}
	if err := json.Unmarshal(body, &req); err != nil {
		t.Errorf("tokenize body %q: %v", body, err)
		return nil
	}
	id := func(w string) uint32 { h := fnv.New32a(); h.Write([]byte(w)); return h.Sum32() }
	var out []uint32
	if req.Prompt != nil {
		for _, w := range strings.Fields(*req.Prompt) {
			out = append(out, id(w))
		}
		return out
	}
	for _, m := range req.Messages {
		out = append(out, id("<|"+m.Role+"|>"))
		for _, w := range strings.Fields(m.Content) {
			out = append(out, id(w))
		}
		out = append(out, id("<|end|>"))
	}
	return append(out, id("<|assistant|>"))
}

// tokenizingBackend is a fake engine whose POST /tokenize answers as vLLM
// does with engineTokens; tokenize counts the calls, and block (if set)
// runs before each answer.
type tokenizingBackend struct {
	*fakeBackend
	calls  atomic.Int64
	mu     sync.Mutex
	block  func()
	answer func(w http.ResponseWriter, body []byte) bool // true: answered
}

func newTokenizingBackend(t testing.TB, name string) *tokenizingBackend {
	tb := &tokenizingBackend{fakeBackend: newFakeBackend(t, name)}
	def := tb.hook
	tb.setHook(func(w http.ResponseWriter, r *http.Request, body []byte) {
		if r.URL.Path != "/tokenize" {
			if def != nil {
				def(w, r, body)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"hi"}}],"usage":{"prompt_tokens":40,"completion_tokens":1,"total_tokens":41}}`)
			return
		}
		tb.calls.Add(1)
		tb.mu.Lock()
		block, answer := tb.block, tb.answer
		tb.mu.Unlock()
		if block != nil {
			block()
		}
		if answer != nil && answer(w, body) {
			return
		}
		toks := engineTokens(t, body)
		b, _ := json.Marshal(map[string]any{"count": len(toks), "max_model_len": 4096, "tokens": toks, "token_strs": nil})
		w.Header().Set("Content-Type", "application/json")
		w.Write(b)
	})
	return tb
}

func (tb *tokenizingBackend) set(block func(), answer func(http.ResponseWriter, []byte) bool) {
	tb.mu.Lock()
	tb.block, tb.answer = block, answer
	tb.mu.Unlock()
}

// preciseRig is a router whose backends a and b are in precise mode (b
// unless only a is asked for) with 32-token engine blocks.
func preciseRig(t testing.TB, mod func(*PreciseConfig), backends ...*fakeBackend) *testRig {
	return preciseRigDeps(t, mod, nil, backends...)
}

// preciseRigDeps is preciseRig with depsMod applied to its Deps (a clock).
func preciseRigDeps(t testing.TB, mod func(*PreciseConfig), depsMod func(*Deps), backends ...*fakeBackend) *testRig {
	return newRig(t, func(c *Config, d *Deps) {
		pc := DefaultPreciseConfig()
		pc.EngineBlockTokens = 32
		pc.TokenizeTimeout = 20 * time.Second // generous: the race detector on a loaded machine is slow
		for _, b := range backends {
			pc.Backends = append(pc.Backends, b.name)
		}
		if mod != nil {
			mod(&pc)
		}
		d.Precise = &pc
		if depsMod != nil {
			depsMod(d)
		}
	}, backends...)
}

// wantChain is the chain a precise router must derive for body.
func wantChain(t testing.TB, g *testRig, model, salt string, toks []uint32) tree.Chain {
	var ch tree.Chain
	g.ix.Keyer().Tokens(&ch, kvevents.Seed(model, salt), toks, nil)
	return ch
}

func sameKeys(a, b []tree.Key) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestPreciseKeysAreTheEnginesTokens(t *testing.T) {
	a := newTokenizingBackend(t, "a")
	g := preciseRig(t, nil, a.fakeBackend)
	sys := longText("system", 3000)
	body := chat("m1", sys, "hello there")
	ch := chainFor(t, g, EndpointChat, body, "")
	toks := engineTokens(t, []byte(body))
	want := wantChain(t, g, "m1", "", toks)
	if !sameKeys(ch.Keys, want.Keys) || ch.UnitsPerBlock != 16 || ch.Units != len(toks) {
		t.Fatalf("chain of %d keys over %d units (%d per block), want the %d keys of the engine's %d tokens",
			len(ch.Keys), ch.Units, ch.UnitsPerBlock, len(want.Keys), len(toks))
	}
	for _, d := range ch.Learn {
		if d%2 != 0 {
			t.Fatalf("learn depths %v: not at whole 32-token engine blocks", ch.Learn)
		}
	}
	if g.counter("kvmesh_router_precise_keys_total", "source", "tokenized") != 1 || a.calls.Load() != 1 {
		t.Fatalf("tokenized %v, %d calls", g.counter("kvmesh_router_precise_keys_total", "source", "tokenized"), a.calls.Load())
	}
	// The same prompt again comes from the cache; a salt changes the seed,
	// not the tokens.
	salted := strings.Replace(body, `"model":"m1"`, `"model":"m1","cache_salt":"s3cret"`, 1)
	ch2 := chainFor(t, g, EndpointChat, salted, "")
	if want2 := wantChain(t, g, "m1", "s3cret", toks); !sameKeys(ch2.Keys, want2.Keys) || sameKeys(ch2.Keys, want.Keys) {
		t.Fatal("the salted chain is not kvevents.Seed(model, salt)'s")
	}
	if a.calls.Load() != 1 || g.counter("kvmesh_router_precise_keys_total", "source", "cached") != 1 {
		t.Fatalf("%d calls, cached %v", a.calls.Load(), g.counter("kvmesh_router_precise_keys_total", "source", "cached"))
	}
	// A completions prompt as text and as ids.
	prompt := longText("doc", 2000)
	cb := `{"model":"m1","prompt":"` + prompt + `"}`
	ptoks := engineTokens(t, []byte(cb))
	if ch := chainFor(t, g, EndpointCompletions, cb, ""); !sameKeys(ch.Keys, wantChain(t, g, "m1", "", ptoks).Keys) {
		t.Fatal("completions prompt: not the engine's tokens")
	}
	ids, _ := json.Marshal(ptoks)
	if ch := chainFor(t, g, EndpointCompletions, `{"model":"m1","prompt":`+string(ids)+`}`, ""); !sameKeys(ch.Keys, wantChain(t, g, "m1", "", ptoks).Keys) {
		t.Fatal("a prompt of ids: not keyed by its ids")
	}
	if g.counter("kvmesh_router_precise_keys_total", "source", "ids") != 1 {
		t.Fatal("ids not counted")
	}
}

// A conversation's next turn is keyed by its previous turn's tokens at once
// and tokenized in the background for the turn after.
func TestPreciseConversationPrefixCache(t *testing.T) {
	a := newTokenizingBackend(t, "a")
	g := preciseRig(t, nil, a.fakeBackend)
	sys := longText("system", 3000)
	turn1 := chat("m1", sys, "first question")
	turn2 := chat("m1", sys, "first question", "an answer", "second question")
	turn3 := chat("m1", sys, "first question", "an answer", "second question", "another answer", "third")
	chainFor(t, g, EndpointChat, turn1, "")
	ch2 := chainFor(t, g, EndpointChat, turn2, "")
	if want := wantChain(t, g, "m1", "", engineTokens(t, []byte(turn1))); !sameKeys(ch2.Keys, want.Keys) {
		t.Fatalf("turn 2: %d keys, want turn 1's %d", len(ch2.Keys), len(want.Keys))
	}
	// Its length is the whole prompt's, estimated past the prefix: the
	// policy prices and books what the backend computes from it.
	prefixToks, wholeToks := len(engineTokens(t, []byte(turn1))), len(engineTokens(t, []byte(turn2)))
	if ch2.Units <= prefixToks || math.Abs(float64(ch2.Units-wholeToks)) > 0.1*float64(wholeToks-prefixToks)+4 {
		t.Fatalf("turn 2 keyed by turn 1's %d tokens counts %d units, want about its own %d", prefixToks, ch2.Units, wholeToks)
	}
	if g.counter("kvmesh_router_precise_keys_total", "source", "prefix") != 1 {
		t.Fatal("turn 2 not keyed by the prefix")
	}
	waitFor(t, "the background tokenization of turn 2", func() bool { return a.calls.Load() == 2 })
	waitFor(t, "turn 2's tokens in the cache", func() bool {
		return sameKeys(chainFor(t, g, EndpointChat, turn2, "").Keys, wantChain(t, g, "m1", "", engineTokens(t, []byte(turn2))).Keys)
	})
	ch3 := chainFor(t, g, EndpointChat, turn3, "")
	if want := wantChain(t, g, "m1", "", engineTokens(t, []byte(turn2))); !sameKeys(ch3.Keys, want.Keys) {
		t.Fatal("turn 3 is not keyed by turn 2's tokens")
	}
	// Options that change the tokens without changing the rendering are
	// part of the cache key.
	calls := a.calls.Load()
	other := strings.Replace(turn1, `"model":"m1"`, `"model":"m1","add_generation_prompt":false`, 1)
	chainFor(t, g, EndpointChat, other, "")
	if a.calls.Load() == calls {
		t.Fatal("add_generation_prompt:false was served from the cache of the default")
	}
}

func TestPreciseFallbacks(t *testing.T) {
	a := newTokenizingBackend(t, "a")
	// The stalled engine never answers, so a short timeout decides its
	// case; the other answers must beat the timeout to be told apart from
	// a stall, so their rig keeps the generous default.
	stalled := preciseRig(t, func(pc *PreciseConfig) { pc.TokenizeTimeout = 100 * time.Millisecond }, a.fakeBackend)
	g := preciseRig(t, nil, a.fakeBackend)
	n := 0
	fresh := func() string { n++; return chat("m1", longText(fmt.Sprint("fallback ", n), 2000), "q") }
	bytesModeOn := func(g *testRig, what string, body string, ep Endpoint, tenant, reason string) {
		t.Helper()
		before := g.counter("kvmesh_router_precise_fallbacks_total", "reason", reason)
		if ch := chainFor(t, g, ep, body, tenant); ch.UnitsPerBlock != 64 {
			t.Fatalf("%s: %d units per block, want byte mode (64)", what, ch.UnitsPerBlock)
		}
		if got := g.counter("kvmesh_router_precise_fallbacks_total", "reason", reason); got != before+1 {
			t.Fatalf("%s: fallback %q counted %v times, want %v", what, reason, got, before+1)
		}
	}
	bytesMode := func(what string, body string, ep Endpoint, tenant, reason string) {
		t.Helper()
		bytesModeOn(g, what, body, ep, tenant, reason)
	}
	release := make(chan struct{})
	a.set(func() { <-release }, nil)
	bytesModeOn(stalled, "a stalled engine", fresh(), EndpointChat, "", "timeout")
	close(release)
	a.set(nil, func(w http.ResponseWriter, _ []byte) bool { http.Error(w, "nope", 500); return true })
	bytesMode("an error answer", fresh(), EndpointChat, "", "error")
	a.set(nil, func(w http.ResponseWriter, _ []byte) bool { fmt.Fprint(w, `{"tokens":[1,2,-3]}`); return true })
	bytesMode("a garbage answer", fresh(), EndpointChat, "", "error")
	a.set(nil, func(w http.ResponseWriter, _ []byte) bool { fmt.Fprint(w, `{"count":5,"tokens":[1,2]}`); return true })
	bytesMode("a miscounted answer", fresh(), EndpointChat, "", "error")
	a.set(nil, nil)
	bytesMode("a tenant without cache_salt", fresh(), EndpointChat, "tenant-1", "tenant")
	bytesMode("the responses API", `{"model":"m1","input":"`+longText("r", 500)+`"}`, EndpointResponses, "", "unsupported")
	bytesMode("a prompt batch", `{"model":"m1","prompt":["`+longText("x", 500)+`","y"]}`, EndpointCompletions, "", "unsupported")
	// A tenant with a salt is isolated by the salt, as in the engine.
	salted := strings.Replace(fresh(), `"model":"m1"`, `"model":"m1","cache_salt":"t1"`, 1)
	if ch := chainFor(t, g, EndpointChat, salted, "tenant-1"); ch.UnitsPerBlock != 16 {
		t.Fatal("a tenant with a cache_salt is not keyed precisely")
	}

	// Busy: with one tokenization allowed, a second request does not wait.
	b := newTokenizingBackend(t, "b")
	g2 := preciseRig(t, func(pc *PreciseConfig) { pc.MaxTokenizeInFlight = 1 }, b.fakeBackend)
	entered, release2 := make(chan struct{}), make(chan struct{})
	b.set(func() { entered <- struct{}{}; <-release2 }, nil)
	done := make(chan struct{})
	go func() {
		defer close(done)
		chainFor(t, g2, EndpointChat, chat("m1", longText("busy 1", 2000), "q"), "")
	}()
	<-entered
	if ch := chainFor(t, g2, EndpointChat, chat("m1", longText("busy 2", 2000), "q"), ""); ch.UnitsPerBlock != 64 ||
		g2.counter("kvmesh_router_precise_fallbacks_total", "reason", "busy") != 1 {
		t.Fatal("the second tokenization waited instead of falling back (busy)")
	}
	close(release2)
	<-done
}

// A model no precise backend serves is keyed as before, uncounted.
func TestPreciseOnlyForPreciseModels(t *testing.T) {
	a := newTokenizingBackend(t, "a")
	other := newFakeBackend(t, "o", "m2")
	g := newRig(t, func(c *Config, d *Deps) {
		pc := DefaultPreciseConfig()
		pc.Backends = []string{"a"}
		d.Precise = &pc
	}, a.fakeBackend, other)
	if ch := chainFor(t, g, EndpointChat, chat("m2", longText("s", 1000), "q"), ""); ch.UnitsPerBlock != 64 || a.calls.Load() != 0 {
		t.Fatal("a model without precise backends was tokenized")
	}
	for _, r := range fallbackNames {
		if g.counter("kvmesh_router_precise_fallbacks_total", "reason", r) != 0 {
			t.Fatalf("fallback %s counted", r)
		}
	}
	bad := DefaultPreciseConfig()
	bad.Backends = []string{"nope"}
	cfg := DefaultConfig()
	cfg.Backends = []BackendConfig{{Name: "a", URL: a.URL(), Models: []string{"m1"}}}
	if _, err := New(cfg, Deps{Index: g.ix, Precise: &bad}); err == nil || !strings.Contains(err.Error(), "nope") {
		t.Fatalf("unknown precise backend: %v", err)
	}
	bad = DefaultPreciseConfig()
	bad.Backends, bad.EngineBlockTokens = []string{"a"}, 24
	if _, err := New(cfg, Deps{Index: g.ix, Precise: &bad}); err == nil || !strings.Contains(err.Error(), "engine_block_tokens") {
		t.Fatalf("engine block of 24 tokens: %v", err)
	}
}

// End to end in one process: the claims an engine's KV events make (the
// Mapper, as the owner of its stream derives them) are what a precise
// request matches, and a removal ends the match.
func TestPreciseRequestsMatchEventClaims(t *testing.T) {
	a, b := newTokenizingBackend(t, "a"), newTokenizingBackend(t, "b")
	var learner *LocalLearner
	g := preciseRig(t, nil, a.fakeBackend, b.fakeBackend)
	learner = g.rt.learner.(*LocalLearner)
	sys := longText("system", 4000)
	body := chat("m1", sys, "what is in the cache?")
	toks := engineTokens(t, []byte(body))
	// Engine b stores the prompt's whole blocks of 32 tokens.
	mp := kvevents.NewMapper(kvevents.MapperConfig{BlockTokens: 16, MaxBlocks: 1 << 16, Model: "m1"})
	nb := len(toks) / 32
	ev := kvevents.Event{Kind: kvevents.Stored, Tokens: toks[:nb*32], BlockSize: 32, LoraID: -1, Group: -1}
	for i := 0; i < nb; i++ {
		ev.Hashes = append(ev.Hashes, kvevents.Hash(1000+i))
	}
	var ops kvevents.Ops
	mp.Apply(&ev, time.Now().Add(time.Hour).UnixMilli(), &ops)
	idB, _ := g.ix.BackendByName("b")
	var ch tree.Chain
	depths := make([]int32, len(ops.Store))
	for i := range depths {
		depths[i] = int32(i + 1)
	}
	ch.Keys, ch.Learn = ops.Store, depths
	learner.Learn(&ch, idB, time.Hour)
	if h := g.holders(EndpointChat, body, ""); h["b"] != 2*nb || h["a"] != 0 {
		t.Fatalf("holders %v, want b at %d blocks", h, 2*nb)
	}
	_, route, _ := g.call("POST", "/v1/chat/completions", body)
	if routeField(route, "backend") != "b" || routeField(route, "reason") == "miss" {
		t.Fatalf("routed %q, want backend b by its event claims", route)
	}
	// The engine evicts the last block: the match ends a block earlier.
	ops.Reset()
	rm := kvevents.Event{Kind: kvevents.Removed, Hashes: []kvevents.Hash{kvevents.Hash(1000 + nb - 1)}, Group: -1}
	mp.Apply(&rm, 0, &ops)
	learner.End(ops.End, idB)
	if h := g.holders(EndpointChat, body, ""); h["b"] >= 2*nb {
		t.Fatalf("after the removal b still holds %d blocks", h["b"])
	}
}

// A reload that moves a precise backend to another URL (same name, so the
// same slot) sends its /tokenize calls to the new address.
func TestPreciseTokenizeFollowsReload(t *testing.T) {
	a1, a2 := newTokenizingBackend(t, "a"), newTokenizingBackend(t, "a")
	g := preciseRig(t, nil, a1.fakeBackend)
	chainFor(t, g, EndpointChat, chat("m1", longText("before", 2000), "q"), "")
	if a1.calls.Load() != 1 {
		t.Fatalf("%d calls to the first address, want 1", a1.calls.Load())
	}
	if err := g.rt.SetBackends([]BackendConfig{{Name: "a", URL: a2.URL(), Models: []string{"m1"}}}); err != nil {
		t.Fatal(err)
	}
	ch := chainFor(t, g, EndpointChat, chat("m1", longText("after", 2000), "q"), "")
	if a2.calls.Load() != 1 || a1.calls.Load() != 1 || ch.UnitsPerBlock != 16 {
		t.Fatalf("after the move: %d calls to the new address, %d to the old, %d units per block",
			a2.calls.Load(), a1.calls.Load(), ch.UnitsPerBlock)
	}
}

func TestTailTokens(t *testing.T) {
	for _, c := range []struct{ toks, prefix, total, want int }{
		{1000, 4000, 6000, 500},    // the prefix's 4 bytes per token
		{1000, 4000, 4000, 0},      // nothing past the prefix
		{1000, 4000, 3000, 0},      // a shorter whole: nothing to add
		{1000, 0, 6000, 0},         // no prefix to learn a ratio from
		{0, 4000, 6000, 0},         // an empty tokenization
		{7205, 40743, 48822, 1429}, // a customers turn
	} {
		if got := tailTokens(c.toks, c.prefix, c.total); got != c.want {
			t.Errorf("tailTokens(%d, %d, %d) = %d, want %d", c.toks, c.prefix, c.total, got, c.want)
		}
	}
}
