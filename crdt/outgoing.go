package crdt

import "github.com/kvmesh/kvmesh/tree"

// Envelope is a message to send to the peer named To.
type Envelope struct {
	To  string
	Msg *Message
}

// Outgoing appends to out every message that should leave now: delta
// messages for unacknowledged changes (within the window), retransmissions
// of what timed out, full-state chunks, queued replies, and a bare ack when
// a peer is owed one and nothing else is going its way. Every message
// carries the cumulative ack for its receiver. The caller encodes and sends
// them; loss is fine, the protocol retransmits.
func (r *Replica) Outgoing(now int64, out []Envelope) []Envelope {
	r.reg = r.ix.Backends(r.reg[:0])
	retransmit := r.cfg.RetransmitAfter.Milliseconds()
	for _, p := range r.order {
		n0 := len(out)
		if len(p.inflight) > 0 && now-p.inflight[0].sentAt >= retransmit {
			// Go back: resend everything the peer has not acknowledged.
			p.sent = p.acked
			p.inflight = p.inflight[:0]
			r.stats.Retransmits++
		}
		if !r.log.covers(p.sent) {
			r.startFull(p) // the buffer no longer holds what the peer lacks
		}
		out = r.emitFullChunks(p, now, out)
		// skipped: the start of a range with nothing for this peer that no
		// message covers yet, or -1. The peer must still hear of it: it
		// holds our changes up to a sequence number, and a delta starting
		// past that number waits (in its gap list) for the range before
		// it, which would never come; its acks would stay behind for good.
		skipped := int64(-1)
		for len(p.inflight) < r.cfg.Window && p.sent < r.log.last() {
			m, to := r.buildDelta(p, now)
			if m == nil {
				// Nothing in (sent, to] is for this peer (all of it came
				// from the peer itself, or expired): the next message
				// covers it.
				if skipped < 0 {
					skipped = int64(p.sent)
				}
				p.sent = to
				continue
			}
			if skipped >= 0 {
				m.FromSeq, skipped = uint64(skipped), -1
			}
			p.inflight = append(p.inflight, inflight{to: to, sentAt: now})
			p.sent = to
			out = append(out, Envelope{To: p.name, Msg: m})
		}
		if skipped >= 0 { // no delta followed: an empty one covers the range
			p.inflight = append(p.inflight, inflight{to: p.sent, sentAt: now})
			out = append(out, Envelope{To: p.name, Msg: &Message{Type: MsgDelta, FromSeq: uint64(skipped), ToSeq: p.sent}})
		}
		for _, m := range p.control {
			out = append(out, Envelope{To: p.name, Msg: m})
		}
		p.control = p.control[:0]
		if p.ackDue && len(out) == n0 {
			out = append(out, Envelope{To: p.name, Msg: &Message{Type: MsgAck}})
		}
		for _, e := range out[n0:] {
			e.Msg.From, e.Msg.Incarnation = r.cfg.Name, r.inc
			e.Msg.AckUpTo, e.Msg.AckFor = p.recv, p.inc
			r.stats.ClaimsSent += uint64(len(e.Msg.Batch.Claims))
		}
		if len(out) > n0 {
			p.ackDue = false
		}
		r.stats.MessagesSent += uint64(len(out) - n0)
	}
	r.gcLog()
	return out
}

