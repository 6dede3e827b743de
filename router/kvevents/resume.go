package kvevents

import (
	"context"
	"hash/maphash"
)

// Resuming a stream after its connection dropped (connect mode).
//
// A dropped connection to an engine that is still running (a network blip,
// a proxy's idle timeout, the engine's pod network restarting) used to
// forget the stream and invalidate the backend at the next connection: all
// its claims, on every node, for a blip. The consumer now keeps its map and
// sequence while the connection is down (renewing nothing meanwhile: it is
// blind to evictions) and, at the next connection, asks the engine's replay
// socket for its messages from the last one applied. The stream resumes
// only if that message comes back with the same payload (the hash of the
// last applied payload is kept): then the engine is the same process, and
// the messages after it, applied in order, are exactly what was missed. A
// replay that does not reach back to it (the engine's buffer moved on), or
// answers it with other bytes, or nothing at all (an engine restarted with
// fewer messages), or fails, falls back to a full resync: invalidate, then
// replay from 0, as a new stream does. Without a replay socket nothing can
// tell the same process from a restarted one, so a new connection resyncs
// as before.

// payloadSeed hashes payloads for the resume check; one seed per process
// is enough (hashes are compared only within it).
var payloadSeed = maphash.MakeSeed()

// notePayloadLocked records the payload of seq, just applied in order.
func (c *consumer) notePayloadLocked(seq int64, payload []byte) {
	c.lastHash, c.hashSeq = maphash.Bytes(payloadSeed, payload), seq
}

// suspendLocked keeps the stream across a dropped connection, if it can be
// resumed (connect mode, a replay socket, a last applied message whose
// payload is known); otherwise it forgets it, as stop does.
func (c *consumer) suspendLocked() {
	last, started := c.seq.Last()
	if c.listen || c.replay == nil || !started || c.hashSeq != last || c.resynced {
		c.stopLocked()
		return
	}
	c.down = true
}

// resumeLocked tries to go on with a suspended stream at a new connection:
// it reports whether the engine proved to be the same process (it replayed
// the last applied message with the same payload), in which case the
// messages it sent after that one are applied in order, up to the first
// hole (the live stream's next message then reports the gap). On false
// the caller resyncs from scratch; whatever was applied meanwhile is
// invalidated with the rest.
func (c *consumer) resumeLocked(ctx context.Context) bool {
	c.down = false
	last, _ := c.seq.Last()
	c.c.replayed++
	rctx, cancel := context.WithTimeout(ctx, c.cfg.ReplayTimeout)
	defer cancel()
	matched, ok := false, true
	next := last
	err := c.replay.Replay(rctx, last, func(seq int64, payload []byte) bool {
		if !matched {
			if seq != last || maphash.Bytes(payloadSeed, payload) != c.lastHash {
				return false // another stream, or the buffer moved past it
			}
			matched, next = true, last+1
			return true
		}
		switch {
		case seq < next:
			return true // sent twice
		case seq > next:
			return false // a hole: left to the live stream's gap handling
		}
		if !c.applyLocked(payload) {
			ok = false
			return false
		}
		c.seq.Replayed(seq)
		c.notePayloadLocked(seq, payload)
		c.c.lastSeq = seq
		next++
		return true
	})
	if ctx.Err() != nil {
		return false // cut short by a handover: neither ok nor incomplete (resync stops there)
	}
	if !matched || !ok {
		c.c.replayFailed++
		c.log.Info().Err(err).Int64("last", last).Bool("malformed", !ok).
			Msg("kvevents: the engine could not prove it is the stream's process after a reconnect; resyncing")
		return false
	}
	c.c.replayOK++
	c.c.resumed++
	c.log.Info().Int64("last", last).Int64("replayed", next-last-1).Msg("kvevents: the stream resumed after a reconnect, claims kept")
	return true
}
