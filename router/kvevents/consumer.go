package kvevents

import (
	"context"
	"math"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/kvmesh/kvmesh/tree"
)

// Sink receives the claim changes events make. The mesh node implements it
// (the changes replicate to every node); a router without a mesh uses its
// local learner. Calls come from one goroutine per engine and must not
// block on the network.
type Sink interface {
	// Learn claims every key of ch at ch.Learn's depths for backend, for ttl.
	Learn(ch *tree.Chain, backend tree.BackendID, ttl time.Duration)
	// End ends the claims of keys for backend (tree.Index.End).
	End(keys []tree.Key, backend tree.BackendID)
	// Invalidate starts a new generation of the backend: none of its claims
	// match any more (an engine cleared its cache, or a gap lost track).
	// When it returns, Deps.Index shows the new generation: a consumer
	// takes any other change of the generation for someone else's
	// invalidation (consumer.currentLocked).
	Invalidate(backend string, removed bool)
}

// Emptier is a Sink that is also told when an engine's cache is known to
// be empty: it cleared it (AllBlocksCleared) or restarted (its sequence
// went back). Invalidate is called too, right after; a sink whose claims
// do not come from the events (eviction links: claims keyed by bytes,
// learned from answers) invalidates the backend here, and not for a gap
// or a new stream, which lose track of the cache without emptying it.
type Emptier interface {
	Emptied(backend string)
}

// Replayer asks an engine to resend messages from seq from on: fn gets each
// (seq, payload) in order until the engine's end marker; fn returning false
// stops early. An error means the replay did not complete.
type Replayer interface {
	Replay(ctx context.Context, from int64, fn func(seq int64, payload []byte) bool) error
}

// Invalidation reasons.
const (
	reasonFirst   = "first"   // a new stream (start or takeover): what happened before is unknown
	reasonGap     = "gap"     // missed messages that replay could not recover
	reasonRestart = "restart" // the publisher's sequence went back
	reasonCleared = "cleared" // AllBlocksCleared
	// reasonMalformed: a payload that did not decode. Its events are
	// unknown (removals among them, whose claims would otherwise be renewed
	// for as long as the stream lasts), as with a gap; a replay would
	// resend the same bytes, so none is asked for.
	reasonMalformed = "malformed"
)

// consumer applies one engine's messages. Its methods are safe for
// concurrent use (the stream's reader and the renewal ticker).
type consumer struct {
	name   string
	id     tree.BackendID
	ix     *tree.Index // where the backend's current generation is read
	cfg    *Config
	sink   Sink
	replay Replayer // nil: none
	listen bool     // read from the Listen socket (no Endpoint)
	now    func() time.Time
	log    zerolog.Logger

	mu     sync.Mutex
	seq    SeqTracker
	mp     *Mapper
	ops    Ops
	batch  Batch
	chain  tree.Chain
	depths []int32
	keys   []tree.Key
	c      counters
	// resynced: resync invalidated the backend and applied nothing since,
	// so the stream's first message need not invalidate it again.
	resynced bool
	// gen is the backend's generation the map's claims were made in: the
	// one this consumer started (invalidating) or found when it last
	// applied events. Any other means someone else invalidated the backend
	// since, and the map's entries are no claims any more (currentLocked).
	gen uint16
	// heard is when the engine's last message arrived (Unix ms, c.now).
	heard int64
	// live counts the live messages taken in order (applied, or found
	// already replayed): a connection that took none did not work
	// (Manager.dialLoop backs off).
	live uint64
	// down: the connection dropped and the stream is kept for a resume
	// (resume.go); nothing is renewed meanwhile. lastHash is the hash of
	// the payload of message hashSeq, the last applied in order.
	down     bool
	lastHash uint64
	hashSeq  int64
}

// counters are a consumer's message-level counts (the Mapper counts blocks).
type counters struct {
	applied, duplicate, malformed, badFrames uint64
	replayed, replayOK, replayFailed         uint64
	renewed                                  uint64
	resumed                                  uint64 // streams that went on after a reconnect (resume.go)
	reannounced                              uint64 // claims announced again after someone else's invalidation
	invalidations                            map[string]uint64
	lastSeq                                  int64
}

