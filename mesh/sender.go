package mesh

import (
	"context"
	"sync/atomic"

	"github.com/kvmesh/kvmesh/crdt"
)

// sender delivers one peer's messages: a bounded queue and a goroutine that
// encodes each message and sends it with a timeout. A slow or unreachable
// peer only fills its own queue; once it is full, further messages to that
// peer are dropped (and counted), which the protocol repairs by
// retransmission or a full-state transfer. Other peers never wait for it.
//
// Load-channel messages (load.go) have a small queue of their own, already
// encoded: every alive member gets them, including members that are not
// replication peers in the overlay.
type sender struct {
	peer string
	addr string
	q    chan *crdt.Message
	lq   chan []byte
	stop chan struct{}

	loadMsgs, loadBytes atomic.Uint64 // load messages sent to this peer

	// queued is the claims (plus one per message) in q; maxQueued bounds
	// it (Config.SendQueueClaims).
	queued    atomic.Int64
	maxQueued int64
}

// weight is what m counts against sender.maxQueued.
func weight(m *crdt.Message) int64 { return int64(len(m.Batch.Claims)) + 1 }

// enqueueLoad queues an encoded load message without blocking; false when
// the queue is full.
func (s *sender) enqueueLoad(data []byte) bool {
	select {
	case s.lq <- data:
		return true
	default:
		return false
	}
}

// enqueue queues m without blocking; false when the queue is full, in
// messages or in claims (an empty queue takes any one message).
func (s *sender) enqueue(m *crdt.Message) bool {
	w := weight(m)
	if q := s.queued.Add(w); q > s.maxQueued && q != w {
		s.queued.Add(-w)
		return false
	}
	select {
	case s.q <- m:
		return true
	default:
		s.queued.Add(-w)
		return false
	}
}

// maxKeptBuffer is the largest encoding buffer a sender keeps between
// messages; a rare large full-state chunk does not pin its size.
const maxKeptBuffer = 1 << 20

func (n *Node) runSender(ctx context.Context, s *sender) {
	defer n.wg.Done()
	var buf []byte
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.stop:
			return
		case data := <-s.lq:
			sctx, cancel := context.WithTimeout(ctx, n.cfg.SendTimeout)
			err := n.tr.Send(sctx, s.addr, data)
			cancel()
			if err != nil {
				n.m.loadDrops.WithLabelValues("send_error").Inc()
				continue
			}
			s.loadMsgs.Add(1)
			s.loadBytes.Add(uint64(len(data)))
		case m := <-s.q:
			s.queued.Add(-weight(m))
			data, err := crdt.Encode(buf[:0], m)
			if err != nil {
				n.m.sendDrops.WithLabelValues("encode_error").Inc()
				n.log.Error().Err(err).Str("peer", s.peer).Stringer("type", m.Type).Msg("mesh: cannot encode a message")
				continue
			}
			if cap(data) <= maxKeptBuffer {
				buf = data[:0]
			}
			sctx, cancel := context.WithTimeout(ctx, n.cfg.SendTimeout)
			err = n.tr.Send(sctx, s.addr, data)
			cancel()
			if err != nil {
				n.m.sendDrops.WithLabelValues("send_error").Inc()
				if !failing && ctx.Err() == nil {
					// One line per change of state, not one per message.
					n.log.Debug().Err(err).Str("peer", s.peer).Str("addr", s.addr).Msg("mesh: sends to peer failing")
				}
				failing = true
				continue
			}
			if failing {
				n.log.Debug().Str("peer", s.peer).Msg("mesh: sends to peer succeed again")
				failing = false
			}
			n.m.sent(m.Type, len(data))
		}
	}
}

// updateSenders makes the set of senders match peers (with their QUIC
// addresses), replacing a sender whose peer moved, and publishes the
// senders for the load loop. Replication loop only.
func (n *Node) updateSenders(peers []string, addrs map[string]string) {
	joined := false
	want := make(map[string]bool, len(peers))
	for _, p := range peers {
		want[p] = true
		s := n.senders[p]
		if s != nil && s.addr == addrs[p] {
			continue
		}
		if s != nil {
			close(s.stop)
		}
		s = &sender{peer: p, addr: addrs[p], q: make(chan *crdt.Message, n.cfg.SendQueueDepth),
			lq: make(chan []byte, n.cfg.LoadQueueDepth), stop: make(chan struct{}), maxQueued: int64(n.cfg.SendQueueClaims)}
		joined = true
		n.senders[p] = s
		n.wg.Add(1)
		go n.runSender(n.ctx, s)
	}
	for p, s := range n.senders {
		if !want[p] {
			close(s.stop)
			delete(n.senders, p)
		}
	}
	n.publishSenders()
	if joined {
		// A new member: tell it everything at once (after publishing its
		// sender, so the snapshot reaches it).
		n.loadJoined.Store(true)
		n.wakeLoad()
	}
}

// publishSenders hands the current senders to the load loop.
func (n *Node) publishSenders() {
	out := make([]*sender, 0, len(n.senders))
	for _, s := range n.senders {
		out = append(out, s)
	}
	n.loadOut.Store(&out)
}