// emitFullChunks emits the chunks of a running full transfer that are due: not
// sent yet, or unacknowledged for longer than RetransmitAfter, at most
// Window outstanding.
func (r *Replica) emitFullChunks(p *peer, now int64, out []Envelope) []Envelope {
	f := p.full
	if f == nil {
		return out
	}
	n0 := len(out)
	retransmit := r.cfg.RetransmitAfter.Milliseconds()
	outstanding := 0
	for i := range f.acked {
		if !f.acked[i] && f.sentAt[i] != 0 && now-f.sentAt[i] < retransmit {
			outstanding++
		}
	}
	window := 4 * r.cfg.Window // chunks are acknowledged one by one: keep more in flight
	for i := range f.acked {
		if outstanding >= window {
			break
		}
		if f.acked[i] || (f.sentAt[i] != 0 && now-f.sentAt[i] < retransmit) {
			continue
		}
		if f.sentAt[i] != 0 {
			r.stats.Retransmits++
		}
		f.sentAt[i] = now
		outstanding++
		m := &Message{Type: MsgFull, Epoch: f.epoch, Chunk: uint32(i), Chunks: uint32(len(f.acked)), BaseSeq: f.base}
		per := r.cfg.DigestBuckets / len(f.acked)
		m.Batch = r.bucketBatch(i*per, (i+1)*per, now)
		if len(m.Batch.Claims) > r.fullChunkLimit() && r.fullChunks(r.ix.Len()) > len(f.acked) {
			// The chunk count was set from the index's size when the
			// transfer began, but chunks are built when sent: the index
			// has grown since, and a chunk this size may be more than the
			// peer's decoder takes (then the transfer could never end,
			// and every retransmission would walk the table again).
			// Start over, cut for the size the index has now; it can
			// only grow so many times before every bucket is a chunk.
			r.startFull(p)
			return r.emitFullChunks(p, now, out[:n0])
		}
		out = append(out, Envelope{To: p.name, Msg: m})
	}
	return out
}

// fullChunkLimit is the most claims a full chunk may hold before its
// transfer is restarted with more chunks: fullChunks aims at MaxBatchClaims/2,
// so four times that is growth, well below what a decoder takes.
func (r *Replica) fullChunkLimit() int {
	return min(2*r.cfg.MaxBatchClaims, MaxClaimsPerMessage/2)
}

// bucketRange is the key range of a digest bucket.
func (r *Replica) bucketRange(b int) (lo, hi tree.Key) {
	bits := bucketBits(r.cfg.DigestBuckets)
	if bits == 0 {
		return 1, ^tree.Key(0)
	}
	shift := 64 - bits
	lo = tree.Key(uint64(b) << shift)
	hi = lo + tree.Key(uint64(1)<<shift-1)
	return max(lo, 1), hi
}

func bucketBits(n int) uint {
	b := uint(0)
	for 1<<b < n {
		b++
	}
	return b
}

// bucketBatch is every live claim of the buckets [from, to), with the whole
// registry (so removals and restarts travel even without claims) and the
// floor.
func (r *Replica) bucketBatch(from, to int, now int64) Batch {
	batch := r.registryBatch()
	r.appendBuckets(&batch, from, to, now)
	return batch
}

// registryBatch is a batch with the whole registry and the floor, to which
// appendBuckets adds claims.
func (r *Replica) registryBatch() Batch {
	batch := Batch{Floor: r.ix.Floor()}
	// Snapshot the registry first: the walk of appendBuckets holds the
	// index's lock, so backendIndex must not need to refresh it.
	r.reg = r.ix.Backends(r.reg[:0])
	r.resetBackendIndex()
	for id := range r.reg {
		if r.reg[id].State != 0 { // not a free id
			r.backendIndex(&batch, tree.BackendID(id))
		}
	}
	return batch
}

// appendBuckets appends every live claim of the buckets [from, to) to a
// batch made by registryBatch (no other batch built in between).
func (r *Replica) appendBuckets(batch *Batch, from, to int, now int64) {
	lo, _ := r.bucketRange(from)
	_, hi := r.bucketRange(to - 1)
	r.ix.RangeKeys(lo, hi, now, func(c *tree.Claim) bool {
		batch.Claims = append(batch.Claims, r.wireClaim(batch, c))
		return true
	})
}

func (r *Replica) wireClaim(batch *Batch, c *tree.Claim) WireClaim {
	return WireClaim{Key: c.Key, Backend: r.backendIndex(batch, c.Backend), Gen: c.Gen, Time: c.Time, Expires: c.Expires, Origin: c.Origin}
}

func (r *Replica) resetBackendIndex() {
	if cap(r.bidx) < len(r.reg) {
		r.bidx = make([]uint32, len(r.reg))
	}
	r.bidx = r.bidx[:len(r.reg)]
	clear(r.bidx)
}

