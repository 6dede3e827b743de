package crdt

import (
	"errors"
	"fmt"
	"slices"
	"sort"

	"github.com/kvmesh/kvmesh/tree"
)

// Replica is one node's replicated claim state and its side of the
// anti-entropy protocol. The claims live in a tree.Index (the one copy on
// the node, which the router reads); the Replica adds the clock, the delta
// buffer and per-peer protocol state.
//
// A Replica is a pure state machine and is not safe for concurrent use: the
// caller (package mesh) serializes calls, passes the wall-clock time in
// milliseconds, sends what Outgoing returns and hands received messages to
// Receive.
type Replica struct {
	cfg   Config
	id    tree.NodeID
	inc   uint64
	ix    *tree.Index
	clock tree.Clock
	log   deltaLog
	peers map[string]*peer
	order []*peer // peers sorted by name, for deterministic iteration

	epoch   uint64 // last full-transfer epoch started
	stats   Stats
	scratch []tree.Claim     // Learn's changed claims
	applied []tree.Claim     // the novel claims of the last Receive
	claims  []tree.Claim     // applyBatch's conversion buffer
	freed   []tree.BackendID // ForgetRemoved's freed ids
	reg     []tree.BackendEntry
	bidx    []uint32        // per local backend id: index+1 in the batch being built
	pos     map[claimID]int // buildDelta's join of claims by (key, backend)
}

// Stats are a Replica's cumulative counters.
type Stats struct {
	LocalChanges      uint64 `json:"local_changes"` // claims and registry changes made here
	MessagesSent      uint64 `json:"messages_sent"` // messages returned by Outgoing
	ClaimsSent        uint64 `json:"claims_sent"`   // claims in delta, full and repair messages
	DeltasReceived    uint64 `json:"deltas_received"`
	ClaimsReceived    uint64 `json:"claims_received"` // claims in received batches
	ClaimsApplied     uint64 `json:"claims_applied"`  // the novel ones
	ClaimsRejected    uint64 `json:"claims_rejected"` // expired, evicted, stale or invalid on arrival
	Retransmits       uint64 `json:"retransmits"`
	FullSyncsStarted  uint64 `json:"full_syncs_started"`
	FullSyncsDone     uint64 `json:"full_syncs_done"`     // transfers to peers completed (all chunks acked)
	FullSyncsReceived uint64 `json:"full_syncs_received"` // transfers from peers completed
	DigestsSent       uint64 `json:"digests_sent"`
	DigestMismatches  uint64 `json:"digest_mismatches"` // digests that found differing buckets
	BucketsRepaired   uint64 `json:"buckets_repaired"`  // buckets sent in repair messages
	ClockClamps       uint64 `json:"clock_clamps"`
	ExpiryCaps        uint64 `json:"expiry_caps"`        // received claims whose expiry was capped at their time + MaxTTL
	FloorsIgnored     uint64 `json:"floors_ignored"`     // eviction floors beyond what any honest node can produce
	FloorsShifted     uint64 `json:"floors_shifted"`     // eviction floors lowered by their sender's clock lead (raiseFloor)
	BackendsRejected  uint64 `json:"backends_rejected"`  // registry entries this node could not register (claims on them skipped)
	BackendsForgotten uint64 `json:"backends_forgotten"` // late registry entries of backends removed before the forget horizon (ignored, with their claims)
	RepairsIgnored    uint64 `json:"repairs_ignored"`    // repair requests ignored while repairs for that peer were queued
	UnknownSender     uint64 `json:"unknown_sender"`     // messages from nodes that are not peers
	Restarts          uint64 `json:"restarts"`           // peers seen with a new incarnation
	StaleIncarnation  uint64 `json:"stale_incarnation"`  // late messages of a peer's previous life: claims joined, protocol fields ignored
	AckResets         uint64 `json:"ack_resets"`         // peers whose acks went back (they forgot us): full transfers restarted
	StaleChunks       uint64 `json:"stale_chunks"`       // full-transfer chunks of an older transfer than the one running, ignored
	DigestsIgnored    uint64 `json:"digests_ignored"`    // digests not compared while repairs for that peer were queued
}

