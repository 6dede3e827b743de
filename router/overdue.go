package router

import (
	"sync"
	"time"
)

// prefillQueue follows this router's pending requests at one backend, in
// the order it sent them, to notice a request whose prefill is taking far
// longer than what was booked for it (KVMeshConfig.OverdueFactor).
//
// A dispatch books the prompt less what the backend is believed to hold
// (backend.addPending), and that booking is what the next requests see
// queued there until the first answer byte. When the belief was wrong (the
// backend had evicted the prefix), the engine computes the whole prompt
// while the router counts a sliver of it, and keeps sending requests into
// a queue that is seconds longer than it looks: on the Mooncake trace at 2x
// the requests that arrived behind such a route waited 1.5 s on average.
// The oracle arm, which knows what the engines hold, has no such requests;
// they were most of its TTFT p90 lead.
//
// An engine works through its queue from the front (vLLM admits in arrival
// order and prefills in chunks as far as each step's token budget goes), so
// the oldest pending request, the head, is the one being computed. The
// queue learns the rate at which this router's requests are computed from
// their first bytes (the units booked ahead of a request, its own
// included, over its wait: decayed sums of both), and reports how long
// the head has been at the front and what it was booked at. The policy
// decides when that is overdue.
type prefillQueue struct {
	mu sync.Mutex
	// q[h:] is the requests not released yet or released behind the head,
	// oldest first; base is q[h]'s sequence number, next the next
	// booking's.
	q          []queuedPrefill
	h          int
	base, next uint64
	sum        float64   // booked units of the unreleased entries
	headAt     time.Time // when q[h] became the head
	// work and waited are decayed sums over first answers of the units
	// booked ahead of each request (its own included) and its wait in
	// seconds.
	work, waited float64
}

type queuedPrefill struct {
	booked, prompt float64 // units: booked as uncached; the whole prompt
	released       bool
}

// queueMemory is the weight of one answer in the learned rate: the rate
// follows roughly the last 20 answers.
const queueMemory = 0.05

// book queues a request booked at booked units of a prompt of prompt
// units at now. It returns its sequence number and the units booked ahead
// of its first byte, its own included (for settle).
func (q *prefillQueue) book(booked, prompt float64, now time.Time) (seq uint64, ahead float64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.h == len(q.q) { // nothing pending: the queue starts over, and this request is its head
		q.q, q.h, q.base, q.sum, q.headAt = q.q[:0], 0, q.next, 0, now
	} else if q.h > 32 && q.h > len(q.q)/2 { // a mostly released front: move the rest down
		n := copy(q.q, q.q[q.h:])
		q.q, q.h = q.q[:n], 0
	}
	seq = q.next
	q.next++
	q.q = append(q.q, queuedPrefill{booked: booked, prompt: prompt})
	q.sum += booked
	return seq, q.sum
}

// settle releases request seq, booked at at with ahead units ahead of it,
// at now. firstByte says its answer came: only then does its wait teach
// the rate.
func (q *prefillQueue) settle(seq uint64, ahead float64, at, now time.Time, firstByte bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if seq < q.base || seq-q.base >= uint64(len(q.q)-q.h) {
		return
	}
	i := q.h + int(seq-q.base)
	if q.q[i].released {
		return
	}
	q.q[i].released = true
	q.sum -= q.q[i].booked
	if i == q.h {
		for q.h < len(q.q) && q.q[q.h].released {
			q.h++
			q.base++
		}
		q.headAt = now
	}
	if w := now.Sub(at).Seconds(); firstByte && w > 0 && ahead > 0 {
		q.work = q.work*(1-queueMemory) + ahead
		q.waited = q.waited*(1-queueMemory) + w
	}
}

// head describes the oldest pending request at now: its booked units, its
// prompt's units, and the units the backend has had time to compute for
// it since it reached the front, at the learned rate (0 before the first
// answer). All 0 when nothing is pending.
func (q *prefillQueue) head(now time.Time) (booked, prompt, progress float64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.h == len(q.q) || q.waited <= 0 {
		return 0, 0, 0
	}
	e := q.q[q.h]
	if dt := now.Sub(q.headAt).Seconds(); dt > 0 {
		progress = q.rateLocked() * dt
	}
	return e.booked, e.prompt, progress
}

// rate is the learned rate in units per second (0: no answer yet).
func (q *prefillQueue) rate() float64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.rateLocked()
}

// rateLocked is the learned rate in units per second (0: no answer yet).
// Caller holds mu.
func (q *prefillQueue) rateLocked() float64 {
	if q.waited <= 0 {
		return 0
	}
	return q.work / q.waited
}
