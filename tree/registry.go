package tree

import (
	"errors"
	"fmt"
	"sync/atomic"
)

// BackendState says whether a backend's claims may match.
type BackendState uint8

const (
	// BackendActive is a serving backend: its current-generation claims match.
	BackendActive BackendState = 1
	// BackendRemoved is a backend taken out of the fleet: none of its claims
	// match, and the entry stays so the removal wins over late updates.
	BackendRemoved BackendState = 2
)

func (s BackendState) String() string {
	switch s {
	case BackendActive:
		return "active"
	case BackendRemoved:
		return "removed"
	}
	return fmt.Sprintf("BackendState(%d)", uint8(s))
}

// BackendEntry is one backend's registry record. Replicas join entries by
// the greater (Gen, Time, Origin), the same last-writer-wins rule as claims,
// so "backend B restarted" or "was removed" reaches every node.
type BackendEntry struct {
	Name   string
	Gen    uint16
	State  BackendState
	Time   Timestamp
	Origin NodeID
}

// written says whether the entry was ever written: by Invalidate here or
// on a peer (every such entry carries its writer's clock, never 0). An
// entry nobody wrote is the one a node registers when it first names a
// backend (generation 0, time 0): the registry's bottom.
func (e BackendEntry) written() bool { return e.Time != 0 }

// dominates orders registry entries: a written entry above the bottom,
// then generation, time, origin and state for a total order.
//
// Generations compare in serial arithmetic, which orders only values less
// than half the 16-bit space apart; the bottom is ordered apart for that
// reason. Without it a node that had just named a backend (generation 0)
// refused the mesh's generation once it reached 32,768 (a restart a
// minute for 23 days, or a KV-event stream losing its place every few
// seconds for a day in precise mode), and its own
// generation-0 entry, sent with its first claims, won on every peer and
// took every claim of that backend from the mesh. (Nodes of earlier
// versions still order it by generation: in a mesh that mixes them, past
// 32,768 the two disagree until every node runs this order.)
func (a BackendEntry) dominates(b BackendEntry) bool {
	if a.written() != b.written() {
		return a.written()
	}
	if a.Gen != b.Gen {
		return genAfter(a.Gen, b.Gen)
	}
	if a.Time != b.Time {
		return a.Time > b.Time
	}
	if a.Origin != b.Origin {
		return a.Origin > b.Origin
	}
	return a.State > b.State
}

// MaxBackendNameBytes bounds a backend's name: the replication wire
// (package crdt's MaxNameBytes, equal) refuses a longer one, and a
// registered name it cannot send would make every message naming it, and
// with it every full transfer and repair, fail at every peer.
const MaxBackendNameBytes = 256

// ErrTooManyBackends is returned when the registry is full.
var ErrTooManyBackends = errors.New("tree: backend registry is full (raise MaxBackends, or lower ForgetRemovedMillis so removed backends' ids are reused sooner)")

// registry maps backend names to dense ids and holds each backend's current
// generation and state. Writers hold Index.mu; lookups read live[] without a
// lock.
//
// Ids are this node's own (the wire names backends), so a removed backend's
// id can be given to a new name once nothing can refer to the old one any
// more (forget.go): its slot in entries is then free (State 0) and its id
// waits in free. The name's entry lives on without an id in forgotten, so
// late copies of the old entry are still refused and a name listed again
// goes on from its generation.
type registry struct {
	entries []BackendEntry       // by BackendID; State 0 marks a free id; guarded by Index.mu
	byName  map[string]BackendID // guarded by Index.mu
	// live[id] packs gen (low 16 bits) and state (next 8) for lock-free reads.
	live []atomic.Uint32
	// active counts BackendActive entries; lookups stop early once every
	// active backend has matched.
	active atomic.Int32

	// removedAt[id] is when the entry became a removal here (ms, the later
	// of its stamp and its arrival): a removal that arrives late, or
	// stamped by a lagging clock, still gets the whole horizon here.
	removedAt []int64
	free      []BackendID             // forgotten names' ids, given out again first
	forgotten map[string]BackendEntry // removed names without an id (forget.go)
	// forgetBefore: a removed entry stamped before it that names no
	// registered backend is forgotten on arrival instead of taking an id
	// (0: nothing is, until the first forget pass).
	forgetBefore Timestamp
}

