package mesh

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/kvmesh/kvmesh/crdt"
	"github.com/kvmesh/kvmesh/transport"
)

// replicate is the replication loop, the one long-running loop of a Node.
// On every flush tick, or earlier when signalled (enough learned claims
// waiting, a backend invalidated, a full-state or digest exchange to
// answer), it asks the Replica what to send and hands each message to its
// peer's sender. It also follows membership (serf events), starts one digest
// exchange per anti-entropy tick (round-robin over the peers) and sweeps
// dead claims from the index.
func (n *Node) replicate(ctx context.Context) {
	defer n.wg.Done()
	flush := time.NewTicker(n.cfg.FlushInterval)
	ae := time.NewTicker(n.cfg.AntiEntropyInterval)
	sweep := time.NewTicker(n.cfg.SweepInterval)
	defer func() {
		flush.Stop()
		ae.Stop()
		sweep.Stop()
		for name, s := range n.senders {
			close(s.stop)
			delete(n.senders, name)
		}
	}()
	n.refresh()
	for {
		select {
		case <-ctx.Done():
			return
		case <-n.serfEvents:
			n.drainSerfEvents()
			n.refresh()
		case <-flush.C:
			n.flushTick()
		case <-n.kick:
			n.flush()
		case <-ae.C:
			n.refresh() // a safety net: membership is event-driven
			n.antiEntropy()
		case <-sweep.C:
			if k := n.ix.Sweep(n.nowMs()); k > 0 {
				n.log.Debug().Int("reclaimed", k).Msg("mesh: swept dead claims")
			}
			n.forgetRemoved()
		}
	}
}

// forgetRemoved frees the registry ids of backends removed long ago
// (tree.Config.ForgetRemovedMillis), for new names: the replica's log and
// the load channel forget them too, and the next load snapshots carry
// names, so peers learn which backend the ids name now.
func (n *Node) forgetRemoved() {
	now := n.nowMs()
	n.mu.Lock()
	ids := slices.Clone(n.rep.ForgetRemoved(now))
	n.mu.Unlock()
	if len(ids) == 0 {
		return
	}
	n.loadMu.Lock()
	n.loads.forget(ids)
	for _, id := range ids {
		delete(n.lp.names, id)
		delete(n.lp.lessonLast, id)
	}
	n.lp.namesLeft = 3
	n.loadMu.Unlock()
	n.log.Info().Int("forgotten", len(ids)).Msg("mesh: freed the registry ids of backends removed before the forget horizon")
}

// drainSerfEvents discards queued serf events: refresh reads the whole
// member list, so one refresh covers them all.
func (n *Node) drainSerfEvents() {
	for {
		select {
		case <-n.serfEvents:
		default:
			return
		}
	}
}

// flushTick flushes on a tick unless the node is idle: nothing happened
// since the last flush, which sent nothing. An idle Replica can only have
// retransmissions due, which are timed in RetransmitAfter (250 ms), so it
// is asked at a quarter of that instead of every tick. With dozens of nodes
// in one test process this is most of the idle CPU.
func (n *Node) flushTick() {
	idle := max(n.cfg.Replica.RetransmitAfter/4, n.cfg.FlushInterval)
	if !n.dirty.Load() && n.lastSent == 0 && time.Since(n.lastFlush) < idle {
		return
	}
	n.flush()
}

// flush sends everything the Replica has for its peers now.
func (n *Node) flush() {
	n.dirty.Store(false)
	n.pending.Store(0)
	n.lastFlush = time.Now()
	now := n.nowMs()
	n.mu.Lock()
	n.drainLearnsLocked(now)
	n.out = n.rep.Outgoing(now, n.out[:0])
	n.mu.Unlock()
	n.lastSent = len(n.out)
	for i := range n.out {
		e := n.out[i]
		n.out[i] = crdt.Envelope{} // do not keep the message alive
		s := n.senders[e.To]
		if s == nil {
			n.m.sendDrops.WithLabelValues("no_sender").Inc()
			continue
		}
		if !s.enqueue(e.Msg) {
			n.m.sendDrops.WithLabelValues("queue_full").Inc()
		}
	}
}

