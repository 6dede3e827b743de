package tree

import (
	"cmp"
	"errors"
	"slices"
)

// Forgetting removed backends.
//
// A removed backend's entry stays in the registry so that its removal wins
// over late copies of the entry that still say active. It used to keep its
// id for good, and the registry (MaxBackends names) filled with the names of
// pods a Deployment had rolled away. An id is this node's own (the wire
// names backends), so it can serve a new name once nothing can refer to the
// old one: ForgetRemovedMillis after the removal, every claim of the old
// backend has expired (a claim lives at most the replicas' MaxTTL past its
// timestamp) and a pass sweeps them from the table, so no slot, lookup or
// delta names the id any more. Its name is kept without an id (forgotten),
// with the entry as it was: a late copy the entry dominates is refused
// (ErrBackendForgotten), and a name listed again takes an id with that
// entry, so its next generation follows the old one as it would have.

// ErrBackendForgotten is returned for a registry entry of a forgotten name
// that does not dominate the entry kept for it, and for a removal stamped
// before the horizon that names no registered backend (kept by name, it
// takes no id). Both say the entry is stale: it is not an error of the
// sender, and claims that came with it are of a backend that is gone.
var ErrBackendForgotten = errors.New("tree: backend removed before the forget horizon")

// refuseForgotten reports whether e must be refused because its name was
// forgotten (or, being an old removal of an unknown name, is forgotten now).
func (r *registry) refuseForgotten(e BackendEntry, maxForgotten int) error {
	if _, ok := r.byName[e.Name]; ok {
		return nil
	}
	if f, ok := r.forgotten[e.Name]; ok {
		if !e.dominates(f) {
			return ErrBackendForgotten
		}
		return nil // newer: the name takes an id again
	}
	if e.State == BackendRemoved && e.written() && e.Time < r.forgetBefore {
		r.remember(e, maxForgotten)
		return ErrBackendForgotten
	}
	return nil
}

// forget frees id, whose entry is a removal and whose claims are gone from
// the table, keeping the entry by name.
func (r *registry) forget(id BackendID, maxForgotten int) {
	e := r.entries[id]
	delete(r.byName, e.Name)
	r.entries[id] = BackendEntry{}
	r.live[id].Store(0)
	r.free = append(r.free, id)
	r.remember(e, maxForgotten)
}

// remember keeps a removed entry by name. Past max names the older half
// (by removal time) is dropped at once, so a stream of old removals costs a
// sort per max/2 of them, not a scan each (the sort reads each time once).
// A dropped name listed again starts at generation 0, as a new one; a late
// copy of its old entry takes an id: a removal until the next pass forgets
// it again, an active one for good (it reads as a backend some node still
// lists).
func (r *registry) remember(e BackendEntry, max int) {
	if max <= 0 {
		return
	}
	if _, ok := r.forgotten[e.Name]; !ok && len(r.forgotten) >= max {
		type aged struct {
			name string
			t    Timestamp
		}
		all := make([]aged, 0, len(r.forgotten))
		for n, f := range r.forgotten {
			all = append(all, aged{n, f.Time})
		}
		slices.SortFunc(all, func(a, b aged) int { return cmp.Compare(a.t, b.t) })
		for _, a := range all[:len(all)-max/2] {
			delete(r.forgotten, a.name)
		}
	}
	r.forgotten[e.Name] = e
}

// forgettable reports whether id's entry is a removal made (stamped and
// arrived) before cut (ms) that no holder says is in use.
func (ix *Index) forgettable(id int, cut int64) bool {
	e := &ix.reg.entries[id]
	if e.State != BackendRemoved || !e.written() || max(e.Time.Millis(), ix.reg.removedAt[id]) >= cut {
		return false
	}
	for _, inUse := range ix.inUse {
		if inUse(e.Name) {
			return false
		}
	}
	return true
}

// AddInUse registers f, which says whether a backend name is still used
// by a holder outside the Index (a router listing it or draining its
// requests, a KV-event stream): ForgetRemoved never forgets such a name,
// whatever its registry entry says. f is called with the Index's writers'
// lock held: it must not call the Index, and must be quick.
func (ix *Index) AddInUse(f func(name string) bool) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	ix.inUse = append(ix.inUse, f)
}

// ForgetRemoved frees the ids of backends removed more than
// Config.ForgetRemovedMillis before now (by the later of their removal's
// stamp and its arrival here), unless a holder says the name is in use
// (AddInUse), so new names can take them; and from then it forgets on
// arrival removals of unknown names stamped before the horizon.
// It first sweeps the whole table (every claim of a removed backend is dead),
// so when one is due it costs a walk of the table (~10 ms per million
// claims of capacity), under the writers' lock; otherwise a walk of the
// registry. It appends the ids it freed to freed and returns it (a holder of
// ids outside the Index, such as a delta log, forgets them too). The
// caller runs it now and then (package crdt's Replica.ForgetRemoved, from
// package mesh's periodic sweep).
func (ix *Index) ForgetRemoved(now int64, freed []BackendID) []BackendID {
	after := ix.cfg.ForgetRemovedMillis
	if after <= 0 || now-after <= 0 {
		return freed
	}
	cut := now - after
	ix.mu.Lock()
	defer ix.mu.Unlock()
	ix.reg.forgetBefore = max(ix.reg.forgetBefore, MakeTimestamp(cut, 0))
	due := false
	for i := range ix.reg.entries {
		if ix.forgettable(i, cut) {
			due = true
			break
		}
	}
	if !due {
		return freed
	}
	ix.sweep(now)
	n := len(freed)
	for i := range ix.reg.entries {
		if ix.forgettable(i, cut) {
			ix.reg.forget(BackendID(i), ix.cfg.MaxForgotten)
			freed = append(freed, BackendID(i))
		}
	}
	ix.stats.forgotten.Add(uint64(len(freed) - n))
	return freed
}

// Forgotten returns the entry kept for a forgotten name.
func (ix *Index) Forgotten(name string) (BackendEntry, bool) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	e, ok := ix.reg.forgotten[name]
	return e, ok
}

// AppendForgotten appends the entries kept for forgotten names to dst (in
// no particular order), for snapshots: a node restarted from one still
// refuses late copies and continues a re-listed name's generations.
func (ix *Index) AppendForgotten(dst []BackendEntry) []BackendEntry {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	for _, e := range ix.reg.forgotten {
		dst = append(dst, e)
	}
	return dst
}
