package crdt

// A peer's lives. A node numbers each life (process, or topology switch)
// with an incarnation; its messages carry it, and a new one means the peer
// restarted: it lost our changes and numbers its own from 1 again, so it
// gets the full state. The transport does not order messages, so a late
// message of another life can arrive after the current one's: taken for a
// restart, it would reset what the current life sent, start another full
// transfer and make our acks name a life that has ended, and the current
// life's next message would do it all again, or, for a life never seen
// here (L2 arriving after L3), retire the live one for good.
//
// Incarnations from this release are ordered (OrderedIncarnation: the
// life's start time in the high bits): a lower one than the current life's
// is an earlier life, stale while the current life is heard from
// (staleLifeWindow), and a retired one is stale unless it is higher than
// the current (then the switch to the current was the mistake: a late
// earlier life taken after the current had been silent). Incarnations of
// an earlier release are random: only the retired list tells an earlier
// life there.

// staleLifeWindow is how long after the current life's last message a
// lower incarnation is still taken for an earlier life's late message.
// Past it (the current life has gone silent: a clock stepped back across
// a restart numbers the new life lower) the lower one is taken as the new
// life. A mistaken switch costs a full transfer, and is undone by the
// current life's next message.
const staleLifeWindow = 30_000 // ms

// orderedBits: an OrderedIncarnation is below 1<<orderedBits (a random
// incarnation of an earlier release is, 1 time in 4,096).
const orderedBits = 52

// OrderedIncarnation makes a life's incarnation from its start time
// (Unix ms) and 16 random bits: later lives number higher. prev, the last
// incarnation this process used (0: none), is exceeded in any case.
func OrderedIncarnation(startMs int64, random uint16, prev uint64) uint64 {
	const epoch = 1735689600000 // 2025-01-01 UTC, ms
	ms := uint64(max(startMs-epoch, 0)) & (1<<(orderedBits-16) - 1)
	v := ms<<16 | uint64(random)
	if v <= prev && prev < 1<<orderedBits-1 {
		v = prev + 1
	}
	return max(v, 1)
}

func ordered(inc uint64) bool { return inc != 0 && inc < 1<<orderedBits }

// staleLife reports whether a message of incarnation inc is another life's
// than p's current one, to be joined but not to act on; otherwise inc is
// the current life, or a new one, which it switches to (a restart). now is
// the message's arrival (ms).
func (r *Replica) staleLife(p *peer, inc uint64, now int64) bool {
	if inc == p.inc {
		return false
	}
	both := ordered(inc) && ordered(p.inc)
	switch {
	case p.inc == 0:
	case p.isRetired(inc) && !(both && inc > p.inc):
		return true
	case both && inc < p.inc && now-p.heardLife < staleLifeWindow:
		return true
	default:
		// The peer restarted: it lost our changes and numbers its own
		// from 1 again.
		r.stats.Restarts++
		p.retire(p.inc)
		p.resetReceive()
		// Replies queued for the old life are not for the new one: a
		// full-transfer ack would go out stamped with the new life's
		// incarnation and acknowledge a chunk of its transfer (lives
		// number transfers alike). The new life gets the full state.
		clear(p.control)
		p.control = p.control[:0]
		r.startFull(p)
	}
	p.inc = inc
	return false
}