// PeerStatus is the protocol state of one peer, for metrics and admin views.
type PeerStatus struct {
	Name string
	// Backlog is how many of our changes the peer has not acknowledged.
	Backlog uint64
	// InFullSync is true while a full-state transfer to the peer runs.
	InFullSync bool
	// Converged is true when the last digest exchange found no difference;
	// LastMatch is when (ms).
	Converged bool
	LastMatch int64
	LastHeard int64
}

// New returns a Replica over ix. incarnation must differ between two lives
// of the same node (e.g. random at start), so peers notice a restart.
func New(cfg Config, ix *tree.Index, incarnation uint64) (*Replica, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if incarnation == 0 {
		return nil, fmt.Errorf("crdt: incarnation must not be 0")
	}
	if mb := ix.Config().MaxBackends; mb > MaxBackendsPerBatch {
		// Full chunks and repairs carry the whole registry, and a peer's
		// decoder takes at most MaxBackendsPerBatch entries in one batch:
		// past it every full transfer and repair would be refused.
		return nil, fmt.Errorf("crdt: the index allows %d backends, more than the %d one message can carry; set MaxBackends to at most %d", mb, MaxBackendsPerBatch, MaxBackendsPerBatch)
	}
	if per := ix.Config().Capacity / cfg.DigestBuckets; per > MaxClaimsPerMessage/4 {
		return nil, fmt.Errorf("crdt: %d claims per digest bucket is too many for one message; raise DigestBuckets", per)
	}
	return &Replica{
		cfg: cfg, id: tree.NodeIDOf(cfg.Name), inc: incarnation, ix: ix,
		clock: tree.NewClock(cfg.MaxSkew.Milliseconds()),
		log:   newDeltaLog(cfg.LogCapacity),
		peers: make(map[string]*peer),
	}, nil
}

// Name is this replica's node name.
func (r *Replica) Name() string { return r.cfg.Name }

// ID is this replica's NodeID.
func (r *Replica) ID() tree.NodeID { return r.id }

// Index is the claim index the replica writes into.
func (r *Replica) Index() *tree.Index { return r.ix }

// Clock is the replica's hybrid logical clock.
func (r *Replica) Clock() *tree.Clock { return &r.clock }

// Stats returns the cumulative counters.
func (r *Replica) Stats() Stats {
	s := r.stats
	s.ClockClamps = r.clock.Clamps()
	return s
}

// Learn records claims for the prefixes of ch on backend b (see
// tree.Index.Learn), stamped by the clock, and queues the ones that changed
// for every peer.
func (r *Replica) Learn(ch *tree.Chain, b tree.BackendID, ttlMillis, now int64) {
	ttlMillis = min(ttlMillis, r.cfg.MaxTTL.Milliseconds())
	ts := r.clock.Now(now)
	r.scratch = r.ix.Learn(ch, b, ts, ttlMillis, r.id, now, r.scratch[:0])
	for _, c := range r.scratch {
		r.log.append(logEntry{claim: c})
	}
	r.stats.LocalChanges += uint64(len(r.scratch))
}

// Invalidate starts a new generation of a backend (restarted cold, or
// removed) and queues the registry change for every peer.
func (r *Replica) Invalidate(backend string, removed bool, now int64) (tree.BackendEntry, error) {
	e, err := r.ix.Invalidate(backend, removed, r.clock.Now(now), r.id)
	if err != nil {
		return e, err
	}
	id, _ := r.ix.BackendByName(backend)
	r.log.append(logEntry{isBackend: true, backend: id})
	r.stats.LocalChanges++
	return e, nil
}

