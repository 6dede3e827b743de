package crdt

import (
	"testing"
)

// restartInPlace replaces node name by a new life with empty state (a new
// incarnation) without its peers removing it first: a process restarted
// faster than membership noticed, under the same name.
func restartInPlace(s *simNet, name string) *simNode {
	s.t.Helper()
	r := s.replica(name)
	n := &simNode{r: r, up: true}
	s.nodes[name] = n
	for _, other := range s.names {
		if o := s.nodes[other]; other != name && o.up {
			r.AddPeer(other, s.now)
		}
	}
	return n
}

// A message of a peer's previous life that the network delivers after its
// new life's first message (the transport does not order messages) is not
// a second restart: it must not reset what we received from the new life,
// start yet another full transfer, or make our acks name the old
// incarnation (which the new life ignores). Before, each late message
// flipped the peer back to its old incarnation and the next new one flipped
// it again: two restarts counted and two whole-state transfers per late
// message.
func TestLateMessageOfAPreviousLife(t *testing.T) {
	s := newSimNet(t, 11, nil)
	a := s.add("a")
	b := s.add("b")
	for i := range 10 {
		s.learn("a", prompt(i, i, 8, 0), "http://x", 60_000)
	}
	s.learn("b", prompt(100, 100, 8, 0), "http://y", 60_000)
	s.settle(100)

	// b's old life sends a delta that the network holds back.
	s.learn("b", prompt(101, 101, 8, 0), "http://y", 60_000)
	late := heldBack(t, s, b, "a")

	b = restartInPlace(s, "b")
	s.learn("b", prompt(102, 102, 8, 0), "http://y", 60_000)
	for range 3 {
		s.round() // a hears b's new life: one restart, one full transfer
	}
	before := a.r.Stats()
	if before.Restarts != 1 {
		t.Fatalf("a counted %d restarts of b, want 1", before.Restarts)
	}
	for _, m := range late {
		if err := a.r.Receive(m, s.now); err != nil {
			t.Fatal(err)
		}
	}
	s.settle(200)
	after := a.r.Stats()
	if after.Restarts != 1 || after.FullSyncsStarted != before.FullSyncsStarted {
		t.Fatalf("after the old life's late message: %d restarts (want 1), %d full transfers started (want %d)",
			after.Restarts, after.FullSyncsStarted, before.FullSyncsStarted)
	}
	if after.StaleIncarnation != uint64(len(late)) {
		t.Fatalf("%d messages counted from a previous life, want %d", after.StaleIncarnation, len(late))
	}
	// The old life's claims are still claims: joined like any.
	if s.depth("a", prompt(101, 101, 8, 0), "http://y") == 0 {
		t.Fatal("a lacks the claim of b's previous life")
	}
	if s.depth("b", prompt(101, 101, 8, 0), "http://y") == 0 {
		t.Fatal("b's new life did not get its old claim back")
	}
}

// A message without an incarnation (0: no node's life is numbered so) is
// refused: taken for a restart it would retire the peer's real life, whose
// messages would then all look late.
func TestMessageWithoutIncarnationIsRefused(t *testing.T) {
	s := newSimNet(t, 12, nil)
	a := s.add("a")
	s.add("b")
	s.learn("b", prompt(1, 1, 8, 0), "http://y", 60_000)
	s.settle(100)
	if err := a.r.Receive(&Message{Type: MsgAck, From: "b"}, s.now); err == nil {
		t.Fatal("a message from a peer without an incarnation was accepted")
	}
	s.learn("b", prompt(2, 2, 8, 0), "http://y", 60_000)
	s.settle(100)
	if st := a.r.Stats(); st.Restarts != 0 || st.StaleIncarnation != 0 {
		t.Fatalf("%d restarts, %d stale messages; want none", st.Restarts, st.StaleIncarnation)
	}
}

