package kvevents

import (
	"context"
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
	Invalidate(backend string, removed bool)
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
)

// consumer applies one engine's messages. Its methods are safe for
// concurrent use (the stream's reader and the renewal ticker).
type consumer struct {
	name   string
	id     tree.BackendID
	cfg    *Config
	sink   Sink
	replay Replayer // nil: none
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
}

// counters are a consumer's message-level counts (the Mapper counts blocks).
type counters struct {
	applied, duplicate, malformed, badFrames uint64
	replayed, replayOK, replayFailed         uint64
	renewed                                  uint64
	invalidations                            map[string]uint64
	lastSeq                                  int64
}

func newConsumer(name string, id tree.BackendID, sc StreamConfig, cfg *Config, sink Sink, rp Replayer, now func() time.Time, log zerolog.Logger) *consumer {
	return &consumer{
		name: name, id: id, cfg: cfg, sink: sink, replay: rp, now: now,
		log: log.With().Str("backend", name).Logger(),
		mp:  NewMapper(MapperConfig{BlockTokens: cfg.BlockTokens, MaxBlocks: cfg.MaxBlocksPerEngine, Model: sc.Model}),
		c:   counters{invalidations: map[string]uint64{}, lastSeq: -1},
	}
}

// handle applies one multipart message [topic, seq, payload].
func (c *consumer) handle(ctx context.Context, frames [][]byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(frames) != 3 {
		c.c.badFrames++
		return
	}
	seq, ok := ParseSeq(frames[1])
	if !ok || seq < 0 {
		c.c.badFrames++
		return
	}
	switch c.seq.Observe(seq) {
	case SeqDuplicate:
		c.c.duplicate++
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
	if s := c.seq.Observe(seq); s == SeqDuplicate || s == SeqRestart {
		return // the replay delivered this message already
	}
	c.applyLocked(frames[2])
	c.seq.Applied(seq)
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
// (handle, SeqFirst).
func (c *consumer) resync(ctx context.Context) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq.Reset()
	c.resynced = false
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
		c.applyLocked(payload)
		c.seq.Replayed(seq)
		c.c.lastSeq = seq
		next = seq + 1
		return true
	})
	if err != nil && ctx.Err() == nil {
		c.c.replayFailed++
		c.log.Debug().Err(err).Int64("reached", next).Msg("kvevents: resync replay incomplete")
	} else {
		c.c.replayOK++
	}
	c.resynced = next < 0 // nothing applied: the first live message starts the stream
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
		c.applyLocked(payload)
		c.seq.Replayed(seq)
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
	c.sink.Invalidate(c.name, false)
}

// applyLocked decodes one payload and applies its events in order.
func (c *consumer) applyLocked(payload []byte) {
	if err := Decode(payload, &c.batch); err != nil {
		c.c.malformed++
		c.log.Debug().Err(err).Msg("kvevents: malformed payload dropped")
		return
	}
	c.c.applied++
	leaseEnd := c.now().Add(c.cfg.LeaseTTL).UnixMilli()
	for i := range c.batch.Events {
		c.ops.Reset()
		c.mp.Apply(&c.batch.Events[i], leaseEnd, &c.ops)
		c.flushLocked()
	}
}

// flushLocked hands one event's changes to the sink: a clear first, then
// ends, then stores (one event never both stores and ends).
func (c *consumer) flushLocked() {
	if c.ops.Clear {
		c.c.invalidations[reasonCleared]++
		c.sink.Invalidate(c.name, false)
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

// renew re-announces the claims whose lease is running out.
func (c *consumer) renew() {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	c.keys = c.mp.Due(now.UnixMilli(), c.cfg.RenewBefore.Milliseconds(), now.Add(c.cfg.LeaseTTL).UnixMilli(), c.keys[:0])
	c.c.renewed += uint64(len(c.keys))
	c.learnLocked(c.keys)
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