// ForgetRemoved frees the ids of backends removed long enough ago
// (tree.Index.ForgetRemoved) and makes the changes logged for them
// unsendable: a new name may take the id, and a logged claim or registry
// change of the old backend must not go out under it. (Logged claims of
// it have expired by then; the scrub does not rely on it.) It returns the
// ids it freed (valid until the next call): holders of ids outside the
// replica forget them too. Call it now and then, as the periodic sweep.
func (r *Replica) ForgetRemoved(now int64) []tree.BackendID {
	r.freed = r.ix.ForgetRemoved(now, r.freed[:0])
	if len(r.freed) == 0 {
		return nil
	}
	r.log.each(0, func(e *logEntry) bool {
		id := e.claim.Backend
		if e.isBackend {
			id = e.backend
		}
		if slices.Contains(r.freed, id) {
			*e = logEntry{seq: e.seq, source: e.source} // an expired claim: skipped when sent
		}
		return true
	})
	return r.freed
}

// AddPeer starts replicating to a peer. A new peer gets the full state.
func (r *Replica) AddPeer(name string, now int64) {
	if name == r.cfg.Name || r.peers[name] != nil {
		return
	}
	p := &peer{name: name, id: tree.NodeIDOf(name), lastHeard: now}
	r.peers[name] = p
	r.order = append(r.order, p)
	sort.Slice(r.order, func(i, j int) bool { return r.order[i].name < r.order[j].name })
	r.startFull(p)
}

// RemovePeer stops replicating to a peer (it left or failed).
func (r *Replica) RemovePeer(name string) {
	p := r.peers[name]
	if p == nil {
		return
	}
	delete(r.peers, name)
	for i, q := range r.order {
		if q == p {
			r.order = append(r.order[:i], r.order[i+1:]...)
			break
		}
	}
	r.gcLog()
}

// Peers returns the status of every peer, sorted by name.
func (r *Replica) Peers() []PeerStatus {
	out := make([]PeerStatus, 0, len(r.order))
	for _, p := range r.order {
		out = append(out, PeerStatus{Name: p.name, Backlog: r.log.last() - min(p.acked, r.log.last()),
			InFullSync: p.full != nil, Converged: p.converged, LastMatch: p.lastMatch, LastHeard: p.lastHeard})
	}
	return out
}

// startFull begins a full-state transfer to p: every bucket of the index,
// chunk by chunk, acknowledged one by one. Deltas after the transfer's base
// flow alongside it.
func (r *Replica) startFull(p *peer) {
	p.resetSend()
	// The peer lacks our state (it is new, restarted or forgot us, or fell
	// behind the buffer): whatever a digest found before no longer holds,
	// and no digest is exchanged with it until the transfer ends.
	p.converged = false
	base := r.log.last()
	p.acked, p.sent = base, base
	if r.ix.Len() == 0 && len(r.ix.Backends(r.reg[:0])) == 0 {
		return // nothing to transfer
	}
	r.epoch++
	n := r.fullChunks(r.ix.Len())
	p.full = &fullSend{epoch: r.epoch, base: base, acked: make([]bool, n), sentAt: make([]int64, n), left: n}
	r.stats.FullSyncsStarted++
}

// fullChunks is how many chunks a full transfer of a state of n claims is
// cut into: whole groups of digest buckets, enough that a chunk holds about
// MaxBatchClaims/2 claims, so a small state goes in one message and a large
// one in messages of a bounded size.
func (r *Replica) fullChunks(n int) int {
	c := 1
	for c < r.cfg.DigestBuckets && n/c > r.cfg.MaxBatchClaims/2 {
		c *= 2
	}
	return c
}

// gcLog drops the delta-buffer entries every peer has acknowledged.
func (r *Replica) gcLog() {
	upTo := r.log.last()
	for _, p := range r.order {
		upTo = min(upTo, p.acked)
	}
	r.log.gc(upTo)
}

// Applied returns the claims the last Receive found novel (for apply-lag
// metrics). The slice is reused by the next Receive.
func (r *Replica) Applied() []tree.Claim { return r.applied }

