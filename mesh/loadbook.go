package mesh

import (
	"math"

	"github.com/kvmesh/kvmesh/tree"
)

// A peer's bookings, merged entry by entry. Each backend's figures keep the
// sequence number of the message that set them, and a message changes a
// backend only when it is newer than that and than the last snapshot
// applied (which set or zeroed every backend). So the result does not
// depend on the order in which the transport delivers one session's
// messages: over QUIC each message has a stream of its own, and two sent
// within microseconds arrive either way round.

// peerBooking is a peer's bookings at one backend and the sequence of the
// message that set them. A zero one is kept until the next snapshot: its
// sequence stops an older message, arriving late, from bringing back what
// the peer has since released.
type peerBooking struct{ units, requests, inFlight, seq uint64 }

func (b peerBooking) zero() bool { return b.units == 0 && b.requests == 0 && b.inFlight == 0 }

// applyBookings applies a bookings message (a delta, or a snapshot with or
// without names) of p's current session. It reports whether it changed
// anything: false when every entry was superseded by later messages (a
// duplicate, or an older snapshot than one applied).
func (t *loadTable) applyBookings(p *peerLoad, m *loadMsg, now int64) bool {
	applied := false
	if m.Names {
		t.applyNames(p, m, now)
		applied = m.Seq > p.namesSeq
		p.namesSeq = max(p.namesSeq, m.Seq)
	}
	if m.Snapshot && m.Seq > p.snapSeq {
		// What the snapshot leaves out is zero, unless a later delta has
		// already set it.
		for id, b := range p.book {
			if b.seq < m.Seq {
				delete(p.book, id)
			}
		}
		p.snapSeq = m.Seq
		t.observeRouted(p, int64(min(m.Routed, math.MaxInt64)), now)
		applied = true
	}
	superseded := 0
	t.eachEntry(p, m, func(id tree.BackendID, e *loadEntry) {
		p.written[id] = max(p.written[id], e.Written)
		if b, ok := p.book[id]; m.Seq < p.snapSeq || (ok && b.seq >= m.Seq) {
			superseded++
			return
		}
		p.book[id] = peerBooking{units: e.Units, requests: e.Requests, inFlight: e.InFlight, seq: m.Seq}
	})
	return applied || len(m.Entries) == 0 || superseded < len(m.Entries)
}

// applyNames learns the peer's backend names from a snapshot with names. A
// name an older snapshot gives an index that a newer one named otherwise
// is left out (the peer has since given the index to another backend).
func (t *loadTable) applyNames(p *peerLoad, m *loadMsg, now int64) {
	if t.namedAt.Load() == 0 {
		t.namedAt.Store(now)
	}
	if p.names == nil {
		p.names = make(map[uint32]string, len(m.Entries))
		p.ids = make(map[uint32]tree.BackendID, len(m.Entries))
	}
	for i := range m.Entries {
		e := &m.Entries[i]
		if old, ok := p.names[e.Idx]; ok && old != e.Name {
			if m.Seq < p.namesSeq {
				continue
			}
			// The peer gave this index to another backend (it forgot a
			// removed one's name, tree.Index.ForgetRemoved): resolve again.
			delete(p.ids, e.Idx)
		}
		p.names[e.Idx] = e.Name
	}
}
