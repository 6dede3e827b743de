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
//
// A request that does not stream is silent: vLLM sends its headers and
// body only when the generation is over, so its first byte says nothing
// of when its prefill ended. It teaches no rate and is never the head:
// the head is the oldest unreleased request that is not silent, or a
// decode would pass for an overdue prefill. Nor are its units counted
// ahead of the requests booked behind it (sum): they would stay there
// for its whole generation, and a streamed request of 100 units answered
// in 0.1 s behind one decoding with 10,000 would teach ~100,000 units/s.
// A silent prefill that is still being computed when a request is booked
// goes uncounted instead, and that request teaches a rate somewhat low.
// The pending views (backend.pendingUnits, the mesh's bookings) count
// silent requests until their release as before: the queue's sum is
// what settle teaches the rate with, and nothing else.
type prefillQueue struct {
	mu sync.Mutex
	// q[h:] is the requests not released yet or released behind the
	// oldest unreleased one, oldest first; base is q[h]'s sequence number,
	// next the next booking's. q[lead] is the head: the oldest unreleased
	// entry that is not silent (len(q) when there is none).
	q          []queuedPrefill
	h, lead    int
	base, next uint64
	// sum is the booked units of the unreleased entries that are not
	// silent: the work ahead of the next booking's first byte (book's
	// ahead; silent entries are left out, see above).
	sum    float64
	headAt time.Time // when q[lead] became the head
	// work and waited are decayed sums over first answers of the units
	// booked ahead of each request (its own included) and its wait in
	// seconds.
	work, waited float64
}

type queuedPrefill struct {
	booked, prompt   float64 // units: booked as uncached; the whole prompt
	released, silent bool
	// claims are what it was routed on, and restated what evictions of
	// them added to booked since (restate.go).
	claims   bookedClaims
	restated float64
}

// queueMemory is the weight of one answer in the learned rate: the rate
// follows roughly the last 20 answers.
const queueMemory = 0.05

// book queues a request booked at booked units of a prompt of prompt
// units at now. It returns its sequence number and the units booked ahead
// of its first byte, its own included, silent requests' left out (for
// settle).
func (q *prefillQueue) book(booked, prompt float64, now time.Time) (seq uint64, ahead float64) {
	return q.bookAs(booked, prompt, false, now)
}

// bookAs is book for a request that is silent or not (see prefillQueue).
func (q *prefillQueue) bookAs(booked, prompt float64, silent bool, now time.Time) (seq uint64, ahead float64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.h == len(q.q) { // nothing pending: the queue starts over
		q.q, q.h, q.lead, q.base, q.sum = q.q[:0], 0, 0, q.next, 0
	} else if q.h > 32 && q.h > len(q.q)/2 { // a mostly released front: move the rest down
		n := copy(q.q, q.q[q.h:])
		q.q, q.lead, q.h = q.q[:n], q.lead-q.h, 0
	}
	if q.lead == len(q.q) { // no head ahead of it
		if silent {
			q.lead++
		} else {
			q.headAt = now // this request is the head from now
		}
	}
	seq = q.next
	q.next++
	q.q = append(q.q, queuedPrefill{booked: booked, prompt: prompt, silent: silent})
	if silent {
		return seq, q.sum + booked // it teaches no rate (settle)
	}
	q.sum += booked
	return seq, q.sum
}

// settle releases request seq, booked at at with ahead units ahead of it,
// at now. firstByte says its answer came: only then, and only if it is not
// silent, does its wait teach the rate. It returns what restate added to
// the request's booking, for the caller to take off the pending units too.
func (q *prefillQueue) settle(seq uint64, ahead float64, at, now time.Time, firstByte bool) (restated float64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	i, ok := q.index(seq)
	if !ok || q.q[i].released {
		return 0
	}
	q.q[i].released = true
	restated = q.q[i].restated
	if !q.q[i].silent {
		q.sum -= q.q[i].booked
	}
	if i == q.h {
		for q.h < len(q.q) && q.q[q.h].released {
			q.h++
			q.base++
		}
	}
	if i == q.lead {
		for q.lead < len(q.q) && (q.q[q.lead].released || q.q[q.lead].silent) {
			q.lead++
		}
		q.headAt = now
	}
	if w := now.Sub(at).Seconds(); firstByte && !q.q[i].silent && w > 0 && ahead > 0 {
		q.work = q.work*(1-queueMemory) + ahead + restated
		q.waited = q.waited*(1-queueMemory) + w
	}
	return restated
}

// index is request seq's place in q.q, if it is still held there. Caller
// holds mu.
func (q *prefillQueue) index(seq uint64) (int, bool) {
	if seq < q.base || seq-q.base >= uint64(len(q.q)-q.h) {
		return 0, false
	}
	return q.h + int(seq-q.base), true
}

// head describes the oldest pending request at now: its booked units, its
// prompt's units, and the units the backend has had time to compute for
// it since it reached the front, at the learned rate (0 before the first
// answer). All 0 when nothing is pending.
func (q *prefillQueue) head(now time.Time) (booked, prompt, progress float64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.lead == len(q.q) || q.waited <= 0 {
		return 0, 0, 0
	}
	e := q.q[q.lead]
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
