package crdt

import (
	"testing"

	"github.com/kvmesh/kvmesh/tree"
)

// A peer that removes and re-adds us without restarting (a membership
// false positive: the others declared us dead, we refuted it) keeps our
// incarnation but numbers our changes from 0 again, and acknowledges 0
// from then on. Those acks must not be ignored: after a while a full
// transfer brings it back in step and our backlog to it drains.
func TestPeerThatForgotUsGetsAFullTransfer(t *testing.T) {
	s := newSimNet(t, 9, nil)
	a := s.add("a")
	b := s.add("b")
	s.learn("a", prompt(1, 1, 8, 0), "http://x", 60_000)
	s.settle(100)
	b.r.RemovePeer("a")
	b.r.AddPeer("a", s.now)
	s.learn("a", prompt(2, 2, 8, 0), "http://x", 60_000)
	for range 300 { // 3 s: beyond 4 x RetransmitAfter of acks going back
		s.round()
	}
	st := a.r.Peers()
	if len(st) != 1 || st[0].Backlog != 0 {
		t.Fatalf("a's view of b: %+v (want no backlog)", st)
	}
	if got := a.r.Stats().AckResets; got != 1 {
		t.Fatalf("%d ack resets, want 1", got)
	}
	if s.depth("b", prompt(2, 2, 8, 0), "http://x") == 0 {
		t.Fatal("b lacks a's new claim")
	}
	s.settle(100)
}

// A late chunk of a full transfer the sender has since replaced (its log
// overflowed mid-transfer, and the network reordered) is ignored: starting
// over for it would lose the running transfer's chunks, which the sender
// saw acknowledged and never sends again.
func TestStaleFullChunkKeepsTheRunningTransfer(t *testing.T) {
	s := newSimNet(t, 3, nil)
	s.add("a")
	b := s.add("b")
	chunk := func(epoch uint64, i uint32) *Message {
		return &Message{Type: MsgFull, From: "a", Incarnation: s.node("a").r.inc, Epoch: epoch, Chunk: i, Chunks: 2, BaseSeq: 0}
	}
	for _, m := range []*Message{chunk(2, 0), chunk(1, 1), chunk(2, 1)} {
		if err := b.r.Receive(m, s.now); err != nil {
			t.Fatal(err)
		}
	}
	st := b.r.Stats()
	if st.FullSyncsReceived != 1 || st.StaleChunks != 1 {
		t.Fatalf("transfers received %d, stale chunks %d; want 1 and 1", st.FullSyncsReceived, st.StaleChunks)
	}
}

// Digests from a peer are compared one round of repairs at a time, like
// repair requests: a digest that differs everywhere (another bucket count)
// queues a repair per bucket, and a second one before those are sent must
// not queue them again.
func TestDigestsAreBounded(t *testing.T) {
	repairs := func(digests int) (int, Stats) {
		s := newSimNet(t, 3, nil)
		a := s.add("a")
		s.add("b")
		for i := 0; i < 20; i++ {
			s.learn("a", prompt(i, i, 8, 0), "http://x", 60_000)
		}
		a.r.Outgoing(s.now, nil) // the deltas and transfers of the learning
		for range digests {
			a.r.Receive(&Message{Type: MsgDigest, From: "b", Incarnation: 5, Digest: []uint64{1}}, s.now)
		}
		n := 0
		for _, e := range a.r.Outgoing(s.now, nil) {
			if e.Msg.Type == MsgRepair {
				n++
			}
		}
		return n, a.r.Stats()
	}
	one, _ := repairs(1)
	two, st := repairs(2)
	if one == 0 || two != one || st.DigestsIgnored != 1 {
		t.Fatalf("one digest queued %d repairs, two queued %d (%d ignored); want the same, 1 ignored", one, two, st.DigestsIgnored)
	}
}

// With relay on, a node's log holds changes it relays, which never go back
// to the peer they came from: a range of them is skipped for that peer.
// The peer must still hear of the range (the next delta starts where the
// last one ended), or every later delta waits behind the gap: its acks
// stay behind, which looks like a peer that forgot us, and the sender
// would restart full transfers (or, before that check, retransmit until
// its log overflowed).
func TestRelayedRangesLeaveNoGap(t *testing.T) {
	s := newSimNet(t, 5, func(c *Config, _ *tree.Config) { c.Relay = true })
	for _, n := range []string{"a", "b", "c"} {
		s.add(n)
	}
	for i := range 60 {
		s.learn([]string{"a", "b", "c"}[i%3], prompt(i, i, 4, 0), "http://x", 60_000)
		for range 5 {
			s.round()
		}
	}
	s.settle(200)
	for _, name := range []string{"a", "b", "c"} {
		n := s.node(name)
		if st := n.r.Stats(); st.AckResets != 0 || st.FullSyncsStarted != 0 {
			t.Errorf("%s: %d ack resets, %d full transfers started (want none: they start empty and stay in step)", name, st.AckResets, st.FullSyncsStarted)
		}
		for _, p := range n.r.Peers() {
			if p.Backlog != 0 {
				t.Errorf("%s -> %s: backlog %d", name, p.Name, p.Backlog)
			}
		}
		for _, p := range n.r.order {
			if len(p.extra) != 0 {
				t.Errorf("%s holds %v from %s beyond a gap", name, p.extra, p.name)
			}
		}
	}
}
