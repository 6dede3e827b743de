package mesh

import (
	"testing"
	"time"

	"github.com/kvmesh/kvmesh/crdt"
	"github.com/kvmesh/kvmesh/transport"
	"github.com/kvmesh/kvmesh/tree"
)

// fuzzNode is a Node that is not started but accepts messages from
// "peer", a member and a replication peer. It routes to backends b0..b3
// and takes lost marks (fuzzSource), and has applied a snapshot with names
// from "peer" (fuzzNamed): the peer's load messages resolve, so lessons,
// lost marks, answers and deltas reach the table.
func fuzzNode(f *testing.F) *Node {
	ix, err := tree.New(testIndexConfig())
	if err != nil {
		f.Fatal(err)
	}
	for _, b := range fuzzNames[:4] {
		if _, err := ix.EnsureBackend(b); err != nil {
			f.Fatal(err)
		}
	}
	ep, err := transport.NewMemNetwork(1).Endpoint("self")
	if err != nil {
		f.Fatal(err)
	}
	cfg := testConfig("self")
	n, err := New(cfg, Deps{Index: ix, Transport: ep})
	if err != nil {
		f.Fatal(err)
	}
	known := map[string]struct{}{"peer": {}}
	n.known.Store(&known)
	n.rep.AddPeer("peer", time.Now().UnixMilli())
	n.SetLoadSource(fuzzSource{})
	fuzzResync(f, n)
	return n
}

// fuzzResync has the fuzz node forget the peer's load state (as when it
// leaves: its totals are retired) and apply its snapshot with names again
// (the same incarnation: the totals are taken back), so that every input
// starts from a peer whose indexes are known and whose sequence is 1.
func fuzzResync(tb testing.TB, n *Node) {
	n.loadMu.Lock()
	n.loads.expire(n.nowMs(), map[string]struct{}{})
	n.loadMu.Unlock()
	n.handle(transport.Message{From: "peer", Data: appendLoad(nil, fuzzNamed())})
	n.loadMu.Lock()
	p := n.loads.peers["peer"]
	ok := p != nil && p.seq == 1 && p.names != nil
	n.loadMu.Unlock()
	if !ok {
		tb.Fatal("the fuzz node did not take the peer's snapshot")
	}
}

// fuzzNamed is the peer's snapshot with names that fuzzNode applies: its
// indexes 10..14 stand for b0..b3 and a backend unknown here.
func fuzzNamed() *loadMsg {
	m := &loadMsg{Seq: 1, Snapshot: true, Names: true, Incarnation: 1, Routed: 10}
	for i, name := range fuzzNames {
		m.Entries = append(m.Entries, loadEntry{Idx: uint32(10 + i), Name: name, Units: 100, Requests: 1, InFlight: 1, Written: 6400})
	}
	return m
}

// fuzzSource is a LoadSource with nothing to send that takes lost marks.
type fuzzSource struct{}

func (fuzzSource) LocalLoad(func(id tree.BackendID, units, requests, inFlight, written int64)) {}
func (fuzzSource) Routed() uint64                                                              { return 0 }
func (fuzzSource) LocalLost(func(k tree.Key, id tree.BackendID, ageMs int64))                  {}
func (fuzzSource) PeerLost(k tree.Key, id tree.BackendID, ageMs int64)                         {}

