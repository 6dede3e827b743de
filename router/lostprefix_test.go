package router

import (
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
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
	// A peer's older mark does not shorten a newer one; a newer one
	// extends it.
	if s.markIfNewer(k, 3, 500) || !s.lost(k, 3, 1_900, 1_000) {
		t.Fatal("an older mark replaced a newer one")
	}
	if !s.markIfNewer(k, 3, 1_500) || !s.lost(k, 3, 2_400, 1_000) {
		t.Fatal("a newer mark did not extend the old one")
	}
}

// A decision that learns above a holder's match learns the positions
// deeper than it and the checkpoint below it, without touching the
// prompt's list.
func TestLearnAbove(t *testing.T) {
	learn := []int32{10, 32, 50, 64, 70, 96, 100}
	orig := append([]int32(nil), learn...)
	var buf []int32
	for _, c := range []struct {
		depth int32
		cp    int
		want  []int32
	}{
		{0, 32, learn},
		{50, 32, []int32{32, 64, 70, 96, 100}},
		{64, 32, []int32{64, 70, 96, 100}},         // the checkpoint is the match itself
		{50, 0, []int32{64, 70, 96, 100}},          // no checkpoints
		{20, 32, []int32{32, 50, 64, 70, 96, 100}}, // none below the match
		{100, 32, []int32{}},                       // nothing deeper
		{50, 40, []int32{64, 70, 96, 100}},         // the checkpoint (40) is not in the list (thinned)
	} {
		got := learnAbove(&buf, learn, c.depth, c.cp)
		if len(got) != len(c.want) || (len(got) > 0 && !reflect.DeepEqual(got, c.want)) {
			t.Errorf("learnAbove(%d, cp %d) = %v, want %v", c.depth, c.cp, got, c.want)
		}
		if !reflect.DeepEqual(learn, orig) {
			t.Fatalf("learnAbove(%d, cp %d) changed the list: %v", c.depth, c.cp, learn)
		}
	}
}

// lostRig is a router over one backend whose answers report everything
// cached (cached -1) or the given number of tokens, with lost_ttl ttl.
type lostRig struct {
	g      *testRig
	cached atomic.Int64
}

func newLostRig(t *testing.T, ttl time.Duration) *lostRig {
	lr := &lostRig{}
	a := newFakeBackend(t, "a")
	a.setHook(func(w http.ResponseWriter, r *http.Request, body []byte) {
		c := lr.cached.Load()
		if c < 0 {
			c = int64(len(body) / 4)
		}
		answerCached(w, body, int64(c))
	})
	lr.g = newRig(t, func(c *Config, d *Deps) {
		c.Belief.Enabled, c.Belief.LostTTL = true, ttl
		c.Backends[0].KVCapacityTokens = 1 << 20
	}, a)
	return lr
}

// explain is /debug/route's view of the backend for body.
func (lr *lostRig) explain(t *testing.T, body string) CandidateExplanation {
	t.Helper()
	_, out := adminCall(t, lr.g, "POST", "/debug/route", body)
	var x RouteExplanation
	if err := json.Unmarshal(out, &x); err != nil || len(x.Candidates) != 1 {
		t.Fatalf("explanation %s: %v", out, err)
	}
	return x.Candidates[0]
}

// lostConversation is a conversation of several-block turns, so that each
// request's last learn position is past the previous one's.
type lostConversation struct {
	sys   string
	turns []string
}

func newLostConversation() *lostConversation {
	return &lostConversation{sys: longText("lost prefix system prompt", 2000), turns: []string{longText("turn 0", 300)}}
}

// body is the conversation so far; next adds a turn first.
func (c *lostConversation) body() string { return chat("m1", c.sys, c.turns...) }
func (c *lostConversation) next() string {
	c.turns = append(c.turns, "answer", longText(fmt.Sprint("turn ", len(c.turns)), 300))
	return c.body()
}