func newConsumer(name string, id tree.BackendID, ix *tree.Index, sc StreamConfig, cfg *Config, sink Sink, rp Replayer, now func() time.Time, log zerolog.Logger) *consumer {
	c := &consumer{
		name: name, id: id, ix: ix, cfg: cfg, sink: sink, replay: rp, listen: sc.Endpoint == "", now: now,
		log: log.With().Str("backend", name).Logger(),
		mp:  NewMapper(MapperConfig{BlockTokens: cfg.BlockTokens, MaxBlocks: cfg.MaxBlocksPerEngine, Model: sc.Model}),
		c:   counters{invalidations: map[string]uint64{}, lastSeq: -1},
	}
	c.gen, _ = ix.Generation(id)
	return c
}

// handle applies one multipart message [topic, seq, payload].
func (c *consumer) handle(ctx context.Context, frames [][]byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ctx.Err() != nil {
		return // the stream was handed over (stop) while the message waited
	}
	c.heard = c.now().UnixMilli()
	if len(frames) != 3 {
		c.c.badFrames++
		return
	}
	seq, ok := ParseSeq(frames[1])
	if !ok || seq < 0 {
		c.c.badFrames++
		return
	}
	c.currentLocked() // before the sequence: in listen mode a new generation restarts the stream here
	switch c.seq.Observe(seq) {
	case SeqDuplicate:
		c.c.duplicate++
		c.live++
		c.seq.Delivered(seq)
		return
	case SeqNext:
	case SeqGap:
		from, to := c.seq.Missing(seq)
		if !c.replayLocked(ctx, from, seq) {
			c.log.Info().Int64("from", from).Int64("to", to).Msg("kvevents: missed messages could not be replayed; invalidating the backend")
			c.invalidateLocked(reasonGap)
		}
	case SeqRestart:
		c.log.Info().Int64("seq", seq).Msg("kvevents: the publisher restarted; invalidating the backend")
		c.invalidateLocked(reasonRestart)
		c.startLocked(ctx, seq)
	case SeqFirst:
		if !c.resynced {
			c.invalidateLocked(reasonFirst)
		}
		c.startLocked(ctx, seq)
	}
	c.resynced = false
	c.live++
	c.seq.Delivered(seq)
	if s := c.seq.Observe(seq); s == SeqDuplicate || s == SeqRestart {
		return // the replay delivered this message already
	}
	if !c.applyLocked(frames[2]) {
		c.log.Info().Int64("seq", seq).Msg("kvevents: malformed payload; invalidating the backend")
		c.invalidateLocked(reasonMalformed)
	} else {
		c.notePayloadLocked(seq, frames[2])
	}
	c.seq.Applied(seq) // the stream goes on from the next message
	c.c.lastSeq = seq
}

// resync starts a new connection's stream at once (a takeover in
// particular): what happened before is unknown, so the backend is
// invalidated and rebuilt from the engine's replay buffer now, without
// waiting for the engine's next message. An idle engine may send none for
// long, and what it stored while the stream had no owner (the old owner
// dead, serf not yet sure) would stay unclaimed meanwhile. The replay is
// applied from the first message the engine still holds up to its last,
// stopping at a hole; live messages it covered are then duplicates.
// Without a replay socket the stream's first message does the resync
// (handle, SeqFirst). Either way the map of the stream before is forgotten
// at once: its entries were claimed in a generation the resync (or the
// first message) ends, and none of them may be renewed meanwhile.
func (c *consumer) resync(ctx context.Context) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ctx.Err() != nil {
		return // handed over already: the consumer may serve the next stream
	}
	if c.down && c.resumeLocked(ctx) {
		return
	}
	if ctx.Err() != nil {
		// Handed over (or closing) while the resume's replay waited: the
		// next owner resyncs; invalidating here, after giving the stream
		// away, would drop the claims it has just announced.
		c.stopLocked()
		return
	}
	c.stopLocked()
	if c.replay == nil {
		return
	}
	c.invalidateLocked(reasonFirst)
	c.c.replayed++
	rctx, cancel := context.WithTimeout(ctx, c.cfg.ReplayTimeout)
	defer cancel()
	next := int64(-1)
	err := c.replay.Replay(rctx, 0, func(seq int64, payload []byte) bool {
		switch {
		case next >= 0 && seq < next:
			return true // sent twice
		case next >= 0 && seq > next:
			return false // a hole: stop; the live stream's next message is a gap
		}
		if !c.applyLocked(payload) {
			return false // as a hole: the live stream's next message is a gap that replay cannot repair
		}
		c.seq.Replayed(seq)
		c.notePayloadLocked(seq, payload)
		c.c.lastSeq = seq
		next = seq + 1
		return true
	})
	switch {
	case err == nil:
		c.c.replayOK++
	case ctx.Err() != nil:
		// Cut short by a handover: neither ok nor incomplete; the next
		// owner resyncs.
	default:
		c.c.replayFailed++
		c.log.Debug().Err(err).Int64("reached", next).Msg("kvevents: resync replay incomplete")
	}
	c.resynced = next < 0 // nothing applied: the first live message starts the stream
}

