package mesh

import (
	"context"

	"github.com/kvmesh/kvmesh/crdt"
)

// sender delivers one peer's messages: a bounded queue and a goroutine that
// encodes each message and sends it with a timeout. A slow or unreachable
// peer only fills its own queue; once it is full, further messages to that
// peer are dropped (and counted), which the protocol repairs by
// retransmission or a full-state transfer. Other peers never wait for it.
type sender struct {
	peer string
	addr string
	q    chan *crdt.Message
	stop chan struct{}
}

// enqueue queues m without blocking; false when the queue is full.
func (s *sender) enqueue(m *crdt.Message) bool {
	select {
	case s.q <- m:
		return true
	default:
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
		case m := <-s.q:
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
// addresses), replacing a sender whose peer moved. Replication loop only.
func (n *Node) updateSenders(peers []string, addrs map[string]string) {
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
		s = &sender{peer: p, addr: addrs[p], q: make(chan *crdt.Message, n.cfg.SendQueueDepth), stop: make(chan struct{})}
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
}