// Receive handles one message from a peer at wall time now. Its data is
// joined into the state even when the sender is not (yet) a peer; protocol
// replies are queued for Outgoing.
func (r *Replica) Receive(m *Message, now int64) error {
	r.applied = r.applied[:0]
	p := r.peers[m.From]
	if p == nil {
		r.stats.UnknownSender++
		switch m.Type {
		case MsgDelta, MsgFull, MsgRepair:
			return r.applyBatch(&m.Batch, nil, now)
		}
		return nil
	}
	if m.Incarnation == 0 {
		// No life of a node is numbered 0 (New refuses it), and 0 stands
		// for "not heard from yet": taken as a restart, it would retire
		// the peer's real incarnation.
		return fmt.Errorf("crdt: message from %q without an incarnation", m.From)
	}
	p.lastHeard = now
	if r.staleLife(p, m.Incarnation, now) {
		// A late message of another life of the peer's than the one it
		// lives now (incarnation.go): its claims are claims, but its
		// sequence numbers, acks and transfers are not this life's.
		r.stats.StaleIncarnation++
		switch m.Type {
		case MsgDelta, MsgFull, MsgRepair:
			return r.applyBatch(&m.Batch, p, now)
		}
		return nil
	}
	p.heardLife = now
	if m.AckFor == r.inc {
		// Nothing beyond our last sequence number can have been received:
		// a higher ack (a bug or a lie) would move p.sent past the changes
		// we make next, and they would never be sent to the peer.
		ack := min(m.AckUpTo, r.log.last())
		r.checkAckBack(p, ack, now)
		p.onAck(ack)
		r.gcLog()
	}
	switch m.Type {
	case MsgDelta:
		r.stats.DeltasReceived++
		if err := r.applyBatch(&m.Batch, p, now); err != nil {
			return err
		}
		p.onDelta(m.FromSeq, m.ToSeq)
		p.ackDue = true
	case MsgFull:
		if err := r.applyBatch(&m.Batch, p, now); err != nil {
			return err
		}
		r.onFullChunk(p, m)
	case MsgFullAck:
		// Only an ack addressed to this life counts: one a peer sent to our
		// previous life (or a topology change's previous Replica) names a
		// transfer numbered like ours.
		if f := p.full; f != nil && m.AckFor == r.inc && f.epoch == m.Epoch && int(m.Chunks) == len(f.acked) && !f.acked[m.Chunk] {
			f.acked[m.Chunk] = true
			f.left--
			if f.left == 0 {
				p.full = nil
				r.stats.FullSyncsDone++
			}
		}
	case MsgDigest:
		r.onDigest(p, m, now)
	case MsgRepairRequest:
		if len(m.Buckets) == 0 {
			p.converged, p.lastMatch = true, now
			return nil
		}
		p.converged = false
		if p.repairQueued() {
			r.stats.RepairsIgnored++ // one round of repairs at a time per peer
			return nil
		}
		r.queueRepair(p, m.Buckets, now)
	case MsgRepair:
		return r.applyBatch(&m.Batch, p, now)
	}
	return nil
}

// raiseFloor adopts an eviction floor f that peer p (nil: not a peer) sent
// in a message whose timestamps ran ahead of now by up to ahead ms.
//
// A floor is an expiry on its sender's clock: a node whose clock runs S
// ahead evicts claims that expire S later than an honest node's would, and
// its floor, taken as is, evicts S more of every peer's claims' life (past
// a TTL, all of them, and every new claim is refused: it expires below the
// floor). No bound on the value alone can tell such a floor from an honest
// node's whose index holds S less traffic (a floor can honestly be anywhere
// up to now + MaxTTL), and a bound below that would refuse honest floors,
// which replicas must share to evict the same claims (tree/evict.go). So
// the floor is read on its sender's clock instead: a peer whose timestamps
// run more than 2*MaxSkew ahead (no honest clock, HLC slack included, gets
// there) has its floors lowered by its lead beyond MaxSkew, the same
// translation its claims' times get from the clamp. Honest floors are
// never shifted, so honest eviction stays convergent; the shifted floor is
// what an honest node would have produced and it travels on as one.
//
// The lead is measured on every message: exactly by a digest (its Now is
// the sender's wall clock), from below by a batch (its newest timestamp;
// its claims may be old), so a batch only raises the lead. A floor the
// peer sent while it ran ahead stays shifted by the lead it had then even
// after its clock is set right: floors never go down, so it comes again.
//
// What remains is a floor beyond now + MaxTTL + 4*MaxSkew, which no honest
// node produces (a floor is the expiry of a claim it held): ignored.
func (r *Replica) raiseFloor(p *peer, f, ahead, now int64) {
	lead := r.leadOf(ahead)
	if p != nil {
		lead = max(lead, p.lead)
		switch {
		case f <= p.leadFloor:
			lead = max(lead, p.floorLead)
		case lead > 0:
			p.leadFloor, p.floorLead = f, lead
		}
	}
	if f <= r.ix.Floor() {
		return
	}
	if lead > 0 {
		f -= lead
		r.stats.FloorsShifted++
		if f <= r.ix.Floor() {
			return
		}
	}
	if f > now+r.cfg.MaxTTL.Milliseconds()+4*r.cfg.MaxSkew.Milliseconds() {
		r.stats.FloorsIgnored++
		return
	}
	r.ix.RaiseFloor(f, now)
}

