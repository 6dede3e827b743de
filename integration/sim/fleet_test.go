package sim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"testing"

	"github.com/valyala/fastjson"
)

func TestCachedPrefixPredictsTheEngine(t *testing.T) {
	in, srv := startServer(t, nil)
	sys := msg{"system", words("s", 61)}
	first := chatBody(t, 2, nil, sys, msg{"user", words("a", 20)})
	second := chatBody(t, 2, nil, sys, msg{"user", words("b", 20)})

	cached, prompt, err := in.CachedPrefix(first, ChatPath)
	if err != nil || cached != 0 || prompt != 61+20+5 {
		t.Fatalf("cold: cached %d prompt %d err %v", cached, prompt, err)
	}
	chat(t, srv.URL, first)
	before := in.Stats()
	cached, _, err = in.CachedPrefix(second, "")
	if err != nil || cached != 64 {
		t.Fatalf("oracle says %d cached, want 64 (%v)", cached, err)
	}
	if after := in.Stats(); after.PrefixCacheQueries != before.PrefixCacheQueries || after.PrefixCacheHits != before.PrefixCacheHits {
		t.Fatal("the oracle changed the counters")
	}
	if r := chat(t, srv.URL, second); r.Usage.PromptTokensDetails.CachedTokens != cached {
		t.Fatalf("engine cached %d, oracle predicted %d", r.Usage.PromptTokensDetails.CachedTokens, cached)
	}
	if _, _, err := in.CachedPrefix([]byte(`{"messages":5}`), ChatPath); err == nil {
		t.Fatal("bad body accepted")
	}
	if _, _, err := in.CachedPrefix(first, "/v1/embeddings"); err == nil {
		t.Fatal("unknown endpoint accepted")
	}

	// Over HTTP.
	resp, b := post(t, srv.URL, "/sim/match?endpoint="+ChatPath, second, nil)
	var m matchReply
	if resp.StatusCode != 200 || json.Unmarshal(b, &m) != nil || m.CachedTokens != 80 || m.PromptTokens != 86 {
		t.Fatalf("/sim/match %d %s", resp.StatusCode, b)
	}
	if resp, _ := post(t, srv.URL, "/sim/match", []byte(`{`), nil); resp.StatusCode != 400 {
		t.Fatalf("/sim/match malformed: %d", resp.StatusCode)
	}
}

// A body parsed once at one instance (ParsePrompt) is answered by another
// of the same configuration as that one's CachedPrefix answers the body;
// one with another block size keys it again and answers as its own
// CachedPrefix too; a bad body fails ParsePrompt as it fails CachedPrefix.
func TestParsePromptAnswersAsCachedPrefix(t *testing.T) {
	holder, srv := startServer(t, nil)
	other, _ := startServer(t, nil)
	small, smallSrv := startServer(t, func(c *Config) { c.BlockSize = 4 })
	sys := msg{"system", words("s", 61)}
	chat(t, srv.URL, chatBody(t, 2, nil, sys, msg{"user", words("a", 20)}))
	chat(t, smallSrv.URL, chatBody(t, 2, nil, sys, msg{"user", words("a", 20)}))
	var p Prompt
	for _, body := range [][]byte{
		chatBody(t, 2, nil, sys, msg{"user", words("b", 20)}), // the system prompt held
		chatBody(t, 2, nil, sys, msg{"user", words("a", 20)}), // all of it held
		chatBody(t, 2, nil, msg{"user", words("c", 40)}),      // nothing held
		chatBody(t, 2, nil, msg{"user", "x"}),                 // shorter than a block
	} {
		if err := other.ParsePrompt(body, ChatPath, &p); err != nil {
			t.Fatal(err)
		}
		for _, in := range []*Instance{holder, other, small} {
			want, prompt, err := in.CachedPrefix(body, ChatPath)
			if err != nil {
				t.Fatal(err)
			}
			if got := in.CachedPromptTokens(&p); got != want || p.Tokens() != prompt {
				t.Fatalf("block size %d: parsed once, %d cached of %d; CachedPrefix %d of %d", in.cfg.BlockSize, got, p.Tokens(), want, prompt)
			}
		}
	}
	if want, _, _ := holder.CachedPrefix(chatBody(t, 2, nil, sys, msg{"user", words("b", 20)}), ChatPath); want != 64 {
		t.Fatalf("the holder has %d of a prompt sharing its 61-word system prompt, want 64 (the case above is not a hit)", want)
	}
	_, _, want := other.CachedPrefix([]byte(`{"messages":5}`), ChatPath)
	if err := other.ParsePrompt([]byte(`{"messages":5}`), ChatPath, &p); err == nil || want == nil || err.Error() != want.Error() || p.Tokens() != 0 {
		t.Fatalf("bad body: ParsePrompt %v (%d tokens left), CachedPrefix %v", err, p.Tokens(), want)
	}
	if err := other.ParsePrompt([]byte(`{}`), "/v1/embeddings", &p); err == nil {
		t.Fatal("unknown endpoint accepted")
	}
}

