package main

import (
	"bytes"
	"encoding/json"
	"hash/fnv"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/kvmesh/kvmesh/router"
	"github.com/kvmesh/kvmesh/router/kvevents"
)

// wordTokens is the test engine's tokenizer: FNV-1a of each word.
func wordTokens(text string) []uint32 {
	var out []uint32
	for _, w := range strings.Fields(text) {
		h := fnv.New32a()
		h.Write([]byte(w))
		out = append(out, h.Sum32())
	}
	return out
}

// tokenizingBackend is fakeBackend with POST /tokenize: the tokens of a
// chat are the words of its messages' contents.
func tokenizingBackend(t *testing.T) *httptest.Server {
	t.Helper()
	plain := fakeBackend(t, 0)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/tokenize" {
			plain.Config.Handler.ServeHTTP(w, r)
			return
		}
		var req struct{ Messages []struct{ Content string } }
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		var text []string
		for _, m := range req.Messages {
			text = append(text, m.Content)
		}
		toks := wordTokens(strings.Join(text, " "))
		json.NewEncoder(w).Encode(map[string]any{"count": len(toks), "tokens": toks})
	}))
	t.Cleanup(srv.Close)
	return srv
}

// storedPrompt is a chat body of one message and the event of the test
// engine storing its whole blocks (hashes 1, 2, ...).
func storedPrompt() (body string, stored kvevents.Event) {
	content := strings.Repeat("the quick brown fox jumps over the lazy dog ", 12)
	body = `{"model":"m","messages":[{"role":"user","content":"` + content + `"}]}`
	toks := wordTokens(content)
	nb := len(toks) / 16
	stored = kvevents.Event{Kind: kvevents.Stored, Tokens: toks[:nb*16], BlockSize: 16, LoraID: -1, Group: -1}
	for i := 0; i < nb; i++ {
		stored.Hashes = append(stored.Hashes, kvevents.Hash(i+1))
	}
	return body, stored
}

