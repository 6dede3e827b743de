package mesh

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/kvmesh/kvmesh/crdt"
	"github.com/kvmesh/kvmesh/tree"
)

// forgedDelta returns an encoded delta message from a replica named from,
// addressed to "n00", carrying the claims of p on backend.
func forgedDelta(t testing.TB, from string, p prompt, backend string) []byte {
	t.Helper()
	ix, err := tree.New(testIndexConfig())
	if err != nil {
		t.Fatal(err)
	}
	cfg := crdt.DefaultConfig()
	cfg.Name = from
	r, err := crdt.New(cfg, ix, 42)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UnixMilli()
	r.AddPeer("n00", now)
	id, _ := ix.EnsureBackend(backend)
	var ch tree.Chain
	ix.Keyer().Bytes(&ch, testSeed, p.text, p.ends)
	r.Learn(&ch, id, time.Hour.Milliseconds(), now)
	for _, e := range r.Outgoing(now, nil) {
		if e.Msg.Type == crdt.MsgDelta {
			data, err := crdt.Encode(nil, e.Msg)
			if err != nil {
				t.Fatal(err)
			}
			return data
		}
	}
	t.Fatal("no delta to forge")
	return nil
}

// TestGarbageFromMemberIsCounted: undecodable messages from a member are
// counted and dropped; they change nothing, and replication goes on.
func TestGarbageFromMemberIsCounted(t *testing.T) {
	c := newTestCluster(t, nil)
	c.startN(3)
	c.waitMesh(time.Minute)
	rng := rand.New(rand.NewPCG(13, 13))
	ls := c.learnRandom(rng, 20)
	c.waitConverged(time.Minute)
	before := c.node("n00").n.StateDigest()

	valid := forgedDelta(t, "n01", randomPrompt(rng, 8), backends[0])
	garbage := [][]byte{
		{}, {0xff}, []byte("hello"), valid[:len(valid)/2], // truncated
		append([]byte{0x9f}, valid...), // indefinite-length array: rejected
	}
	for i := 0; i < 20; i++ {
		g := make([]byte, rng.IntN(200))
		for j := range g {
			g[j] = byte(rng.UintN(256))
		}
		garbage = append(garbage, g)
	}
	from := c.node("n01").ep
	for _, g := range garbage {
		if err := from.Send(context.Background(), "n00", g); err != nil {
			t.Fatal(err)
		}
	}
	n00 := c.node("n00").n
	waitFor(t, 20*time.Second, "the garbage to be counted", func() bool {
		return counterValue(n00.m.decodeErrors) >= float64(len(garbage))
	})
	if got := counterValue(n00.m.decodeErrors); got != float64(len(garbage)) {
		t.Fatalf("decode errors = %v, want %d", got, len(garbage))
	}
	if after := n00.StateDigest(); after != before {
		t.Fatal("garbage changed n00's state")
	}
	// Replication still works.
	more := c.learnRandom(rng, 5)
	c.waitConverged(time.Minute)
	c.checkRoutable(append(ls, more...))
}

// TestNonMemberIsDropped: a well-formed delta from an endpoint that is not
// a serf member, or from a member naming another member as its sender, is
// counted and dropped without touching the index.
func TestNonMemberIsDropped(t *testing.T) {
	c := newTestCluster(t, nil)
	c.startN(3)
	c.waitMesh(time.Minute)
	rng := rand.New(rand.NewPCG(17, 17))
	n00 := c.node("n00")

	notMember := n00.n.m.unknownSenders.WithLabelValues("not_member")
	mismatch := n00.n.m.unknownSenders.WithLabelValues("name_mismatch")
	// Messages from members that n00 had not seen join yet may have been
	// dropped while the mesh formed: count from here.
	notMember0, mismatch0 := counterValue(notMember), counterValue(mismatch)

	mallory, err := c.net.Endpoint("mallory")
	if err != nil {
		t.Fatal(err)
	}
	p1 := randomPrompt(rng, 8)
	if err := mallory.Send(context.Background(), "n00", forgedDelta(t, "mallory", p1, backends[0])); err != nil {
		t.Fatal(err)
	}
	// n01 sends a delta claiming to come from n02.
	p2 := randomPrompt(rng, 8)
	if err := c.node("n01").ep.Send(context.Background(), "n00", forgedDelta(t, "n02", p2, backends[0])); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "both messages to be dropped", func() bool {
		return counterValue(notMember) == notMember0+1 && counterValue(mismatch) == mismatch0+1
	})
	for _, p := range []prompt{p1, p2} {
		if d := n00.depth(p, backends[0]); d != 0 {
			t.Fatalf("a dropped message's claim matches on n00 at depth %d", d)
		}
	}
	// The control: the same forged delta from n01 under its own name is
	// accepted (claims from members apply even before they are peers).
	p3 := randomPrompt(rng, 8)
	if err := c.node("n01").ep.Send(context.Background(), "n00", forgedDelta(t, "n01", p3, backends[0])); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "a member's delta to apply", func() bool { return n00.depth(p3, backends[0]) == fullDepth(p3) })
}