func TestCachedPrefixDoesNotTouchLRU(t *testing.T) {
	m := newManual(t, func(c *Config) { c.BlockSize = 4; c.CacheBlocks = 4 })
	in := &Instance{cfg: *m.cfg, eng: m.engine, dec: newDecoder([]string{"m"})}
	body := []byte(`{"prompt":"a b c d e f g h i"}`)
	toks, err := in.Tokenize(body, CompletionPath)
	if err != nil {
		t.Fatal(err)
	}
	var p fastjson.Parser
	req, _ := in.dec.decode(&p, body, completionEndpoint, nil)
	m.add(t, toks, 1, req.seed) // blocks: 2 full, cached
	m.runUntilIdle(t)
	m.add(t, seqTokens("o", 8), 1, 1) // 2 more cached, newer
	m.runUntilIdle(t)
	for i := 0; i < 3; i++ {
		if c, _, _ := in.CachedPrefix(body, CompletionPath); c != 8 {
			t.Fatalf("oracle %d, want 8", c)
		}
	}
	// A request needing 2 fresh blocks evicts the LRU ones: still the first
	// prompt's, because the oracle did not refresh them.
	m.add(t, seqTokens("n", 7), 1, 1)
	m.runUntilIdle(t)
	if c, _, _ := in.CachedPrefix(body, CompletionPath); c != 0 {
		t.Fatalf("oracle lookups refreshed LRU order: still %d cached", c)
	}
}

func TestFleet(t *testing.T) {
	cfg := testConfig()
	f, err := StartFleet(3, cfg)
	if err != nil {
		t.Fatal(err)
	}
	urls := f.URLs()
	seen := map[string]bool{}
	for i, in := range f.Instances() {
		if !strings.HasPrefix(urls[i], "http://127.0.0.1:") || seen[urls[i]] || in.Name() != fmt.Sprintf("test-%d", i) {
			t.Fatalf("instance %d: url %s name %s", i, urls[i], in.Name())
		}
		seen[urls[i]] = true
	}
	body := chatBody(t, 2, nil, msg{"user", words("w", 60)})
	for i, u := range urls {
		for k := 0; k <= i; k++ { // instance i gets i+1 identical requests
			chat(t, u, body)
		}
	}
	st := f.Stats()
	var q, h uint64
	for i, s := range st.Instances {
		if s.RequestsSucceeded != uint64(i+1) || s.URL != urls[i] {
			t.Fatalf("instance %d stats %+v", i, s)
		}
		q += s.PrefixCacheQueries
		h += s.PrefixCacheHits
	}
	// 63 prompt tokens: repeats hit 48.
	if st.Total.PrefixCacheQueries != q || q != 6*63 || h != 3*48 || st.Total.PrefixCacheHits != h || st.Total.RequestsSucceeded != 6 {
		t.Fatalf("totals %+v (sum q %d h %d)", st.Total, q, h)
	}
	if got, want := st.HitRate(), float64(3*48)/float64(6*63); got != want {
		t.Fatalf("hit rate %v want %v", got, want)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := http.Get(urls[0] + "/health"); err == nil {
		t.Fatal("closed fleet still serves")
	}

	// A fresh fleet starts cold.
	f2, err := StartFleet(1, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer f2.Close()
	if r := chat(t, f2.URLs()[0], body); r.Usage.PromptTokensDetails.CachedTokens != 0 || f2.Stats().Total.PrefixCacheQueries != 63 {
		t.Fatal("a new fleet must not share caches or counters with an old one")
	}
}

func TestConfigValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatalf("default config invalid: %v", err)
	}
	c := DefaultConfig()
	c.Models = []string{"a", "a", ""}
	c.BlockSize = 0
	c.TimeScale = 0
	c.Faults.ErrorRate = -1
	err := c.Validate()
	if err == nil {
		t.Fatal("bad config accepted")
	}
	for _, want := range []string{"listed twice", "Models[2] is empty", "BlockSize", "TimeScale", "ErrorRate"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	if _, err := New(c); err == nil {
		t.Fatal("New accepted a bad config")
	}
	if _, err := StartFleet(0, DefaultConfig()); err == nil {
		t.Fatal("StartFleet(0) accepted")
	}
}

func TestFleetCloseLeavesNoGoroutines(t *testing.T) {
	before := runtime.NumGoroutine()
	for i := 0; i < 3; i++ {
		f, err := StartFleet(4, testConfig())
		if err != nil {
			t.Fatal(err)
		}
		for _, u := range f.URLs() {
			stream := i%2 == 0
			resp, b := post(t, u, ChatPath, chatBody(t, 4, map[string]any{"stream": stream}, msg{"user", words("w", 30)}), nil)
			// A stream may cut the text into chunks anywhere: check its end
			// marker there, the whole text otherwise.
			want := []byte("the quick brown fox")
			if stream {
				want = []byte("data: [DONE]")
			}
			if resp.StatusCode != 200 || !bytes.Contains(b, want) {
				t.Fatalf("%d %s", resp.StatusCode, b)
			}
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
	http.DefaultClient.CloseIdleConnections()
	waitFor(t, "goroutines to exit", func() bool { return runtime.NumGoroutine() <= before })
}