// stop forgets the block map as the stream ends (SetOwned handed it over):
// nothing reports the engine's evictions here any more, so its claims must
// not be renewed from here; they live out their leases unless the next
// stream invalidates them first.
func (c *consumer) stop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stopLocked()
}

// lost is stop for a connection that ended while its stream goes on (ctx,
// the stream's, not cancelled). A cancelled stream was stopped by
// SetOwned, and the consumer may serve the next stream already.
func (c *consumer) lost(ctx context.Context) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ctx.Err() == nil {
		c.suspendLocked() // kept for a resume when it can be (resume.go)
	}
}

func (c *consumer) stopLocked() {
	c.mp.Forget()
	c.seq.Reset()
	c.resynced, c.down = false, false
}

// startLocked begins a stream whose earlier messages are unknown: the
// backend was just invalidated, and a replay from 0 (an engine that has not
// outrun its replay buffer) rebuilds what it holds.
func (c *consumer) startLocked(ctx context.Context, seq int64) {
	c.seq.Reset()
	if seq > 0 && !c.replayLocked(ctx, 0, seq) {
		if _, started := c.seq.Last(); started { // it stopped in the middle: what it applied has a hole
			c.invalidateLocked(reasonGap)
		}
	}
}

// replayLocked replays [from, upTo) (and whatever follows) and reports
// whether every message from `from` up to upTo-1 was applied.
func (c *consumer) replayLocked(ctx context.Context, from, upTo int64) bool {
	if c.replay == nil {
		return false
	}
	c.c.replayed++
	next := from
	ctx, cancel := context.WithTimeout(ctx, c.cfg.ReplayTimeout)
	defer cancel()
	err := c.replay.Replay(ctx, from, func(seq int64, payload []byte) bool {
		if seq < next {
			return true
		}
		if seq > next {
			return false // a hole: the engine's buffer no longer reaches back
		}
		if !c.applyLocked(payload) {
			return false // malformed: its events are unknown, as a hole's
		}
		c.seq.Replayed(seq)
		c.notePayloadLocked(seq, payload)
		next++
		return true
	})
	if next >= upTo {
		c.c.replayOK++
		return true
	}
	c.c.replayFailed++
	c.log.Debug().Err(err).Int64("from", from).Int64("reached", next).Int64("want", upTo).Msg("kvevents: replay incomplete")
	return false
}

// invalidateLocked drops everything known about the backend: its claims
// (a new generation, on every node) and the hash map.
func (c *consumer) invalidateLocked(reason string) {
	c.c.invalidations[reason]++
	c.mp.Forget()
	c.seq.Reset()
	if reason == reasonRestart {
		c.emptiedLocked()
	}
	c.newGenerationLocked()
}

// emptiedLocked tells an Emptier sink that the engine's cache is empty.
func (c *consumer) emptiedLocked() {
	if e, ok := c.sink.(Emptier); ok {
		e.Emptied(c.name)
	}
}

// newGenerationLocked invalidates the backend through the sink and adopts
// the generation that starts.
func (c *consumer) newGenerationLocked() {
	c.sink.Invalidate(c.name, false)
	c.gen, _ = c.ix.Generation(c.id)
}

// currentLocked reports whether the map's entries are claims of the
// backend's current generation, after dealing with a generation someone
// else started (a router that found the backend restarted, or lost it for
// a while; the node an engine's connection moved to, in listen mode):
//
//   - a removed backend: the map is forgotten;
//   - connect mode: this stream still receives every eviction of the
//     engine (a restart would have ended the connection, and the resync
//     forgets), so the map is still the engine's cache: it is announced
//     again, whole, in the new generation (forgetting it left every block
//     chained on a still-cached one unclaimable until the engine evicted
//     the chain's head);
//   - listen mode: the engine may be talking to another node now, which
//     ends nothing of this map; it is forgotten and the stream starts
//     again at its next message here (a new generation, the replay if
//     configured), as a new connection does.
func (c *consumer) currentLocked() bool {
	g, active := c.ix.Generation(c.id)
	if g == c.gen && active {
		return true
	}
	n := c.mp.Len()
	c.gen = g
	if active && !c.listen {
		now := c.now()
		c.keys = c.mp.Due(now.UnixMilli(), math.MaxInt64/2, now.Add(c.cfg.LeaseTTL).UnixMilli(), c.keys[:0])
		c.c.reannounced += uint64(len(c.keys))
		c.learnLocked(c.keys)
		c.log.Info().Int("blocks", n).Uint16("generation", g).
			Msg("kvevents: the backend was invalidated elsewhere; its block map announced again in the new generation")
		return true
	}
	if n > 0 {
		c.log.Info().Int("blocks", n).Uint16("generation", g).Bool("active", active).
			Msg("kvevents: the backend was invalidated elsewhere; forgetting its block map")
	}
	c.stopLocked()
	return false
}

