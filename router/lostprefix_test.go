package router

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/kvmesh/kvmesh/tree"
)

func TestLostSet(t *testing.T) {
	var s lostSet
	k := tree.Key(12345)
	s.mark(k, 3, 1_000)
	switch {
	case !s.lost(k, 3, 1_500, 1_000):
		t.Fatal("a mark within its TTL is not found")
	case s.lost(k, 4, 1_500, 1_000):
		t.Fatal("a mark at backend 3 is found at backend 4")
	case s.lost(k+1, 3, 1_500, 1_000):
		t.Fatal("another key is found lost")
	case s.lost(k, 3, 2_000, 1_000):
		t.Fatal("a mark past its TTL is still found")
	}
}

// A conversation whose request found its believed context gone at the
// backend is doubted there at its next request (the match counts at the
// doubt worth), while one whose answer confirmed the match is not; with
// lost_ttl 0 nothing is marked.
func TestLostPrefixDoubtsTheNextRequest(t *testing.T) {
	for _, ttl := range []time.Duration{time.Minute, 0} {
		a := newFakeBackend(t, "a")
		var cached atomic.Int64 // -1: everything cached
		a.setHook(func(w http.ResponseWriter, r *http.Request, body []byte) {
			c := cached.Load()
			if c < 0 {
				c = int64(len(body) / 4)
			}
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"choices":[{"message":{"role":"assistant","content":"hi"}}],"usage":{"prompt_tokens":%d,"completion_tokens":1,"prompt_tokens_details":{"cached_tokens":%d}}}`, len(body)/4, c)
		})
		g := newRig(t, func(c *Config, d *Deps) {
			c.Belief.Enabled, c.Belief.LostTTL = true, ttl
			c.Backends[0].KVCapacityTokens = 1 << 20
		}, a)
		explain := func(body string) CandidateExplanation {
			t.Helper()
			_, out := adminCall(t, g, "POST", "/debug/route", body)
			var x RouteExplanation
			if err := json.Unmarshal(out, &x); err != nil || len(x.Candidates) != 1 {
				t.Fatalf("explanation %s: %v", out, err)
			}
			return x.Candidates[0]
		}
		sys := longText("lost prefix system prompt", 2000)
		// Turns of several blocks each, so that each request's last learn
		// position is past the previous one's.
		turn := func(i int) string { return longText(fmt.Sprint("turn ", i), 300) }
		turns := []string{turn(0)}
		next := func() string {
			turns = append(turns, "answer", turn(len(turns)))
			return chat("m1", sys, turns...)
		}
		// Confirmed: the next request's match is believed whole.
		cached.Store(-1)
		g.call("POST", "/v1/chat/completions", chat("m1", sys, turns...))
		g.call("POST", "/v1/chat/completions", next())
		if c := explain(next()); c.MatchedBlocks == 0 || c.Lost || c.Discount != 0 {
			t.Fatalf("ttl %v, after a confirmed answer: %+v, want a whole match, not lost", ttl, c)
		}
		// Refuted: the backend answered it had none of the believed match.
		cached.Store(0)
		g.call("POST", "/v1/chat/completions", chat("m1", sys, turns...))
		c := explain(next())
		marks := counterValue(g.rt.metrics.lostPrefixes, new(dto.Metric))
		b := g.rt.backendByName("a")
		if ttl == 0 {
			if c.Lost || marks != 0 {
				t.Fatalf("lost_ttl 0: candidate %+v, %v marks; want none", c, marks)
			}
			continue
		}
		if want := 1 - b.belief.doubtTrust(&g.rt.cfg.Belief); c.MatchedBlocks == 0 || !c.Lost || c.Discount < want-1e-9 || marks != 1 {
			t.Fatalf("after a refuted answer: %+v, %v marks; want the match lost, discounted by %v, 1 mark", c, marks, want)
		}
		// A refuted prompt that ends inside the head other conversations
		// share (a short new conversation) marks nothing: the mark would
		// doubt every conversation starting there.
		g.call("POST", "/v1/chat/completions", chat("m1", sys, "q"))
		if got := counterValue(g.rt.metrics.lostPrefixes, new(dto.Metric)); got != 1 {
			t.Fatalf("a refuted prompt ending in the shared head was marked (%v marks, want 1)", got)
		}
	}
}