// A conversation whose request found its believed context gone at the
// backend is doubted there at its next request (the match counts at the
// doubt worth), while one whose answer confirmed the match is not; with
// lost_ttl 0 nothing is marked.
func TestLostPrefixDoubtsTheNextRequest(t *testing.T) {
	for _, ttl := range []time.Duration{time.Minute, 0} {
		lr := newLostRig(t, ttl)
		g, cached := lr.g, &lr.cached
		explain := func(body string) CandidateExplanation { t.Helper(); return lr.explain(t, body) }
		conv := newLostConversation()
		sys, next := conv.sys, conv.next
		// Confirmed: the next request's match is believed whole.
		cached.Store(-1)
		g.call("POST", "/v1/chat/completions", conv.body())
		g.call("POST", "/v1/chat/completions", next())
		if c := explain(next()); c.MatchedBlocks == 0 || c.Lost || c.Discount != 0 {
			t.Fatalf("ttl %v, after a confirmed answer: %+v, want a whole match, not lost", ttl, c)
		}
		// Refuted: the backend answered it had none of the believed match.
		cached.Store(0)
		g.call("POST", "/v1/chat/completions", conv.body())
		c := explain(next())
		marks := counterValue(g.rt.metrics.lostPrefixes.WithLabelValues("own"), new(dto.Metric))
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
		if got := counterValue(g.rt.metrics.lostPrefixes.WithLabelValues("own"), new(dto.Metric)); got != 1 {
			t.Fatalf("a refuted prompt ending in the shared head was marked (%v marks, want 1)", got)
		}
	}
}

// A mark this node makes is listed once for the mesh (LocalLost), and a
// peer's mark (PeerLost) doubts this node's next request of that
// conversation as its own would, without being listed again (no relay);
// a peer's mark older than lost_ttl changes nothing.
func TestLostMarksShareWithTheMesh(t *testing.T) {
	type mark struct {
		k   tree.Key
		id  tree.BackendID
		age int64
	}
	list := func(rt *Router) []mark {
		var out []mark
		rt.LocalLost(func(k tree.Key, id tree.BackendID, age int64) { out = append(out, mark{k, id, age}) })
		return out
	}
	author, reader := newLostRig(t, time.Minute), newLostRig(t, time.Minute)
	if got := list(author.g.rt); len(got) != 0 {
		t.Fatalf("marks before any answer: %v", got)
	}
	conv := newLostConversation()
	author.cached.Store(-1)
	author.g.call("POST", "/v1/chat/completions", conv.body())
	conv.next()
	author.cached.Store(0) // refuted: the author marks the prompt lost
	author.g.call("POST", "/v1/chat/completions", conv.body())
	marks := list(author.g.rt)
	if len(marks) != 1 || marks[0].age < 0 || marks[0].age > 60_000 {
		t.Fatalf("the author lists %v, want its one mark", marks)
	}
	if again := list(author.g.rt); len(again) != 0 {
		t.Fatalf("the author lists its mark twice: %v", again)
	}
	// The reader routed the conversation too (its claims are the same),
	// but never saw the refuted answer.
	reader.cached.Store(-1)
	reader.g.call("POST", "/v1/chat/completions", conv.body())
	next := conv.next()
	if c := reader.explain(t, next); c.MatchedBlocks == 0 || c.Lost {
		t.Fatalf("the reader before the peer's mark: %+v, want a whole match", c)
	}
	aID, _ := author.g.ix.BackendByName("a")
	rID, _ := reader.g.ix.BackendByName("a")
	if marks[0].id != aID {
		t.Fatalf("mark at backend %d, want a (%d)", marks[0].id, aID)
	}
	reader.g.rt.PeerLost(marks[0].k, rID, 60_000) // as old as lost_ttl: ignored
	if c := reader.explain(t, next); c.Lost {
		t.Fatalf("a peer's mark as old as lost_ttl doubts: %+v", c)
	}
	reader.g.rt.PeerLost(marks[0].k, rID, marks[0].age)
	if c := reader.explain(t, next); c.MatchedBlocks == 0 || !c.Lost {
		t.Fatalf("the reader after the peer's mark: %+v, want the match lost", c)
	}
	if got := counterValue(reader.g.rt.metrics.lostPrefixes.WithLabelValues("peer"), new(dto.Metric)); got != 1 {
		t.Fatalf("%v peer marks counted, want 1", got)
	}
	if relayed := list(reader.g.rt); len(relayed) != 0 {
		t.Fatalf("the reader relays the peer's mark: %v", relayed)
	}
}
