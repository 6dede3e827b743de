package router

import (
	"math"
	"slices"
)

// The backends' caps (AdmissionConfig.MaxInFlightPerBackend): which
// candidates have room, each backend's count of slots in use, and handing
// a freed slot (or a change of the backends) to the requests waiting for
// one. The node's cap and the waiting itself are in admission.go.

// filterFull removes from st.cands the backends at their cap, except
// keep (a slot the request holds). When that would leave none, it leaves
// st.cands as it was and returns the slots the request could wait for.
func (a *admission) filterFull(st *reqState, keep int) []int {
	room := 0
	for _, b := range st.backs {
		if b.slot == keep || a.hasRoom(b) {
			room++
		}
	}
	if room == len(st.backs) {
		return nil
	}
	if room == 0 {
		slots := make([]int, len(st.backs))
		for i, b := range st.backs {
			slots[i] = b.slot
		}
		return slots
	}
	n := 0
	for i, b := range st.backs {
		if b.slot == keep || a.hasRoom(b) {
			st.cands[n], st.backs[n] = st.cands[i], b
			n++
		}
	}
	clear(st.backs[n:])
	st.cands, st.backs = st.cands[:n], st.backs[:n]
	return nil
}

// hasRoom reports whether b is below its cap.
func (a *admission) hasRoom(b *backend) bool {
	sc := a.backSlot(b.slot)
	limit := max(1, int64(math.Round(float64(a.perBackend)*b.weight)))
	if sc.limit.Load() != limit {
		sc.limit.Store(limit)
	}
	return sc.used.Load() < limit
}

// backSlot is the count of slot, made when first asked for.
func (a *admission) backSlot(slot int) *slotCount {
	if s := *a.back.Load(); slot < len(s) {
		return s[slot]
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	s := *a.back.Load()
	if slot < len(s) {
		return s[slot]
	}
	grown := make([]*slotCount, max(slot+1, 2*len(s), 8))
	copy(grown, s)
	for i := len(s); i < len(grown); i++ {
		grown[i] = new(slotCount)
	}
	a.back.Store(&grown)
	return grown[slot]
}

// takeBackend takes a slot at b, if it has room.
func (a *admission) takeBackend(b *backend) bool {
	sc := a.backSlot(b.slot)
	return sc.tryTake(sc.limit.Load())
}

// leaveBackend gives back a slot at the backend: to the next waiter in
// fair order that can use it, if any, else to the pool.
func (a *admission) leaveBackend(slot int) {
	if a.perBackend == 0 {
		return
	}
	sc := (*a.back.Load())[slot] // it exists: the slot was taken
	if a.backWaiting.Load() > 0 {
		a.mu.Lock()
		if sc.used.Load() > sc.limit.Load() {
			// The cap was lowered (a weight changed) while the slots were
			// held: this one is not handed on.
			sc.used.Add(-1)
		} else if w := a.backQ.pop(slot); w != nil {
			a.grant(w, slot)
			a.backWaiting.Store(int64(a.backQ.n))
		} else {
			sc.used.Add(-1)
		}
		a.mu.Unlock()
		return
	}
	sc.used.Add(-1)
	if a.backWaiting.Load() > 0 { // see leaveNode
		a.mu.Lock()
		a.grantBackend(slot)
		a.mu.Unlock()
	}
}

// rewake wakes, without a slot, the requests waiting for a backend's cap
// whose model one of bs (the backends now listed) serves with room: the
// set, a weight, a drain or a health state changed, and a waiter's list of
// slots, fixed when it queued, may not name the backend that has room (a
// backend added for its model) or may name one that has left. Each decides
// again among the backends listed now and, if none has room, waits again,
// in its place among its tenant's waiters, for what is left of its
// QueueTimeout. The backends' caps are refreshed from their weights on the
// way (hasRoom).
func (a *admission) rewake(bs []*backend) {
	if a.perBackend == 0 {
		return
	}
	var roomy []*backend
	for _, b := range bs {
		if a.hasRoom(b) && b.inRotation() {
			roomy = append(roomy, b)
		}
	}
	if len(roomy) == 0 || a.backWaiting.Load() == 0 {
		return
	}
	serves := func(model string) bool {
		for _, b := range roomy {
			if model == "" || slices.ContainsFunc(b.models(), func(m modelEntry) bool { return m.ID == model }) {
				return true
			}
		}
		return false
	}
	a.mu.Lock()
	var woken []*waiter
	for _, tq := range a.backQ.ring {
		for _, w := range tq.ws {
			if serves(w.model) {
				woken = append(woken, w)
			}
		}
	}
	for _, w := range woken {
		a.backQ.remove(w)
		a.grant(w, -1)
	}
	a.backWaiting.Store(int64(a.backQ.n))
	a.mu.Unlock()
}

// grantBackend hands free slots of the backend to waiters that can use
// it, in fair order. mu is held.
func (a *admission) grantBackend(slot int) {
	sc := (*a.back.Load())[slot] // it exists: hasRoom made it
	for a.backQ.n > 0 && sc.tryTake(sc.limit.Load()) {
		w := a.backQ.pop(slot)
		if w == nil {
			sc.used.Add(-1)
			break
		}
		a.grant(w, slot)
	}
	a.backWaiting.Store(int64(a.backQ.n))
}

// ---- waiting ----
