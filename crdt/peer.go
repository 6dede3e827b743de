package crdt

import "github.com/kvmesh/kvmesh/tree"

// peer is what a Replica tracks about one other replica.
type peer struct {
	name string
	id   tree.NodeID
	inc  uint64 // the peer's incarnation, 0 until heard from
	// Its previous incarnations, most recent ones (a ring): a message of
	// one that arrives late is not taken for yet another restart.
	retired     [4]uint64
	nextRetired int
	// heardLife is when a message of the current life last arrived (ms).
	heardLife int64

	// Sending our changes to the peer.
	acked    uint64     // the peer holds all our changes up to here
	sent     uint64     // delta messages cover changes up to here
	inflight []inflight // unacknowledged delta messages, oldest first
	full     *fullSend  // running full-state transfer to the peer

	// Receiving the peer's changes.
	recv      uint64     // we hold all the peer's changes up to here
	extra     []seqRange // ranges applied beyond recv, merged as gaps fill
	fullRecv  *fullRecv  // running full-state transfer from the peer
	recvEpoch uint64     // the newest transfer epoch seen from the peer (this incarnation)
	backSince int64      // ms: since when its acks have been below acked (0: they are not)
	ackDue    bool
	control   []*Message // queued replies: full acks, repairs, digests
	converged bool       // the last digest exchange found no difference
	lastMatch int64      // when it last did
	lastHeard int64

	// Its clock (raiseFloor): how far beyond MaxSkew ahead of ours it was
	// last seen running (ms, 0: not), and the highest floor it sent while
	// it ran ahead, with the lead it had then.
	lead, leadFloor, floorLead int64
}

type inflight struct {
	to     uint64
	sentAt int64
}

type seqRange struct{ from, to uint64 } // (from, to]

type fullSend struct {
	epoch  uint64
	base   uint64
	acked  []bool
	sentAt []int64 // 0 = not sent yet
	left   int
}

type fullRecv struct {
	epoch uint64
	base  uint64
	got   []bool
	left  int
}

// onAck records that the peer holds our changes up to seq.
func (p *peer) onAck(seq uint64) {
	if seq <= p.acked {
		return
	}
	p.acked = seq
	if p.sent < seq {
		p.sent = seq
	}
	i := 0
	for i < len(p.inflight) && p.inflight[i].to <= seq {
		i++
	}
	p.inflight = append(p.inflight[:0], p.inflight[i:]...)
}

// onDelta records that the peer's changes in (from, to] were applied, and
// advances recv over every range that now joins up with it.
func (p *peer) onDelta(from, to uint64) {
	if to <= p.recv {
		return
	}
	if from > p.recv {
		if len(p.extra) < 16 {
			p.extra = append(p.extra, seqRange{from, to})
		}
		return
	}
	p.recv = to
	for merged := true; merged; {
		merged = false
		for i := 0; i < len(p.extra); i++ {
			r := p.extra[i]
			if r.from <= p.recv {
				p.recv = max(p.recv, r.to)
				p.extra = append(p.extra[:i], p.extra[i+1:]...)
				merged = true
				i--
			}
		}
	}
}

// resetReceive forgets what we received from the peer (it restarted).
func (p *peer) resetReceive() {
	p.recv = 0
	p.extra = p.extra[:0]
	p.fullRecv = nil
	p.recvEpoch = 0
}

// resetSend forgets what the peer acknowledged (it restarted, or it fell
// behind the delta buffer); the caller starts a full transfer.
func (p *peer) resetSend() {
	p.acked, p.sent = 0, 0
	p.inflight = p.inflight[:0]
	p.full = nil
	p.backSince = 0
}

// retire records that the peer's incarnation inc has ended.
func (p *peer) retire(inc uint64) {
	p.retired[p.nextRetired] = inc
	p.nextRetired = (p.nextRetired + 1) % len(p.retired)
}

// isRetired reports whether inc is one of the peer's previous incarnations.
func (p *peer) isRetired(inc uint64) bool {
	for _, r := range p.retired {
		if r != 0 && r == inc {
			return true
		}
	}
	return false
}

// repairQueued reports whether repair messages for the peer still wait to
// be sent.
func (p *peer) repairQueued() bool {
	for _, m := range p.control {
		if m.Type == MsgRepair {
			return true
		}
	}
	return false
}
