package mesh

import (
	"sync"
	"testing"
	"time"

	"github.com/kvmesh/kvmesh/tree"
)

// A lost message's marks reach the router only once the peer's indexes
// are known, and only for backends known here.
func TestLoadTableLostMarks(t *testing.T) {
	tb := testLoadTable()
	lost := &loadMsg{Seq: 2, Lost: true, Entries: []loadEntry{{Idx: 11, Key: 77, Age: 5}, {Idx: 99, Key: 78, Age: 6}}}
	if got := tb.apply("p1", lost, 10, 0); got != loadApplyUnsynced || len(tb.lostIn) != 0 {
		t.Fatalf("a lost message before any snapshot: %v, %v kept; want unsynced, none", got, tb.lostIn)
	}
	tb.apply("p1", snapshot(1, 1, true, 100, 0), 10, 0)
	lost.Seq = 3
	if got := tb.apply("p1", lost, 10, 0); got != loadApplyOK {
		t.Fatalf("a lost message after the snapshot: %v", got)
	}
	if len(tb.lostIn) != 1 || tb.lostIn[0] != (lostIn{key: 77, id: 1, age: 5}) {
		t.Fatalf("kept %+v, want the mark at b1 (index 11) only: index 99 is unknown", tb.lostIn)
	}
	if u := units(tb, 0); u != 0 { // nothing published yet
		t.Fatalf("a lost message changed the bookings: %v", u)
	}
}

// lostLoad is a fakeLoad that shares lost marks: out holds the marks its
// router made, got those the mesh delivered from peers.
type lostLoad struct {
	*fakeLoad
	mu       sync.Mutex
	out, got []lostIn
}

func (l *lostLoad) LocalLost(fn func(k tree.Key, id tree.BackendID, ageMs int64)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, m := range l.out {
		fn(m.key, m.id, m.age)
	}
	l.out = nil
}

func (l *lostLoad) PeerLost(k tree.Key, id tree.BackendID, ageMs int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.got = append(l.got, lostIn{key: k, id: id, age: ageMs})
}

func (l *lostLoad) received() []lostIn {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]lostIn(nil), l.got...)
}

// A mark one node's router makes reaches the other node's router once,
// with the backend in the receiver's ids, and not its author's.
func TestLoadChannelSharesLostMarks(t *testing.T) {
	c := newTestCluster(t, func(cfg *Config) { cfg.ShareLostMarks = true })
	var srcs []*lostLoad
	for i := 0; i < 2; i++ {
		tn := c.start(nodeName(i))
		if i == 1 {
			// The receiver knows another backend first: its ids differ from
			// the author's.
			if _, err := tn.ix.EnsureBackend("bx"); err != nil {
				t.Fatal(err)
			}
		}
		src := &lostLoad{fakeLoad: newFakeLoad(t, tn.ix)}
		tn.n.SetLoadSource(src)
		srcs = append(srcs, src)
	}
	c.waitMesh(30 * time.Second)
	author, reader := c.node("n00"), c.node("n01")
	aID, _ := author.ix.BackendByName("b2")
	rID, _ := reader.ix.BackendByName("b2")
	if aID == rID {
		t.Fatalf("b2 has id %d on both nodes: the test would not see a wrong mapping", aID)
	}
	// The load channel must know the author's indexes first (its first
	// snapshots carry the names).
	waitFor(t, 10*time.Second, "n01 to hear n00's names", func() bool {
		return reader.n.loads.namedAt.Load() > 0
	})
	srcs[0].mu.Lock()
	srcs[0].out = []lostIn{{key: 0xfeedface, id: aID, age: 250}}
	srcs[0].mu.Unlock()
	waitFor(t, 10*time.Second, "n01 to receive n00's mark", func() bool { return len(srcs[1].received()) > 0 })
	got := srcs[1].received()
	if len(got) != 1 || got[0] != (lostIn{key: 0xfeedface, id: rID, age: 250}) {
		t.Fatalf("n01 received %+v, want the mark at its b2 (id %d), 250 ms old", got, rID)
	}
	if own := srcs[0].received(); len(own) != 0 {
		t.Fatalf("n00 received its own mark back: %+v", own)
	}
	if s, r := counterValue(author.n.m.lostMarks.WithLabelValues("sent")), counterValue(reader.n.m.lostMarks.WithLabelValues("received")); s != 1 || r != 1 {
		t.Fatalf("counted %v sent at n00, %v received at n01; want 1 and 1", s, r)
	}
}