// backendIndex returns the position of backend id in batch.Backends, adding
// its current registry entry the first time.
func (r *Replica) backendIndex(batch *Batch, id tree.BackendID) uint32 {
	if int(id) >= len(r.reg) {
		// Registered after the snapshot: refresh it.
		r.reg = r.ix.Backends(r.reg[:0])
		for len(r.bidx) < len(r.reg) {
			r.bidx = append(r.bidx, 0)
		}
	}
	if v := r.bidx[id]; v != 0 {
		return v - 1
	}
	batch.Backends = append(batch.Backends, r.reg[id])
	r.bidx[id] = uint32(len(batch.Backends))
	return uint32(len(batch.Backends) - 1)
}

type claimID struct {
	key tree.Key
	b   tree.BackendID
}

// buildDelta gathers the changes after p.sent for peer p, joined (one value
// per (key, backend), the dominating one), up to MaxBatchClaims. It returns
// nil when the range held nothing for p, and the last sequence number the
// message (or the skip) covers.
func (r *Replica) buildDelta(p *peer, now int64) (*Message, uint64) {
	batch := Batch{Floor: r.ix.Floor()}
	r.resetBackendIndex()
	if r.pos == nil {
		r.pos = make(map[claimID]int, r.cfg.MaxBatchClaims)
	}
	clear(r.pos)
	to := p.sent
	r.log.each(p.sent, func(e *logEntry) bool {
		if len(batch.Claims) >= r.cfg.MaxBatchClaims {
			return false
		}
		to = e.seq
		if e.source == p.id && e.source != 0 {
			return true // never echo a change back to where it came from
		}
		if e.isBackend {
			r.backendIndex(&batch, e.backend)
			return true
		}
		// A claim of a backend forgotten since it was logged was made
		// unsendable then (forgetLogged); expired, it is skipped here.
		c := &e.claim
		if c.Expires <= now {
			return true
		}
		w := r.wireClaim(&batch, c)
		id := claimID{c.Key, c.Backend}
		if i, ok := r.pos[id]; ok {
			prev := &batch.Claims[i]
			if c.Dominates(tree.Claim{Gen: prev.Gen, Expires: prev.Expires, Time: prev.Time, Origin: prev.Origin}) {
				*prev = w
			}
			return true
		}
		r.pos[id] = len(batch.Claims)
		batch.Claims = append(batch.Claims, w)
		return true
	})
	if len(batch.Claims) == 0 && len(batch.Backends) == 0 {
		return nil, to
	}
	return &Message{Type: MsgDelta, FromSeq: p.sent, ToSeq: to, Batch: batch}, to
}

// queueRepair queues the claims of the given buckets for p, in messages of
// at most MaxBatchClaims claims, each with the whole registry. A bucket named
// twice is sent once, so a request can never make the node queue more than
// its whole state. Buckets share messages: the message count follows the
// claims, not the buckets, so a request for every bucket (a digest of
// another size, or a peer that missed a lot) of a small state is a message
// or two, not one per bucket (4,096 with the mesh's defaults, more than a
// peer's send queue holds: its tail, the same buckets every time, was
// dropped).
func (r *Replica) queueRepair(p *peer, buckets []uint32, now int64) {
	n := r.cfg.DigestBuckets
	seen := make([]bool, n)
	some := false
	for _, b := range buckets {
		if int(b) >= n || seen[b] {
			continue
		}
		seen[b] = true
		some = true
		r.stats.BucketsRepaired++
	}
	if !some {
		return
	}
	batch := r.registryBatch()
	for b := 0; b < n; {
		if !seen[b] {
			b++
			continue
		}
		e := b + 1
		for e < n && seen[e] {
			e++
		}
		r.appendBuckets(&batch, b, e, now) // a run of buckets is one key range
		b = e
	}
	for len(batch.Claims) > r.cfg.MaxBatchClaims {
		part := batch
		part.Claims = batch.Claims[:r.cfg.MaxBatchClaims]
		p.control = append(p.control, &Message{Type: MsgRepair, Batch: part})
		batch.Claims = batch.Claims[r.cfg.MaxBatchClaims:]
	}
	p.control = append(p.control, &Message{Type: MsgRepair, Batch: batch})
}
