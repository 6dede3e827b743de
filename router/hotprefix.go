package router

import (
	"sync/atomic"
)

// hotCounter estimates how often each prefix key was matched recently, in
// a fixed number of slots (direct-mapped by key; a colliding key takes the
// slot over). Each slot counts its key's hits in the current and previous
// window and estimates a sliding-window rate from the two. It is
// approximate by design: concurrent updates may lose a count, and a slot
// taken over forgets its old key. It never allocates after construction.
type hotCounter struct {
	slots  []hotSlot
	mask   uint64
	window int64 // ns
}

type hotSlot struct {
	key atomic.Uint64
	// state packs the window index (high 32 bits), the previous window's
	// count (16 bits) and the current window's count (low 16 bits).
	state atomic.Uint64
}

func newHotCounter(slots int, window int64) *hotCounter {
	n := 1
	for n < slots {
		n <<= 1
	}
	return &hotCounter{slots: make([]hotSlot, n), mask: uint64(n - 1), window: max(window, 1)}
}

func packHot(epoch uint32, prev, cur uint16) uint64 {
	return uint64(epoch)<<32 | uint64(prev)<<16 | uint64(cur)
}

func unpackHot(s uint64) (epoch uint32, prev, cur uint16) {
	return uint32(s >> 32), uint16(s >> 16), uint16(s)
}

// observe counts one hit of key at now (ns) and returns the estimated hits
// in the last window, this one included.
func (h *hotCounter) observe(key uint64, now int64) float64 {
	s := &h.slots[mix64(key)&h.mask]
	epoch := uint32(now / h.window)
	if s.key.Load() != key {
		s.key.Store(key)
		s.state.Store(packHot(epoch, 0, 1))
		return 1
	}
	for {
		old := s.state.Load()
		e, prev, cur := unpackHot(old)
		switch e {
		case epoch:
		case epoch - 1:
			prev, cur = cur, 0
		default:
			prev, cur = 0, 0
		}
		if cur < 1<<16-1 {
			cur++
		}
		if s.state.CompareAndSwap(old, packHot(epoch, prev, cur)) {
			return h.estimate(now, prev, cur)
		}
	}
}

// count returns the estimated hits of key in the last window without
// counting one.
func (h *hotCounter) count(key uint64, now int64) float64 {
	s := &h.slots[mix64(key)&h.mask]
	if s.key.Load() != key {
		return 0
	}
	e, prev, cur := unpackHot(s.state.Load())
	switch epoch := uint32(now / h.window); e {
	case epoch:
	case epoch - 1:
		prev, cur = cur, 0
	default:
		return 0
	}
	return h.estimate(now, prev, cur)
}

// estimate weighs the previous window by the part of it still inside a
// window-long span ending now.
func (h *hotCounter) estimate(now int64, prev, cur uint16) float64 {
	frac := float64(now%h.window) / float64(h.window)
	return float64(prev)*(1-frac) + float64(cur)
}
