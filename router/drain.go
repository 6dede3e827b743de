package router

import (
	"sync"
	"time"
)

// prefillDrain estimates how much of a backend's pending prefill (the
// uncached units of this router's requests there that have no first answer
// byte yet, backend.pendingUnits) the engine has still to compute.
//
// The pending sum counts a request in full until its first byte, but an
// engine works through its queue from the front (vLLM's scheduler admits
// in arrival order and prefills in chunks as far as each step's token
// budget goes): the oldest request may be nearly computed while the ones
// behind it have not started. Priced by the sum, a backend about to finish
// a long prompt looks as busy as one that has just been sent it.
//
// The model: the oldest pending request (the head) is computed at a rate
// learned from the answers, the others wait. Progress on the head is
// capped at its units and starts again from 0 with the next head when its
// first byte comes, so the estimate is never off by more than one
// request's prefill, however long the queue and however wrong the rate. It
// is 0 when nothing is pending.
//
// The rate is learned from each first byte: the request waited w seconds
// for the units ahead of it when it was booked (the pending sum less the
// head's progress, its own units included) to be computed, so ahead/w is
// the rate it saw; the rate is the ratio of the decayed sums of both. A
// rate too high makes the next requests' ahead too small and their rates
// lower; too low, the opposite: it settles where the model's waits match
// the answers'. The waits include whatever else the engine does meanwhile
// (decoding, the first token, requests from other routers), so it is the
// rate this router's requests get, not the engine's peak. Until a first
// answer there is no rate and the estimate is the whole sum.
type prefillDrain struct {
	mu sync.Mutex
	// q[h:] is this router's pending requests at the backend, oldest
	// first; released ones stay until they reach the front. base is q[h]'s
	// sequence number, next the next booking's.
	q          []drainEntry
	h          int
	base, next uint64
	sum        float64   // units of the unreleased entries
	done       float64   // units of the head computed by at
	at         time.Time // when done was last brought up to date
	// work and waited are decayed sums over first answers of the units
	// ahead of each request when it was booked and of its wait (seconds).
	work, waited float64
}

type drainEntry struct {
	units    float64
	released bool
}

// drainMemory is the weight of one answer in the learned rate: the rate
// follows roughly the last 20 answers, a few seconds of a busy backend's.
const drainMemory = 0.05

// rate is the learned prefill rate in units per second, 0 before any
// answer. Caller holds mu.
func (d *prefillDrain) rate() float64 {
	if d.waited <= 0 {
		return 0
	}
	return d.work / d.waited
}

// doneAt is the head's computed units at now. Caller holds mu.
func (d *prefillDrain) doneAt(now time.Time) float64 {
	if d.h == len(d.q) {
		return 0
	}
	done := d.done
	if dt := now.Sub(d.at).Seconds(); dt > 0 {
		done += d.rate() * dt
	}
	return min(done, d.q[d.h].units)
}

// advance brings done to now. Caller holds mu.
func (d *prefillDrain) advance(now time.Time) {
	d.done = d.doneAt(now)
	if now.After(d.at) {
		d.at = now
	}
}

// book queues units booked at now. It returns the booking's sequence
// number (for settle) and the units ahead of its first token, its own
// included.
func (d *prefillDrain) book(units float64, now time.Time) (seq uint64, ahead float64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.advance(now)
	if d.h == len(d.q) { // nothing pending: start the queue over
		d.q, d.h, d.base, d.done, d.sum = d.q[:0], 0, d.next, 0, 0
	} else if d.h > 32 && d.h > len(d.q)/2 { // mostly released front: move the rest down
		n := copy(d.q, d.q[d.h:])
		d.q, d.h = d.q[:n], 0
	}
	seq = d.next
	d.next++
	d.q = append(d.q, drainEntry{units: units})
	d.sum += units
	return seq, d.sum - d.done
}

// settle releases booking seq, booked at at with ahead units ahead of it,
// at now. firstByte says its answer came: only then does its wait teach
// the rate.
func (d *prefillDrain) settle(seq uint64, ahead float64, at, now time.Time, firstByte bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if seq < d.base || seq-d.base >= uint64(len(d.q)-d.h) {
		return
	}
	i := d.h + int(seq-d.base)
	if d.q[i].released {
		return
	}
	d.advance(now)
	d.q[i].released = true
	d.sum -= d.q[i].units
	if i == d.h {
		d.done = 0 // the next head starts now
		for d.h < len(d.q) && d.q[d.h].released {
			d.h++
			d.base++
		}
	}
	if w := now.Sub(at).Seconds(); firstByte && w > 0 && ahead > 0 {
		d.work = d.work*(1-drainMemory) + ahead
		d.waited = d.waited*(1-drainMemory) + w
	}
}

// remaining is the units still to compute at now and the learned rate (0:
// none yet, and the units are the whole pending sum).
func (d *prefillDrain) remaining(now time.Time) (left, rate float64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return max(d.sum-d.doneAt(now), 0), d.rate()
}