// observeLead records how far ahead of now a peer's clock ran in a message
// (ahead ms); exact is true for a reading of its wall clock (a digest's
// Now), false for a batch's newest timestamp, which can only understate it.
func (r *Replica) observeLead(p *peer, ahead int64, exact bool) {
	if lead := r.leadOf(ahead); exact || lead > p.lead {
		p.lead = lead
	}
}

// leadOf is how far a clock seen ahead ms ahead of ours runs beyond
// MaxSkew, or 0 within 2*MaxSkew: an honest clock (off by less than
// MaxSkew) stamps at most MaxSkew ahead of its own wall clock, by
// observing others' clamped timestamps.
func (r *Replica) leadOf(ahead int64) int64 {
	if skew := r.cfg.MaxSkew.Milliseconds(); ahead > 2*skew {
		return ahead - skew
	}
	return 0
}

// aheadOf is how far t is past now (ms): 0 if it is not, at most 1<<62
// (so a floor less a lead cannot overflow).
func aheadOf(t, now int64) int64 {
	if t <= now {
		return 0
	}
	if d := t - now; d > 0 && d < 1<<62 {
		return d
	}
	return 1 << 62
}

// checkAckBack starts a new full transfer to a peer whose acks stay below
// what it acknowledged before, outside a transfer, for longer than
// reordering explains (4 x RetransmitAfter): it forgot what we sent it
// without restarting (it removed and re-added us, as after a membership
// false positive), so its incarnation did not change, it numbers our
// changes from 0 again and parks every retransmission beyond its gap;
// without this the backlog grows until our delta log overflows.
func (r *Replica) checkAckBack(p *peer, seq uint64, now int64) {
	if seq >= p.acked || p.full != nil {
		p.backSince = 0 // in step, or a transfer runs (acks lag its base)
		return
	}
	if p.backSince == 0 {
		p.backSince = now
		return
	}
	if now-p.backSince >= 4*r.cfg.RetransmitAfter.Milliseconds() {
		p.backSince = 0
		r.stats.AckResets++
		r.startFull(p)
	}
}

func (r *Replica) onFullChunk(p *peer, m *Message) {
	fr := p.fullRecv
	if m.Epoch < p.recvEpoch {
		// A late chunk of a transfer the peer has replaced: starting over
		// for it would drop the progress of the running one, whose chunks
		// already acknowledged are never sent again.
		r.stats.StaleChunks++
		return
	}
	p.recvEpoch = m.Epoch
	if fr == nil || fr.epoch != m.Epoch || len(fr.got) != int(m.Chunks) {
		fr = &fullRecv{epoch: m.Epoch, base: m.BaseSeq, got: make([]bool, m.Chunks), left: int(m.Chunks)}
		p.fullRecv = fr
	}
	if !fr.got[m.Chunk] {
		fr.got[m.Chunk] = true
		fr.left--
		if fr.left == 0 {
			p.onDelta(0, fr.base) // the state up to base is now held
			p.fullRecv = nil
			r.stats.FullSyncsReceived++
		}
	}
	p.control = append(p.control, &Message{Type: MsgFullAck, Epoch: m.Epoch, Chunk: m.Chunk, Chunks: m.Chunks})
}