// A peer that restarted holds none of our state: the converged flag from
// its previous life must not say otherwise while the full transfer runs
// (antiEntropy skips peers in a transfer, so no digest would correct it
// before the transfer ends).
func TestRestartedPeerIsNotConverged(t *testing.T) {
	s := newSimNet(t, 13, nil)
	a := s.add("a")
	s.add("b")
	for i := range 10 {
		s.learn("a", prompt(i, i, 8, 0), "http://x", 60_000)
	}
	s.settle(100)
	s.antiEntropy()
	for range 3 {
		s.round()
	}
	if st := a.r.Peers(); len(st) != 1 || !st[0].Converged {
		t.Fatalf("a's view of b after a digest exchange: %+v (want converged)", st)
	}
	restartInPlace(s, "b")
	s.learn("b", prompt(100, 100, 8, 0), "http://y", 60_000)
	s.round() // a hears b's new life and starts a full transfer
	st := a.r.Peers()
	if len(st) != 1 || !st[0].InFullSync || st[0].Converged {
		t.Fatalf("a's view of b after b restarted: %+v (want a full transfer running, not converged)", st)
	}
}

// wireOut returns, through the wire format, the messages node from has
// for peer to now that keep accepts (all with nil); the rest is lost.
func wireOut(t *testing.T, from *simNode, to string, now int64, keep func(*Message) bool) []*Message {
	t.Helper()
	var out []*Message
	for _, e := range from.r.Outgoing(now, nil) {
		if e.To != to || keep != nil && !keep(e.Msg) {
			continue
		}
		data, err := Encode(nil, e.Msg)
		if err != nil {
			t.Fatal(err)
		}
		m, err := Decode(data)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, m)
	}
	return out
}

// fullAcksOut returns the full-transfer acks node from has for peer to now.
func fullAcksOut(t *testing.T, from *simNode, to string, now int64) []*Message {
	return wireOut(t, from, to, now, func(m *Message) bool { return m.Type == MsgFullAck })
}

// deliverAll hands to every message from has for it now, through the
// wire.
func deliverAll(t *testing.T, s *simNet, from *simNode, to *simNode) {
	t.Helper()
	for _, m := range wireOut(t, from, to.r.Name(), s.now, nil) {
		if err := to.r.Receive(m, s.now); err != nil {
			t.Fatal(err)
		}
	}
}

// An acknowledgement of a full-transfer chunk of a peer's previous life
// must not acknowledge a chunk of its new life's transfer: both lives
// number their transfers from 1, so epoch and chunk alike match. Taken,
// it ends the new transfer before the peer has any of it: the claims up
// to its base never reach the peer by it.
func TestFullAckOfAPreviousLife(t *testing.T) {
	for _, queued := range []bool{false, true} {
		name := map[bool]string{false: "in flight", true: "queued"}[queued]
		t.Run(name, func(t *testing.T) {
			s := newSimNet(t, 14, nil)
			b := s.add("b")
			s.learn("b", prompt(1, 1, 8, 0), "http://y", 60_000)
			s.round()
			a := s.add("a") // b starts a full transfer (epoch 1) to the new a
			s.now += s.tick
			deliverAll(t, s, b, a) // a gets b's chunk and owes it an ack
			var late []*Message
			if !queued {
				late = fullAcksOut(t, a, "b", s.now) // in flight, delivered late
				if len(late) == 0 {
					t.Fatal("a acknowledged nothing")
				}
			}

			b = restartInPlace(s, "b")
			s.learn("b", prompt(2, 2, 8, 0), "http://y", 60_000)
			b.r.RemovePeer("a")
			b.r.AddPeer("a", s.now)                              // its transfer to a: epoch 1 again
			s.learn("b", prompt(3, 3, 8, 0), "http://y", 60_000) // a delta after the transfer's base
			if st := b.r.Peers(); !st[0].InFullSync {
				t.Fatalf("b's new life runs no transfer to a: %+v", st)
			}
			s.now += s.tick
			if queued {
				// a hears b's new life before it sends the ack it owes the
				// old one.
				heard := false
				for _, e := range b.r.Outgoing(s.now, nil) {
					if e.Msg.Type == MsgFull {
						continue // lost
					}
					heard = true
					if err := a.r.Receive(e.Msg, s.now); err != nil {
						t.Fatal(err)
					}
				}
				if !heard || a.r.Stats().Restarts != 1 {
					t.Fatalf("a did not hear b's new life (%d restarts)", a.r.Stats().Restarts)
				}
				late = fullAcksOut(t, a, "b", s.now)
			}
			for _, m := range late {
				if err := b.r.Receive(m, s.now); err != nil {
					t.Fatal(err)
				}
			}
			if st := b.r.Stats(); st.FullSyncsDone != 0 {
				t.Fatalf("b's new transfer to a counted done, by an ack of its old life's (%+v)", b.r.Peers())
			}
		})
	}
}