// antiEntropy starts a digest exchange with the next peer, round-robin,
// skipping peers that have not acknowledged all our changes or are
// receiving the full state: their digests differ for sure, and every
// differing bucket is repaired whole, so a digest then only adds load to a
// peer that is already behind (on a starved machine this fed on itself:
// more in flight, larger repairs, more in flight). Retransmission and
// full-state transfer already cover such peers.
func (n *Node) antiEntropy() {
	if len(n.peers) == 0 {
		return
	}
	now := n.nowMs()
	n.mu.Lock()
	status := n.rep.Peers()
	started := false
	for i := 0; i < len(n.peers) && !started; i++ {
		p := n.peers[(n.aeNext+i)%len(n.peers)]
		k, found := slices.BinarySearchFunc(status, p, func(s crdt.PeerStatus, name string) int { return strings.Compare(s.Name, name) })
		if !found || status[k].Backlog > 0 || status[k].InFullSync {
			continue
		}
		started = n.rep.StartDigest(p, now)
		n.aeNext += i
	}
	n.mu.Unlock()
	n.aeNext++
	if !started {
		n.m.digestsSkipped.Inc()
		return
	}
	n.flush()
}

// receive is the receive loop: it drains the transport's inbound queue.
//
// Load-channel messages are small and urgent: they are applied here, at
// once. Claim-protocol messages go on to the apply loop (applyLoop), so a
// burst of deltas to join never holds back a peer's fresh bookings. When
// the apply loop is behind (applyQ full: a full transfer being joined),
// up to maxPendingApply claim messages wait here while load messages go
// on being applied; only past that does the loop wait (and the transport,
// and the peers, with it).
func (n *Node) receive(ctx context.Context) {
	defer n.wg.Done()
	defer close(n.applyQ)
	in := n.tr.Inbound()
	var pending []transport.Message // claim messages the apply loop has no room for yet, oldest first
	for {
		var out chan<- transport.Message
		var next transport.Message
		if len(pending) > 0 {
			out, next = n.applyQ, pending[0]
		}
		src := in
		if len(pending) >= maxPendingApply {
			src = nil
		}
		select {
		case <-ctx.Done():
			return
		case out <- next:
			pending[0] = transport.Message{} // do not keep its bytes alive
			pending = pending[1:]
			if len(pending) == 0 {
				pending = nil // the backing array's front is spent
			}
		case m, ok := <-src:
			if !ok {
				for _, m := range pending { // what arrived before the end is applied
					select {
					case n.applyQ <- m:
					case <-ctx.Done():
						return
					}
				}
				return
			}
			if isLoadMessage(m.Data) {
				n.handle(m)
				continue
			}
			if len(pending) == 0 {
				select {
				case n.applyQ <- m: // the common case: room at once
					continue
				default:
				}
			}
			pending = append(pending, m)
		}
	}
}

// maxPendingApply bounds the claim messages the receive loop holds while
// the apply loop is behind (a quarter of applyQ's depth).
const maxPendingApply = 64

// applyLoop handles the claim-protocol messages the receive loop passes
// on, in order.
func (n *Node) applyLoop() {
	defer n.wg.Done()
	for m := range n.applyQ {
		n.handle(m)
	}
}