// applyLocked decodes one payload and applies its events in order. It
// reports false for a payload that does not decode: nothing of it was
// applied, and the caller deals with the events lost (reasonMalformed).
func (c *consumer) applyLocked(payload []byte) bool {
	if err := Decode(payload, &c.batch); err != nil {
		c.c.malformed++
		c.log.Debug().Err(err).Msg("kvevents: malformed payload dropped")
		return false
	}
	c.c.applied++
	leaseEnd := c.now().Add(c.cfg.LeaseTTL).UnixMilli()
	for i := range c.batch.Events {
		c.currentLocked()
		c.ops.Reset()
		c.mp.Apply(&c.batch.Events[i], leaseEnd, &c.ops)
		c.flushLocked()
	}
	return true
}

// flushLocked hands one event's changes to the sink: a clear first, then
// ends, then stores (one event never both stores and ends).
func (c *consumer) flushLocked() {
	if c.ops.Clear {
		c.c.invalidations[reasonCleared]++
		c.emptiedLocked()
		c.newGenerationLocked()
	}
	if len(c.ops.End) > 0 {
		c.sink.End(c.ops.End, c.id)
	}
	if len(c.ops.Store) > 0 {
		c.learnLocked(c.ops.Store)
	}
}

// maxLearnKeys bounds one Learn call, so a huge event or a renewal round
// holds the sink's lock briefly at a time.
const maxLearnKeys = 4096

func (c *consumer) learnLocked(keys []tree.Key) {
	for len(keys) > 0 {
		n := min(len(keys), maxLearnKeys)
		for len(c.depths) < n {
			c.depths = append(c.depths, int32(len(c.depths)+1))
		}
		c.chain.Keys, c.chain.Learn = keys[:n], c.depths[:n]
		c.sink.Learn(&c.chain, c.id, c.cfg.LeaseTTL)
		keys = keys[n:]
	}
	c.chain.Keys, c.chain.Learn = nil, nil
}

// renew re-announces the claims whose lease is running out, while they are
// this consumer's to renew:
//
//   - They are claims of the backend's current generation (currentLocked):
//     after someone else's invalidation they are none, and renewing them
//     would claim them anew where nobody ends them.
//   - In listen mode, the engine was heard from within the last LeaseTTL.
//     An engine's connection can end or move to another node without this
//     node knowing (the socket is shared and does not say which engine
//     left; the node it moved to invalidates only at its first message
//     there), and then its evictions go elsewhere or nowhere. An engine that
//     stays idle that long sends nothing either: its claims lapse a lease
//     after their last renewal, as claims learned by routing do, and its
//     next message brings them back at the next renewal (the map is kept:
//     an idle engine evicts nothing, so it is still right if the engine is
//     back on this node).
//
// A connect-mode stream renews only while its connection is up: losing it
// suspends the stream (blind: nothing renewed until it resumes) or forgets
// the map (lost, resume.go), and a resync that does not resume forgets it.
func (c *consumer) renew() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.down || !c.currentLocked() {
		return // blind while the connection is down (resume.go)
	}
	now := c.now()
	if c.listen && now.UnixMilli()-c.heard > c.cfg.LeaseTTL.Milliseconds() {
		return
	}
	c.keys = c.mp.Due(now.UnixMilli(), c.cfg.RenewBefore.Milliseconds(), now.Add(c.cfg.LeaseTTL).UnixMilli(), c.keys[:0])
	c.c.renewed += uint64(len(c.keys))
	c.learnLocked(c.keys)
}

// liveMessages is how many live messages the consumer has taken in order.
func (c *consumer) liveMessages() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.live
}

// snapshot returns the counters and mapper stats.
func (c *consumer) snapshot() (counters, MapperStats, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cc := c.c
	cc.invalidations = make(map[string]uint64, len(c.c.invalidations))
	for k, v := range c.c.invalidations {
		cc.invalidations[k] = v
	}
	return cc, c.mp.Stats, c.mp.Len()
}
