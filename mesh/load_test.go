package mesh

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvmesh/kvmesh/tree"
)

// fakeLoad is a LoadSource with settable bookings for backends "b0".."b3".
type fakeLoad struct {
	ix       *tree.Index
	units    [4]atomic.Int64
	requests [4]atomic.Int64
	inFlight [4]atomic.Int64
	written  [4]atomic.Int64
	routed   atomic.Uint64
	answers  [3]atomic.Uint64 // count, prompt, cached
	prompts  [2]atomic.Uint64 // routed, units
}

func (f *fakeLoad) LocalPrompts() (n, units uint64) { return f.prompts[0].Load(), f.prompts[1].Load() }

func (f *fakeLoad) LocalAnswers() (n, prompt, cached uint64) {
	return f.answers[0].Load(), f.answers[1].Load(), f.answers[2].Load()
}

func (f *fakeLoad) answer(prompt, cached uint64) {
	f.answers[0].Add(1)
	f.answers[1].Add(prompt)
	f.answers[2].Add(cached)
}

func newFakeLoad(t testing.TB, ix *tree.Index) *fakeLoad {
	for _, b := range []string{"b0", "b1", "b2", "b3"} {
		if _, err := ix.EnsureBackend(b); err != nil {
			t.Fatal(err)
		}
	}
	return &fakeLoad{ix: ix}
}

func (f *fakeLoad) LocalLoad(fn func(id tree.BackendID, units, requests, inFlight, written int64)) {
	for i, b := range []string{"b0", "b1", "b2", "b3"} {
		id, _ := f.ix.BackendByName(b)
		fn(id, f.units[i].Load(), f.requests[i].Load(), f.inFlight[i].Load(), f.written[i].Load())
	}
}

func (f *fakeLoad) Routed() uint64 { return f.routed.Load() }

func (f *fakeLoad) book(b int, units, requests, inFlight int64) {
	if units > f.units[b].Load() {
		f.written[b].Add(units - f.units[b].Load()) // a dispatch writes its units
	}
	f.units[b].Store(units)
	f.requests[b].Store(requests)
	f.inFlight[b].Store(inFlight)
}

func peerUnits(tn *testNode, backend string) (units, requests, inFlight float64) {
	id, ok := tn.ix.BackendByName(backend)
	if !ok {
		return -1, -1, -1
	}
	return tn.n.PeerLoad(id)
}

// startLoadCluster starts k meshed nodes, each sharing a fakeLoad.
func startLoadCluster(t *testing.T, k int, mod func(*Config)) (*testCluster, []*fakeLoad) {
	c := newTestCluster(t, mod)
	var srcs []*fakeLoad
	for i := 0; i < k; i++ {
		tn := c.start(nodeName(i))
		f := newFakeLoad(t, tn.ix)
		tn.n.SetLoadSource(f)
		srcs = append(srcs, f)
	}
	c.waitMesh(30 * time.Second)
	return c, srcs
}

// One node's bookings reach every other node and are taken back when they
// are released; the node's own bookings never count as a peer's.
func TestLoadChannelSharesBookings(t *testing.T) {
	c, srcs := startLoadCluster(t, 3, nil)
	srcs[0].book(1, 48_000, 2, 3)
	srcs[2].book(1, 2_000, 1, 1)
	for _, name := range []string{"n01", "n02"} {
		tn := c.node(name)
		want := 50_000.0
		if name == "n02" {
			want = 48_000
		}
		waitFor(t, 10*time.Second, name+" to see the peers' bookings at b1", func() bool {
			u, _, _ := peerUnits(tn, "b1")
			return u == want
		})
	}
	u, r, f := peerUnits(c.node("n01"), "b1")
	if r != 3 || f != 4 {
		t.Fatalf("n01 sees %v units, %v pending requests, %v in flight at b1; want 50000, 3, 4", u, r, f)
	}
	// n02's first delta can reach n00 before its snapshot (then the next
	// snapshot brings it): wait for it too.
	waitFor(t, 10*time.Second, "n00 to see n02's booking at b1", func() bool {
		u, _, _ := peerUnits(c.node("n00"), "b1")
		return u == 2_000
	})
	if u, _, _ := peerUnits(c.node("n00"), "b1"); u != 2_000 {
		t.Fatalf("n00 sees %v peer units at b1, want only n02's 2000", u)
	}
	// What the peers wrote to b1 in all (in 64-unit steps on the wire).
	id, _ := c.node("n01").ix.BackendByName("b1")
	if w := c.node("n01").n.PeerWritten(id); w != 48_000+1_984 {
		t.Fatalf("n01 sees %v units written to b1 by its peers, want 49984", w)
	}
	srcs[0].book(1, 0, 0, 0)
	waitFor(t, 10*time.Second, "n01 to see n00's release", func() bool {
		u, _, _ := peerUnits(c.node("n01"), "b1")
		return u == 2_000
	})
	// The admin view shows the channel per peer.
	v := c.node("n01").n.Admin().Load
	if !v.Sharing || len(v.Peers) != 2 || v.Peers[0].Peer != "n00" || v.Peers[0].Messages == 0 {
		t.Fatalf("admin load view: %+v", v)
	}
}