// applyBatch joins a received batch into the index: registry entries, the
// floor, then the claims. Timestamps too far in the future are clamped.
// With Relay, the novel part is queued for the other peers.
func (r *Replica) applyBatch(b *Batch, p *peer, now int64) error {
	var source tree.NodeID
	if p != nil {
		source = p.id
	}
	newest := int64(-1 << 62) // the batch's newest timestamp (ms), for raiseFloor
	ids := make([]tree.BackendID, len(b.Backends))
	ok := make([]bool, len(b.Backends))
	for i, e := range b.Backends {
		newest = max(newest, e.Time.Millis())
		if ts, clamped := r.clock.Observe(e.Time, now); clamped {
			e.Time = ts
		}
		id, changed, err := r.ix.JoinBackendAt(e, now)
		if errors.Is(err, tree.ErrBackendForgotten) {
			// A late copy of a backend removed hours ago: stale, not
			// refused for room; its claims (if any) are dead too.
			r.stats.BackendsForgotten++
			continue
		}
		if err != nil {
			// Typically a full registry (MaxBackends differs between
			// nodes). Skip this backend's claims but apply the rest, so
			// the batch is acknowledged and replication goes on.
			r.stats.BackendsRejected++
			continue
		}
		ids[i], ok[i] = id, true
		if changed && r.cfg.Relay {
			r.log.append(logEntry{isBackend: true, backend: id, source: source})
		}
	}
	maxTTL := r.cfg.MaxTTL.Milliseconds()
	r.claims = r.claims[:0]
	for _, w := range b.Claims {
		if !ok[w.Backend] {
			continue // its backend could not be registered here
		}
		newest = max(newest, w.Time.Millis())
		c := tree.Claim{Key: w.Key, Backend: ids[w.Backend], Gen: w.Gen, Time: w.Time, Expires: w.Expires, Origin: w.Origin}
		if c.Time.Millis() > now+r.cfg.MaxSkew.Milliseconds() && !c.Ended() {
			// Clamp, keeping the claim's TTL from its (clamped) time: a
			// clock running ahead must not make its claims outlive
			// everyone else's, which eviction (lowest expiries first)
			// would then take before its own, here and at every peer.
			ttl := c.Expires - c.Time.Millis()
			c.Time, _ = r.clock.Observe(c.Time, now)
			c.Expires = c.Time.Millis() + ttl
		} else {
			// A tombstone's time is clamped but its expiry kept (capped
			// below like any): it ends the claim it dominates, which
			// takes an equal expiry (tree/end.go); moved down with the
			// time it would end nothing anywhere but where it was made.
			c.Time, _ = r.clock.Observe(c.Time, now)
		}
		if c.Expires > c.Time.Millis()+maxTTL {
			c.Expires = c.Time.Millis() + maxTTL
			r.stats.ExpiryCaps++
		}
		r.claims = append(r.claims, c)
	}
	if p != nil {
		r.observeLead(p, aheadOf(newest, now), false)
	}
	r.raiseFloor(p, b.Floor, aheadOf(newest, now), now)
	r.stats.ClaimsReceived += uint64(len(r.claims))
	var counts [tree.RejectedInvalid + 1]int
	r.applied, counts = r.ix.UpsertBatch(r.claims, now, r.applied[:0])
	r.stats.ClaimsApplied += uint64(len(r.applied))
	r.stats.ClaimsRejected += uint64(counts[tree.RejectedExpired] + counts[tree.RejectedEvicted] + counts[tree.RejectedStale] + counts[tree.RejectedInvalid])
	if r.cfg.Relay && source != 0 {
		for _, c := range r.applied {
			r.log.append(logEntry{claim: c, source: source})
		}
	}
	return nil
}
