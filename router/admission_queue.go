package router

import (
	"slices"
	"time"
)

// The admission queues' order: FIFO within a tenant, round-robin across
// tenants, so one tenant's burst waits behind its own requests and not in
// front of everyone else's (admission.go decides who waits; this file only
// orders the waiting).

// waiter is one request in an admission queue. Its fields after ready are
// written under admission.mu before ready is closed.
type waiter struct {
	tenant string
	stage  admStage
	slots  []int  // stageBackend: the backends it can use
	model  string // stageBackend: the request's model ("" any), for rewake
	since  time.Time
	ready  chan struct{}

	done     bool      // granted or refused; no longer queued
	refused  bool      // done without a slot
	reason   admReason // refused: why
	slot     int       // stageBackend, granted: the backend slot reserved for it
	canceled bool      // the client went away while it waited
}

func (w *waiter) wants(slot int) bool { return slot < 0 || slices.Contains(w.slots, slot) }

// tenantQueue is one tenant's waiters, oldest first.
type tenantQueue struct {
	name string
	ws   []*waiter
}

// fairQueue serves waiters in FIFO order within a tenant and round-robin
// across the tenants with waiters.
type fairQueue struct {
	byTenant map[string]*tenantQueue
	ring     []*tenantQueue // tenants with waiters, in the order they are served
	next     int            // ring index served next
	n        int
}

func (q *fairQueue) push(w *waiter) {
	tq := q.byTenant[w.tenant]
	if tq == nil {
		if q.byTenant == nil {
			q.byTenant = make(map[string]*tenantQueue)
		}
		tq = &tenantQueue{name: w.tenant}
		q.byTenant[w.tenant] = tq
		q.ring = append(q.ring, tq)
	}
	// In the order the waiters first queued: a waiter rewoken to decide
	// again (admission.rewake) goes back to its place, not to the back.
	i := len(tq.ws)
	for i > 0 && tq.ws[i-1].since.After(w.since) {
		i--
	}
	tq.ws = slices.Insert(tq.ws, i, w)
	q.n++
}

// count is how many waiters tenant has in q.
func (q *fairQueue) count(tenant string) int {
	if tq := q.byTenant[tenant]; tq != nil {
		return len(tq.ws)
	}
	return 0
}

// remove takes w out of q; it reports whether w was there.
func (q *fairQueue) remove(w *waiter) bool {
	tq := q.byTenant[w.tenant]
	if tq == nil {
		return false
	}
	j := slices.Index(tq.ws, w)
	if j < 0 {
		return false
	}
	q.take(slices.Index(q.ring, tq), j)
	return true
}

// take removes the j-th waiter of the ring's i-th tenant, dropping the
// tenant from the ring when it has no waiter left.
func (q *fairQueue) take(i, j int) *waiter {
	tq := q.ring[i]
	w := tq.ws[j]
	tq.ws = slices.Delete(tq.ws, j, j+1)
	q.n--
	if len(tq.ws) == 0 {
		delete(q.byTenant, tq.name)
		q.ring = slices.Delete(q.ring, i, i+1)
		if q.next > i {
			q.next--
		}
	}
	if q.next >= len(q.ring) {
		q.next = 0
	}
	return w
}

// pop removes and returns the next waiter, in fair order, that can use
// slot (any, when slot < 0), or nil when none can. The tenant served is
// the first, from the ring's cursor on, with such a waiter; the cursor
// then moves past it.
func (q *fairQueue) pop(slot int) *waiter {
	n := len(q.ring)
	for k := 0; k < n; k++ {
		i := (q.next + k) % n
		tq := q.ring[i]
		for j, w := range tq.ws {
			if !w.wants(slot) {
				continue
			}
			if len(tq.ws) > 1 {
				q.next = i + 1 // past the tenant served (take wraps it)
			} else {
				q.next = i // the tenant leaves the ring: its successor moves to i
			}
			return q.take(i, j)
		}
	}
	return nil
}