func newRegistry(max int) registry {
	return registry{byName: make(map[string]BackendID), live: make([]atomic.Uint32, max), removedAt: make([]int64, max),
		forgotten: make(map[string]BackendEntry)}
}

func pack(gen uint16, st BackendState) uint32 { return uint32(gen) | uint32(st)<<16 }

// matches reports whether a claim of generation gen for backend id may match.
func (r *registry) matches(id BackendID, gen uint16) bool {
	return r.live[id].Load() == pack(gen, BackendActive)
}

// stale reports whether a claim of generation gen is not of the backend's
// current generation, and so can never match again: the Index stores only
// claims of the current generation (Index.check), so any other is older.
func (r *registry) stale(id BackendID, gen uint16) bool {
	return uint16(r.live[id].Load()) != gen
}

// ensure returns the id of name, registering it (generation 0, active) if
// new. A forgotten name takes an id again with its entry as it was
// (removed): whoever lists it again starts a new generation after it.
func (r *registry) ensure(name string) (BackendID, error) {
	if id, ok := r.byName[name]; ok {
		return id, nil
	}
	if name == "" {
		return 0, errors.New("tree: backend name must not be empty")
	}
	if len(name) > MaxBackendNameBytes {
		return 0, fmt.Errorf("tree: backend name of %d bytes is over the %d-byte limit", len(name), MaxBackendNameBytes)
	}
	e, wasForgotten := r.forgotten[name]
	if !wasForgotten {
		e = BackendEntry{Name: name, State: BackendActive}
	}
	var id BackendID
	switch {
	case len(r.free) > 0:
		id = r.free[len(r.free)-1]
		r.free = r.free[:len(r.free)-1]
		r.entries[id] = e
	case len(r.entries) < len(r.live):
		id = BackendID(len(r.entries))
		r.entries = append(r.entries, e)
	default:
		return 0, ErrTooManyBackends
	}
	delete(r.forgotten, name)
	r.byName[name] = id
	r.live[id].Store(pack(e.Gen, e.State))
	r.removedAt[id] = 0
	if e.State == BackendRemoved {
		r.removedAt[id] = e.Time.Millis() // when it arrived is not kept: its stamp
	}
	if e.State == BackendActive {
		r.active.Add(1)
	}
	return id, nil
}

// join merges e, arriving at now (ms; 0: unknown, its stamp counts), into
// the registry; it reports the id and whether the entry changed.
func (r *registry) join(e BackendEntry, now int64, maxForgotten int) (BackendID, bool, error) {
	if e.State != BackendActive && e.State != BackendRemoved {
		return 0, false, fmt.Errorf("tree: backend %q: invalid state %d", e.Name, e.State)
	}
	if !e.written() && (e.Gen != 0 || e.State != BackendActive) {
		return 0, false, fmt.Errorf("tree: backend %q: generation %d, state %v without a time (only an unwritten entry, generation 0 and active, has none)", e.Name, e.Gen, e.State)
	}
	if err := r.refuseForgotten(e, maxForgotten); err != nil {
		return 0, false, err
	}
	id, err := r.ensure(e.Name)
	if err != nil {
		return 0, false, err
	}
	cur := r.entries[id]
	if !e.dominates(cur) {
		return id, false, nil
	}
	if cur.State == BackendActive {
		r.active.Add(-1)
	}
	if e.State == BackendActive {
		r.active.Add(1)
	}
	r.entries[id] = e
	r.live[id].Store(pack(e.Gen, e.State))
	if e.State == BackendRemoved {
		r.removedAt[id] = max(e.Time.Millis(), now)
	}
	return id, true, nil
}