// Each node's answer and routed prompt totals reach every other node,
// which sums its peers' (its own never count).
func TestLoadChannelSharesAnswers(t *testing.T) {
	c, srcs := startLoadCluster(t, 3, nil)
	for range 10 {
		srcs[0].answer(100, 60)
	}
	for range 5 {
		srcs[2].answer(100, 20)
	}
	srcs[1].prompts[0].Store(7)
	srcs[1].prompts[1].Store(70_000)
	srcs[2].prompts[0].Store(3)
	srcs[2].prompts[1].Store(900)
	for _, want := range []struct {
		node              string
		n, prompt, cached uint64
	}{{"n01", 15, 1500, 700}, {"n00", 5, 500, 100}, {"n02", 10, 1000, 600}} {
		waitFor(t, 10*time.Second, want.node+" to hear its peers' answers", func() bool {
			n, p, c := c.node(want.node).n.PeerAnswers()
			return n == want.n && p == want.prompt && c == want.cached
		})
	}
	for _, want := range []struct {
		node     string
		n, units uint64
	}{{"n00", 10, 70_900}, {"n01", 3, 900}, {"n02", 7, 70_000}} {
		waitFor(t, 10*time.Second, want.node+" to hear its peers' prompts", func() bool {
			n, u := c.node(want.node).n.PeerPrompts()
			return n == want.n && u == want.units
		})
	}
	// The admin view shows each peer's totals.
	for _, v := range c.node("n01").n.Admin().Load.Peers {
		if v.Peer == "n00" && (v.Answers != 10 || v.AnswerPromptTokens != 1000 || v.AnswerCachedTokens != 600) {
			t.Fatalf("n01's admin view of n00: %+v, want 10 answers, 1000 prompt and 600 cached tokens", v)
		}
		if v.Peer == "n02" && (v.PromptsRouted != 3 || v.PromptUnitsRouted != 900) {
			t.Fatalf("n01's admin view of n02: %+v, want 3 prompts of 900 units routed", v)
		}
	}
}

// A node that dies without leaving stops counting once it has been silent
// for LoadMaxAge, long before serf declares it failed.
func TestLoadChannelForgetsSilentPeer(t *testing.T) {
	c, srcs := startLoadCluster(t, 2, func(cfg *Config) {
		cfg.LoadRefresh = 50 * time.Millisecond
		cfg.LoadFresh = 200 * time.Millisecond
		cfg.LoadMaxAge = 400 * time.Millisecond
		lanProbes(cfg) // keep serf from noticing first: this tests the load channel's own timeout
		cfg.Membership.SuspicionMult = 20
	})
	srcs[0].book(2, 9_000, 1, 1)
	tn := c.node("n01")
	waitFor(t, 10*time.Second, "n01 to see n00's bookings", func() bool { u, _, _ := peerUnits(tn, "b2"); return u == 9_000 })
	// Cut n00 off without a leave: its messages stop.
	c.net.Partition([]string{"n00"}, []string{"n01"})
	waitFor(t, 10*time.Second, "n00's bookings to be dropped", func() bool { u, _, _ := peerUnits(tn, "b2"); return u == 0 })
	if len(tn.n.Admin().Load.Peers) != 0 {
		t.Fatalf("a silent peer is still listed: %+v", tn.n.Admin().Load.Peers)
	}
}

// A node without a load source (or with ShareLoad off) sends nothing but
// still hears its peers.
func TestLoadChannelReceiveOnly(t *testing.T) {
	c := newTestCluster(t, func(cfg *Config) {
		if cfg.Name == "n01" {
			cfg.ShareLoad = false
		}
	})
	a, b := c.start("n00"), c.start("n01")
	fa, fb := newFakeLoad(t, a.ix), newFakeLoad(t, b.ix)
	a.n.SetLoadSource(fa)
	b.n.SetLoadSource(fb)
	c.waitMesh(30 * time.Second)
	fa.book(0, 100, 1, 1)
	fb.book(0, 777, 1, 1)
	waitFor(t, 10*time.Second, "n01 to hear n00", func() bool { u, _, _ := peerUnits(b, "b0"); return u == 100 })
	time.Sleep(100 * time.Millisecond) // many load ticks
	if u, _, _ := peerUnits(a, "b0"); u != 0 {
		t.Fatalf("n00 heard %v units from n01, which does not share", u)
	}
	if b.n.Admin().Load.Sharing {
		t.Fatal("n01 reports sharing with ShareLoad off")
	}
}

// With the poll and the snapshots far apart, the router's wake-up alone
// ships a booking.
func TestLoadChannelSendsOnWakeUp(t *testing.T) {
	c, srcs := startLoadCluster(t, 2, func(cfg *Config) {
		cfg.LoadInterval = time.Hour
		cfg.LoadRefresh = time.Hour
		cfg.LoadFresh, cfg.LoadMaxAge = time.Hour, 2*time.Hour
	})
	a, b := c.node("n00"), c.node("n01")
	// A snapshot with names goes out when a member joins; the one sent as
	// n01 joined may have arrived before n01 accepted n00 as a member, so
	// once both know each other, a join is signalled again.
	waitFor(t, 10*time.Second, "n00 and n01 to know each other", func() bool {
		_, ok := (*b.n.known.Load())["n00"]
		return ok && len(*a.n.loadOut.Load()) == 1
	})
	a.n.loadJoined.Store(true)
	a.n.wakeLoad()
	waitFor(t, 10*time.Second, "n01 to hear n00's snapshot", func() bool { return len(b.n.Admin().Load.Peers) == 1 })
	srcs[0].book(3, 4_000, 1, 1)
	a.n.BookingsChanged()
	waitFor(t, 10*time.Second, "n01 to see the booking", func() bool { u, _, _ := peerUnits(b, "b3"); return u == 4_000 })
}
