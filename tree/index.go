package tree

import (
	"fmt"
	"sync"
	"sync/atomic"
)

// Index is the prefix-claim index: a bounded table of claims (key, backend)
// -> (generation, timestamp, expiry, origin) with lock-free lookups.
//
// Writes (Learn, Upsert, registry changes, eviction) are serialized by an
// internal mutex; Lookup takes no lock. Time is always an argument: now is
// Unix milliseconds, used only to decide what has expired.
//
// The Index holds every claim the node knows, learned here or replicated
// from peers; replicas that have seen the same claims hold identical
// contents (see Claim.Dominates and RaiseFloor for why eviction and expiry
// keep them identical).
type Index struct {
	cfg   Config
	keyer Keyer

	mu sync.Mutex
	// t is the table writers use (under mu); tab publishes the same table
	// to lookups, which take no lock. grow (grow.go) builds a new table
	// aside, then sets both.
	t        *table
	tab      atomic.Pointer[table]
	maxSlots int // the table's size once the Index may hold Capacity claims
	reg      registry
	inUse    []func(name string) bool // AddInUse; guarded by mu
	count    int                      // occupied slots, including dead claims not yet swept
	cursor   uint64                   // incremental sweep position
	hist     []int32
	changed  []Claim // scratch for Learn

	// floor is the eviction watermark in expiry milliseconds: claims expiring
	// at or before it are gone. It only rises, and replicas share it.
	floor atomic.Int64

	stats indexStats
}

// Outcome says what Upsert did with a claim.
type Outcome uint8

const (
	// Inserted: the claim was new.
	Inserted Outcome = iota + 1
	// Replaced: the claim dominated the value held for its (key, backend).
	Replaced
	// Unchanged: the value held already dominates the claim (or equals it).
	Unchanged
	// RejectedExpired: the claim's expiry has passed.
	RejectedExpired
	// RejectedEvicted: the claim expires at or below the eviction floor.
	RejectedEvicted
	// RejectedStale: the claim's backend generation is not the registry's
	// current one, or the backend was removed.
	RejectedStale
	// RejectedInvalid: key 0 or an unknown backend id.
	RejectedInvalid
)

// Changed reports whether the outcome modified the Index.
func (o Outcome) Changed() bool { return o == Inserted || o == Replaced }

func (o Outcome) String() string {
	switch o {
	case Inserted:
		return "inserted"
	case Replaced:
		return "replaced"
	case Unchanged:
		return "unchanged"
	case RejectedExpired:
		return "expired"
	case RejectedEvicted:
		return "evicted"
	case RejectedStale:
		return "stale"
	case RejectedInvalid:
		return "invalid"
	}
	return fmt.Sprintf("Outcome(%d)", uint8(o))
}

// New returns an empty Index. Its table (32 bytes per slot, at most half
// the slots occupied) starts at 65,536 slots and doubles as claims arrive,
// up to two slots per claim of capacity rounded up to a power of two
// (grow.go).
func New(cfg Config) (*Index, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	maxSlots := tableSize(cfg.Capacity)
	ix := &Index{
		cfg:      cfg,
		keyer:    NewKeyer(cfg),
		t:        newTable(min(initialSlots, maxSlots)),
		maxSlots: maxSlots,
		reg:      newRegistry(cfg.MaxBackends),
		hist:     make([]int32, histBuckets),
	}
	ix.tab.Store(ix.t)
	ix.floor.Store(-1 << 62)
	return ix, nil
}

// Config returns the configuration the Index was built with.
func (ix *Index) Config() Config { return ix.cfg }

// Keyer returns the Keyer that matches this Index's configuration.
func (ix *Index) Keyer() Keyer { return ix.keyer }

// Len is the number of occupied slots, including expired or invalidated
// claims that the sweep has not reclaimed yet.
func (ix *Index) Len() int {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	return ix.count
}

// Floor is the eviction watermark: claims expiring at or before it are gone.
func (ix *Index) Floor() int64 { return ix.floor.Load() }

// ---- backends ----

// EnsureBackend returns the id of a backend, registering it (generation 0,
// active) the first time it is named.
func (ix *Index) EnsureBackend(name string) (BackendID, error) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	return ix.reg.ensure(name)
}

// BackendByName returns the id of a registered backend.
func (ix *Index) BackendByName(name string) (BackendID, bool) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	id, ok := ix.reg.byName[name]
	return id, ok
}

// Backend returns the registry entry of id.
func (ix *Index) Backend(id BackendID) (BackendEntry, bool) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if int(id) >= len(ix.reg.entries) {
		return BackendEntry{}, false
	}
	return ix.reg.entries[id], true
}

// Backends appends every registry entry to dst, in id order. A free id (its
// name forgotten, not given out again yet) has a zero entry: Name "" and
// State 0.
func (ix *Index) Backends(dst []BackendEntry) []BackendEntry {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	return append(dst, ix.reg.entries...)
}

// JoinBackend merges a registry entry learned from a peer (or made locally).
// It reports the backend's id and whether the registry changed. A new
// generation or a removal invalidates the backend's older claims at once;
// the sweep reclaims their slots later.
func (ix *Index) JoinBackend(e BackendEntry) (BackendID, bool, error) {
	return ix.JoinBackendAt(e, 0)
}

// JoinBackendAt is JoinBackend for an entry arriving at now (ms): a
// removal is forgotten ForgetRemovedMillis after the later of its stamp
// and its arrival, so one that arrives late (a healed partition, a peer's
// lagging clock) is not forgotten at once.
func (ix *Index) JoinBackendAt(e BackendEntry, now int64) (BackendID, bool, error) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	return ix.reg.join(e, now, ix.cfg.MaxForgotten)
}

// Invalidate starts a new generation of a backend (restarted with a cold
// cache, or removed when removed is true) in O(1): none of its existing
// claims match any more. It returns the new registry entry, for
// replication.
func (ix *Index) Invalidate(name string, removed bool, ts Timestamp, origin NodeID) (BackendEntry, error) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	id, err := ix.reg.ensure(name)
	if err != nil {
		return BackendEntry{}, err
	}
	e := ix.reg.entries[id]
	e.Gen++
	e.State = BackendActive
	if removed {
		e.State = BackendRemoved
	}
	e.Time, e.Origin = ts, origin
	if _, _, err := ix.reg.join(e, ts.Millis(), ix.cfg.MaxForgotten); err != nil {
		return BackendEntry{}, err
	}
	return ix.reg.entries[id], nil
}

// Generation returns a backend's current generation and whether it is
// active, without locking.
func (ix *Index) Generation(id BackendID) (uint16, bool) {
	if int(id) >= len(ix.reg.live) {
		return 0, false
	}
	v := ix.reg.live[id].Load()
	return uint16(v), BackendState(v>>16) == BackendActive
}
