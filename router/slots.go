package router

// slotTable gives each backend name the router lists a slot: a small
// index for the per-backend tables kept in slices (admission's counts,
// precise mode's flags, a request's tried backends). A name keeps its slot
// while the router or the Index knows it, so a backend removed and listed
// again finds its tables where it left them. Once both have let the name
// go (the Index forgets a removed backend's name index.forget_removed
// after its removal, 6 hours by default), reclaim frees the slot for a
// new name: without that, a router under a Deployment that rolls its pods
// kept a slot, its table entries and its written count for every pod name
// it ever saw, about 150 bytes each, for the process's life.
// Guarded by Router.setMu.
type slotTable struct {
	byName map[string]int
	free   []int // freed slots, reused last freed first
	next   int   // the lowest slot never given
	// fixed is how many slots are never reused nor released: those of the
	// backends configured at New, which precise mode's tables name by
	// slot, so such a name listed again must find its own slot (a new one
	// would be past the tables: approximate mode, silently). They are as
	// many as the configuration lists, so keeping them costs nothing.
	fixed int
}

func newSlotTable(n int) slotTable { return slotTable{byName: make(map[string]int, n)} }

// take is name's slot, a freed or a new one when it has none; fresh says
// it had none, in which case the caller gives it back (giveBack) if the
// backend cannot be built, or records it (keep).
func (t *slotTable) take(name string) (slot int, fresh bool) {
	if s, ok := t.byName[name]; ok {
		return s, false
	}
	if n := len(t.free); n > 0 {
		slot = t.free[n-1]
		t.free = t.free[:n-1]
		return slot, true
	}
	t.next++
	return t.next - 1, true
}

// keep records name's slot, taken by take.
func (t *slotTable) keep(name string, slot int) { t.byName[name] = slot }

// giveBack returns a slot take gave out fresh and keep never recorded.
func (t *slotTable) giveBack(slot int) { t.free = append(t.free, slot) }

// release forgets name's slot and frees it for another name. A fixed
// slot stays its name's. It reports the slot and whether it was freed.
func (t *slotTable) release(name string) (int, bool) {
	s, ok := t.byName[name]
	if !ok || s < t.fixed {
		return s, false
	}
	delete(t.byName, name)
	t.free = append(t.free, s)
	return s, true
}

// reclaimInterval is how often the router looks for names it and the
// Index have both let go (maintain's ticks of drainPoll): the Index
// forgets them hours after their removal, so a minute late costs nothing.
const reclaimInterval = 600 // x drainPoll (100 ms): a minute

// reclaimSlots frees the slot and the written count of every name that is
// no longer a member and that the Index has forgotten, and whose
// admission count is back to zero (a request still in flight there would
// otherwise leave its slot on the new backend's count). The backends
// configured at New keep theirs (slotTable.fixed). It reports how many it
// freed.
func (rt *Router) reclaimSlots() int {
	rt.setMu.Lock()
	defer rt.setMu.Unlock()
	n := 0
	for name, slot := range rt.slots.byName {
		if slot < rt.slots.fixed {
			continue
		}
		if _, member := rt.members[name]; member {
			continue
		}
		if _, held := rt.names.Load(name); held {
			continue
		}
		if _, known := rt.ix.BackendByName(name); known {
			continue
		}
		if rt.adm != nil && rt.adm.backSlot(slot).used.Load() != 0 {
			continue
		}
		rt.slots.release(name)
		delete(rt.retired, name)
		n++
	}
	if n > 0 {
		rt.log.Debug().Int("names", n).Int("slots_held", len(rt.slots.byName)).Msg("freed the slots of backend names the registry forgot")
	}
	return n
}