// A late message of a life never seen here (b restarted twice, and a heard
// its third life before anything of the second) is an earlier life's: its
// claims are joined, and b's current life is not retired for it. Lives
// were told apart by the retired list only, so the second life was taken
// for a restart, the live third one retired, and every message of it
// ignored as stale from then on: a's transfer to b never finished.
func TestLateMessageOfAnUnseenLife(t *testing.T) {
	s := newSimNet(t, 12, nil)
	a := s.add("a")
	b := s.add("b")
	for i := range 10 {
		s.learn("a", prompt(i, i, 8, 0), "http://x", 60_000)
	}
	s.settle(100)

	b = restartInPlace(s, "b") // its second life: a never hears it live
	s.learn("b", prompt(201, 201, 8, 0), "http://y", 60_000)
	late := heldBack(t, s, b, "a")
	b = restartInPlace(s, "b") // its third
	s.learn("b", prompt(202, 202, 8, 0), "http://y", 60_000)
	for range 3 {
		s.round()
	}
	before := a.r.Stats()
	for _, m := range late {
		if err := a.r.Receive(m, s.now); err != nil {
			t.Fatal(err)
		}
	}
	s.settle(300)
	after := a.r.Stats()
	if after.Restarts != before.Restarts || after.FullSyncsStarted != before.FullSyncsStarted {
		t.Fatalf("the unseen life's late message: restarts %d -> %d, full transfers %d -> %d (want no change)",
			before.Restarts, after.Restarts, before.FullSyncsStarted, after.FullSyncsStarted)
	}
	for _, p := range a.r.Peers() {
		if p.Name == "b" && (p.InFullSync || p.Backlog != 0) {
			t.Fatalf("a's view of b stuck: %+v", p)
		}
	}
	if s.depth("a", prompt(201, 201, 8, 0), "http://y") == 0 {
		t.Fatal("a lacks the claim of b's second life")
	}
	if s.depth("b", prompt(1, 1, 8, 0), "http://x") == 0 {
		t.Fatal("b's third life did not get a's claims")
	}
}

// Ordered incarnations grow with the start time and past the last one used.
func TestOrderedIncarnation(t *testing.T) {
	a := OrderedIncarnation(1_800_000_000_000, 0xffff, 0)
	b := OrderedIncarnation(1_800_000_000_001, 0, 0)
	if !(b > a) || !ordered(a) || !ordered(b) {
		t.Fatalf("%x then %x", a, b)
	}
	if c := OrderedIncarnation(1_700_000_000_000, 5, b); c <= b { // a clock stepped back
		t.Fatalf("%x not above the last used %x", c, b)
	}
	if ordered(1 << 60) {
		t.Fatal("a random incarnation of an earlier release taken for ordered")
	}
}

// heldBack takes what from has to send to the node named to, without
// delivering it: messages the network holds back.
func heldBack(t *testing.T, s *simNet, from *simNode, to string) []*Message {
	t.Helper()
	late := wireOut(t, from, to, s.now, nil)
	if len(late) == 0 {
		t.Fatalf("nothing to hold back for %s", to)
	}
	return late
}