// A node alone in precise mode consumes its engine's stream: the blocks the
// engine reports stored become claims that a request with the same tokens
// matches (its keys are the engine's tokens: 16 units per block), and a
// removal ends them.
func TestServePreciseAlone(t *testing.T) {
	be := tokenizingBackend(t)
	pub, err := kvevents.NewPublisher(t.Context(), kvevents.PublisherConfig{Endpoint: "tcp://127.0.0.1:0", ReplayEndpoint: "tcp://127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	s, cancel, done := startServe(t, "--backends", "b0="+be.URL, "--kv-events", "b0="+pub.Addr(),
		"--kv-events-replay", "b0="+pub.ReplayAddr(), "--kv-events-model", "m")
	defer func() { cancel(); <-done }()

	body, stored := storedPrompt()
	nb := len(stored.Hashes)
	explain := func() router.RouteExplanation {
		var x router.RouteExplanation
		resp, err := http.Post("http://"+s.Admin+"/debug/route", "application/json", bytes.NewReader([]byte(body)))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		if err := json.Unmarshal(data, &x); err != nil {
			t.Fatalf("%s: %v", data, err)
		}
		return x
	}
	matched := func() int {
		x := explain()
		if x.UnitsPerBlock != 16 || x.Keys != "precise" {
			t.Fatalf("the request is keyed by %d units per block (%q), not the engine's tokens", x.UnitsPerBlock, x.Keys)
		}
		return x.Candidates[0].MatchedBlocks
	}
	eventually(t, "the engine's stored blocks to be claimed", func() bool {
		pub.Publish(&kvevents.Batch{DPRank: -1, Events: []kvevents.Event{stored}})
		return matched() == nb
	})
	pub.Publish(&kvevents.Batch{DPRank: -1, Events: []kvevents.Event{{Kind: kvevents.Removed, Hashes: []kvevents.Hash{kvevents.Hash(nb)}, Group: -1}}})
	eventually(t, "the removal to end the last block's claim", func() bool { return matched() == nb-1 })
}

// A node alone in evictions mode keys requests by bytes, links an answered
// prompt's claims to the engine's blocks, and ends them when the engine's
// events remove those blocks.
func TestServeEvictionsAlone(t *testing.T) {
	be := tokenizingBackend(t)
	pub, err := kvevents.NewPublisher(t.Context(), kvevents.PublisherConfig{Endpoint: "tcp://127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	s, cancel, done := startServe(t, "--backends", "b0="+be.URL, "--kv-events", "b0="+pub.Addr(),
		"--kv-events-model", "m", "--kv-events-mode", "evictions")
	defer func() { cancel(); <-done }()

	body, stored := storedPrompt()
	hashes := stored.Hashes
	matched := func() int {
		resp, err := http.Post("http://"+s.Admin+"/debug/route", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var x router.RouteExplanation
		if data, _ := io.ReadAll(resp.Body); json.Unmarshal(data, &x) != nil || x.Keys == "precise" || x.UnitsPerBlock != 64 {
			t.Fatalf("%s: want a request keyed by bytes", data)
		}
		return x.Candidates[0].MatchedBlocks
	}
	resp, err := http.Post("http://"+s.API+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || matched() == 0 {
		t.Fatalf("status %d, %d blocks claimed", resp.StatusCode, matched())
	}
	eventually(t, "the answered prompt's claims linked", func() bool {
		return strings.Contains(get(t, "http://"+s.Admin+"/metrics"), `kvmesh_router_eviction_link_prompts_total{outcome="linked"} 1`)
	})
	eventually(t, "the engine's blocks mapped, then their removal to end the claims", func() bool {
		pub.Publish(&kvevents.Batch{DPRank: -1, Events: []kvevents.Event{stored}})
		pub.Publish(&kvevents.Batch{DPRank: -1, Events: []kvevents.Event{{Kind: kvevents.Removed, Hashes: hashes, Group: -1}}})
		return matched() == 0
	})
}

func TestPreciseFlags(t *testing.T) {
	base := []string{"--backends", "a=http://10.0.0.1:8000,b=http://10.0.0.2:8000"}
	cfg, err := loadServeConfig(append(base, "--kv-events", "a=tcp://10.0.0.1:5557,b", "--kv-events-replay", "a=tcp://10.0.0.1:5558",
		"--kv-events-listen", "tcp://0.0.0.0:5557", "--kv-events-model", "llama", "--engine-block-tokens", "32",
		"--tokenizer-url", "http://tok:8000", "--tokenize-timeout", "250ms"), env(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	p := cfg.Precise
	if len(p.Streams) != 2 || p.Streams[0].ReplayEndpoint != "tcp://10.0.0.1:5558" || p.Streams[1].Endpoint != "" || p.Streams[1].Topic != "b" ||
		p.Listen != "tcp://0.0.0.0:5557" || p.EngineBlockTokens != 32 || p.TokenizerURL != "http://tok:8000" || p.TokenizeTimeout.Milliseconds() != 250 {
		t.Fatalf("%+v", p)
	}
	rc := p.routerConfig()
	if rc == nil || len(rc.Backends) != 2 || rc.EngineBlockTokens != 32 {
		t.Fatalf("router side %+v", rc)
	}
	for _, c := range []struct{ args, want string }{
		{"--kv-events c=tcp://x:1", `backend "c" is not in router.backends`},
		{"--kv-events a=tcp://x:1", "no model"},
		{"--kv-events a=tcp://x:1 --kv-events-model m --kv-events-replay b=tcp://x:2", "b has no stream"},
		{"--kv-events a=http://x:1 --kv-events-model m", "must start with tcp://"},
		{"--kv-events a --kv-events-model m", "no listen address"},
		{"--kv-events a=tcp://x:1 --kv-events-model m --engine-block-tokens 24", "engine_block_tokens"},
		{"--kv-events a=tcp://x:1 --kv-events-model m --tokenize-timeout 0s", "tokenize_timeout"},
		{"--kv-events a=tcp://x:1 --kv-events-model m --kv-events-mode exact", "mode must be tokens or evictions"},
	} {
		_, err := loadServeConfig(append(base, strings.Fields(c.args)...), env(nil), io.Discard)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.args, err, c.want)
		}
	}
}

// precise.eviction_order reaches the router's eviction-link config; on by
// default.
func TestPreciseEvictionOrderSetting(t *testing.T) {
	p := defaultPrecise()
	p.Streams = []kvevents.StreamConfig{{Backend: "a", Endpoint: "tcp://10.0.0.1:5557", Model: "m"}}
	p.Mode = modeEvictions
	if rc := p.routerConfig(); !rc.EvictionOrder || len(rc.EvictionBackends) != 1 {
		t.Fatalf("default: eviction order %v on %v, want on on [a]", rc.EvictionOrder, rc.EvictionBackends)
	}
	if err := yaml.Unmarshal([]byte("eviction_order: false\n"), &p); err != nil {
		t.Fatal(err)
	}
	if rc := p.routerConfig(); rc.EvictionOrder {
		t.Fatal("eviction_order: false did not reach the router")
	}
}

// The digest the mesh announces (TagPrecise) names the streams a node
// consumes: the same whatever their order, different when one differs,
// empty without precise mode.
func TestPreciseDigest(t *testing.T) {
	a := kvevents.StreamConfig{Backend: "a", Endpoint: "tcp://10.0.0.1:5557", Topic: "kv", Model: "m"}
	b := kvevents.StreamConfig{Backend: "b", Endpoint: "tcp://10.0.0.2:5557", Topic: "kv", Model: "m"}
	p1 := PreciseConfig{Streams: []kvevents.StreamConfig{a, b}}
	p2 := PreciseConfig{Streams: []kvevents.StreamConfig{b, a}}
	if d1, d2 := p1.digest(nil), p2.digest(nil); d1 == "" || d1 != d2 || len(d1) != 16 {
		t.Fatalf("the same streams in another order: %q and %q", d1, d2)
	}
	b.Endpoint = "tcp://10.0.0.3:5557"
	p3 := PreciseConfig{Streams: []kvevents.StreamConfig{a, b}}
	if p3.digest(nil) == p1.digest(nil) {
		t.Fatal("a stream at another endpoint has the same digest")
	}
	if d := (&PreciseConfig{}).digest(nil); d != "" {
		t.Fatalf("no precise mode: digest %q", d)
	}
	if d := (&PreciseConfig{Streams: p1.Streams, Mode: modeEvictions}).digest(nil); d == "" || d == p1.digest(nil) {
		t.Fatalf("evictions mode: digest %q, tokens mode's %q: the modes' owners must not mix", d, p1.digest(nil))
	}
}