// handle checks, decodes and applies one received message. Messages from
// nodes that are not alive members, claim messages from members that
// derive keys otherwise (compat.go), messages that do not decode and
// messages that claim another sender than the authenticated one are counted
// and dropped; none of them touches the Replica.
func (n *Node) handle(m transport.Message) {
	if _, ok := (*n.known.Load())[m.From]; !ok {
		n.m.unknownSenders.WithLabelValues("not_member").Inc()
		n.log.Debug().Str("from", m.From).Int("bytes", len(m.Data)).Msg("mesh: dropped a message from a non-member")
		return
	}
	if isLoadMessage(m.Data) {
		n.receiveLoad(m)
		return
	}
	if _, ok := (*n.foreign.Load())[m.From]; ok {
		n.m.unknownSenders.WithLabelValues(notPeerKeys).Inc()
		n.log.Debug().Str("from", m.From).Int("bytes", len(m.Data)).Msg("mesh: dropped claims from a member that derives keys otherwise")
		return
	}
	msg, err := crdt.Decode(m.Data)
	if err != nil {
		n.m.decodeErrors.Inc()
		n.log.Debug().Str("from", m.From).Err(err).Msg("mesh: dropped an undecodable message")
		return
	}
	if msg.From != m.From {
		n.m.unknownSenders.WithLabelValues("name_mismatch").Inc()
		n.log.Debug().Str("from", m.From).Str("claimed", msg.From).Msg("mesh: dropped a message naming another sender")
		return
	}
	now := n.nowMs()
	n.mu.Lock()
	if !n.exchangeDueLocked(msg, now) {
		// Its exchange is not answered, but what it carries for the
		// protocol is taken: its acknowledgement (a dropped one costs a
		// retransmit round) and that the peer's life was heard from.
		n.m.exchangesThrottled.WithLabelValues(msg.Type.String()).Inc()
		n.log.Debug().Str("from", m.From).Stringer("type", msg.Type).Msg("mesh: ignored an anti-entropy exchange sooner than the peer may send one")
		msg.Type, msg.Digest, msg.Buckets = crdt.MsgAck, nil, nil
	}
	err = n.rep.Receive(msg, now)
	n.dirty.Store(true) // acks, replies or relayed claims may be due
	n.lags = n.lags[:0]
	if msg.Type == crdt.MsgDelta {
		// Apply lag is measured on deltas only: full-state and repair
		// claims are old by design.
		for _, c := range n.rep.Applied() {
			n.lags = append(n.lags, float64(max(now-c.Time.Millis(), 0))/1000)
		}
	}
	n.ended = n.ended[:0]
	if n.onEnded.Load() != nil {
		for _, c := range n.rep.Applied() {
			if c.Ended() {
				n.ended = append(n.ended, c)
			}
		}
	}
	n.mu.Unlock()
	n.tellEnded(n.ended)
	n.m.received(msg.Type, len(m.Data))
	for _, l := range n.lags {
		n.m.applyLag.Observe(l)
	}
	if err != nil {
		n.m.receiveErrors.Inc()
		n.log.Debug().Str("from", m.From).Stringer("type", msg.Type).Err(err).Msg("mesh: message rejected")
		return
	}
	switch msg.Type {
	case crdt.MsgFull, crdt.MsgFullAck, crdt.MsgDigest, crdt.MsgRepairRequest:
		// A transfer or an exchange waits for our answer: answer now
		// rather than at the next tick.
		n.signal()
	}
}

// exchangeDueLocked reports whether msg, a digest or a repair request,
// may be answered now. Each makes the Replica walk its whole index and may
// queue a repair of every bucket (a digest of another size differs
// everywhere): a small message, a whole-state answer. A peer sends a
// digest to this node at most once per anti-entropy tick (one peer per
// tick, round-robin), and a repair request only in answer to our digest,
// which leaves at most once per tick; so one of each per peer per half an
// AntiEntropyInterval (room for delivery jitter) is answered, and a peer
// that sends them faster (a bug, a hostile member) gets nothing more: each
// answer would otherwise go out at the next flush and free the next one.
// An empty repair request (nothing differed) costs nothing and is not
// limited. Caller holds mu.
func (n *Node) exchangeDueLocked(msg *crdt.Message, now int64) bool {
	var last map[string]int64
	switch {
	case msg.Type == crdt.MsgDigest:
		last = n.lastDigest
	case msg.Type == crdt.MsgRepairRequest && len(msg.Buckets) > 0:
		last = n.lastRepairRequest
	default:
		return true
	}
	if t, ok := last[msg.From]; ok && now-t < n.cfg.AntiEntropyInterval.Milliseconds()/2 && now >= t {
		return false
	}
	if len(last) >= 2*len(*n.known.Load())+16 {
		// Forget members that left, so names that come and go do not pile up.
		known := *n.known.Load()
		for name := range last {
			if _, ok := known[name]; !ok {
				delete(last, name)
			}
		}
	}
	last[msg.From] = now
	return true
}