// FuzzHandle feeds arbitrary bytes from a member to the receive path: it
// never panics, a message that does not decode is counted and leaves the
// state as it was, and after every input what the load table publishes is
// finite and not negative, with written and answer totals that never go
// back (loadWatch).
func FuzzHandle(f *testing.F) {
	n := fuzzNode(f)
	var watch loadWatch
	rng := newRand(5)
	p := randomPrompt(rng, 40)
	delta := forgedDelta(f, "peer", p, backends[0])
	f.Add(delta)
	f.Add(delta[:len(delta)-3])
	for _, m := range []*crdt.Message{
		{Type: crdt.MsgAck, From: "peer", Incarnation: 9, AckUpTo: 3, AckFor: 1},
		{Type: crdt.MsgDigest, From: "peer", Incarnation: 9, Now: 1, Digest: make([]uint64, 256)},
		{Type: crdt.MsgRepairRequest, From: "peer", Incarnation: 9, Buckets: []uint32{0, 7, 1 << 20}},
		{Type: crdt.MsgFullAck, From: "peer", Incarnation: 9, Epoch: 1, Chunk: 3, Chunks: 2},
	} {
		data, err := crdt.Encode(nil, m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte{})
	f.Add([]byte("\x87\x01\x01dpeer"))
	for _, m := range sampleLoadMsgs() {
		f.Add(appendLoad(nil, &m))
	}
	// The peer's messages after its snapshot with names (seq 1): a lesson,
	// lost marks, answers, a delta, snapshots of its incarnation and of a
	// new one, and a late one of an earlier incarnation.
	for _, m := range []loadMsg{
		{Seq: 2, Lessons: true, Entries: []loadEntry{{Idx: 11, Lesson: lessonWire{Stamp: uint64(time.Now().UnixMilli()), Scale: loadFracOne / 2, Doubt: loadFracOne / 4, DoubtN: 9}}}},
		{Seq: 3, Lost: true, Entries: []loadEntry{{Idx: 12, Key: 77, Age: 5}, {Idx: 14, Key: 78, Age: 1}}},
		{Seq: 4, Answers: true, Answered: answerTotals{N: 10, Prompt: 1000, Cached: 600}},
		{Seq: 5, Entries: []loadEntry{{Idx: 10, Units: 500, Requests: 2, InFlight: 2, Written: 64_000}}},
		{Seq: 6, Snapshot: true, Incarnation: 1, Routed: 20, Entries: []loadEntry{{Idx: 13, Units: 9, Written: maxLoadValue * loadWrittenStep}}},
		{Seq: 7, Answers: true, Answered: answerTotals{N: maxLoadValue, Prompt: maxLoadValue, Cached: maxLoadValue}},
		*fuzzNamed(),
		{Seq: 1 << 50, Snapshot: true, Names: true, Incarnation: 2, Entries: []loadEntry{{Idx: 3, Name: "b3", Units: 1, Written: 640}}},
		{Seq: 1 << 40, Snapshot: true, Incarnation: 1, Entries: []loadEntry{{Idx: 10, Units: 1}}},
	} {
		f.Add(appendLoad(nil, &m))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if isLoadMessage(data) {
			fuzzResync(t, n)
		}
		before := n.StateDigest()
		errs := counterValue(n.m.decodeErrors)
		loadErrs := counterValue(n.m.loadDrops.WithLabelValues("decode_error"))
		n.handle(transport.Message{From: "peer", Data: data})
		if isLoadMessage(data) {
			// The load channel never touches the claims.
			if n.StateDigest() != before {
				t.Fatal("a load message changed the claim state")
			}
			var m loadMsg
			if decodeLoad(data, &m) != nil && counterValue(n.m.loadDrops.WithLabelValues("decode_error")) != loadErrs+1 {
				t.Fatal("an undecodable load message was not counted")
			}
			n.loadMu.Lock()
			n.loads.publish(n.nowMs(), 0)
			err := watch.check(n.loads)
			n.loadMu.Unlock()
			if err != nil {
				t.Fatal(err)
			}
			return
		}
		if _, err := crdt.Decode(data); err != nil {
			if counterValue(n.m.decodeErrors) != errs+1 {
				t.Fatal("an undecodable message was not counted")
			}
			if n.StateDigest() != before {
				t.Fatal("an undecodable message changed the state")
			}
		}
		// Whatever arrived, the replica still produces sendable messages.
		n.mu.Lock()
		out := n.rep.Outgoing(time.Now().UnixMilli(), nil)
		n.mu.Unlock()
		for _, e := range out {
			if _, err := crdt.Encode(nil, e.Msg); err != nil {
				t.Fatalf("after the input, the replica built an unencodable %v: %v", e.Msg.Type, err)
			}
		}
	})
}

// FuzzParseSeed: any --join entry parses or fails with an error, never a
// panic; what parses has a host and, for a host seed, a valid port, and
// parses again to the same seed once written back.
func FuzzParseSeed(f *testing.F) {
	for _, s := range []string{"10.0.0.5:7946", "[fd00::5]:8000", "fd00::5", "kvmesh.ns.svc", "_serf._tcp.kvmesh.ns.svc", "host:0", ":", "[", "]:1", "_", "a:b:c"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		sd, err := parseSeed(s, 7946)
		if err != nil {
			return
		}
		if sd.host == "" {
			t.Fatalf("parseSeed(%q) = %+v: empty host", s, sd)
		}
		if sd.kind == seedSRV {
			return
		}
		if sd.port < 1 || sd.port > 65535 {
			t.Fatalf("parseSeed(%q): port %d", s, sd.port)
		}
		again, err := parseSeed(joinPort(nil, []string{sd.host}, sd.port)[0], 1)
		if err != nil || again != sd {
			t.Fatalf("parseSeed(%q) = %+v, but its canonical form parses to %+v, %v", s, sd, again, err)
		}
	})
}
