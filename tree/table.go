package tree

import (
	"math/bits"
	"sync/atomic"
	"unsafe"
)

// table is an open-addressed hash table of claims with linear probing and
// backward-shift deletion (no tombstones). A claim's home slot is the top
// bits of its key, so slot order follows key order and a key range is a
// contiguous run of slots.
//
// Concurrency: one writer at a time (the Index's mutex) and any number of
// lock-free readers. Slots are grouped in stripes of stripeSlots; each stripe
// has a sequence counter that a writer makes odd before touching any slot of
// the stripe and even again when its whole operation is done. A reader notes
// the counters of the stripes it reads and retries if any changed or was odd
// (a seqlock per stripe). Every field is read and written atomically, so the
// race detector sees no data race and a torn read is always detected.
type table struct {
	slots   []slot
	mask    uint64
	shift   uint
	stripes []atomic.Uint64
	// open lists the stripes the current write operation made odd.
	open []uint64
}

// slot is 32 bytes: key, timestamp, expiry, and packed origin | gen | backend.
type slot struct {
	key  atomic.Uint64 // 0 = empty
	time atomic.Uint64
	exp  atomic.Uint64
	meta atomic.Uint64 // origin<<32 | gen<<16 | backend
}

// slotBytes is the size of a slot.
const slotBytes = int(unsafe.Sizeof(slot{}))

const stripeShift = 6 // 64 slots (2 KiB) per stripe

func newTable(size int) *table {
	return &table{
		slots:   make([]slot, size),
		mask:    uint64(size - 1),
		shift:   uint(64 - bits.TrailingZeros64(uint64(size))),
		stripes: make([]atomic.Uint64, (size+(1<<stripeShift)-1)>>stripeShift),
	}
}

func (t *table) home(k Key) uint64 { return uint64(k) >> t.shift }

func packMeta(c *Claim) uint64 {
	return uint64(c.Origin)<<32 | uint64(c.Gen)<<16 | uint64(c.Backend)
}

// load reads slot i as a Claim. Readers must validate the stripe afterwards.
func (t *table) load(i uint64) Claim {
	s := &t.slots[i]
	m := s.meta.Load()
	return Claim{
		Key:     Key(s.key.Load()),
		Time:    Timestamp(s.time.Load()),
		Expires: int64(s.exp.Load()),
		Origin:  NodeID(m >> 32),
		Gen:     uint16(m >> 16),
		Backend: BackendID(m),
	}
}

// --- writer side (caller holds the Index mutex) ---

// touch makes slot i's stripe odd for the rest of the current operation.
func (t *table) touch(i uint64) {
	st := i >> stripeShift
	for _, o := range t.open {
		if o == st {
			return
		}
	}
	t.stripes[st].Add(1)
	t.open = append(t.open, st)
}

// done ends the current write operation: every touched stripe becomes even.
func (t *table) done() {
	for _, st := range t.open {
		t.stripes[st].Add(1)
	}
	t.open = t.open[:0]
}

// store writes c into slot i. The key is written last so that a reader never
// sees a key with another claim's fields once the stripe validates.
func (t *table) store(i uint64, c *Claim) {
	t.touch(i)
	s := &t.slots[i]
	s.time.Store(uint64(c.Time))
	s.exp.Store(uint64(c.Expires))
	s.meta.Store(packMeta(c))
	s.key.Store(uint64(c.Key))
}

func (t *table) move(dst, src uint64) {
	t.touch(dst)
	d, s := &t.slots[dst], &t.slots[src]
	d.time.Store(s.time.Load())
	d.exp.Store(s.exp.Load())
	d.meta.Store(s.meta.Load())
	d.key.Store(s.key.Load())
}

// find returns the slot of (k, b), or the empty slot where it would go.
func (t *table) find(k Key, b BackendID) (uint64, bool) {
	i := t.home(k)
	for {
		s := &t.slots[i]
		sk := s.key.Load()
		if sk == 0 {
			return i, false
		}
		if sk == uint64(k) && BackendID(s.meta.Load()) == b {
			return i, true
		}
		i = (i + 1) & t.mask
	}
}

// remove empties slot i and shifts later members of the probe run back, so
// no tombstone is needed (Knuth's algorithm R).
func (t *table) remove(i uint64) {
	t.touch(i)
	j := i
	for {
		j = (j + 1) & t.mask
		sk := t.slots[j].key.Load()
		if sk == 0 {
			break
		}
		h := t.home(Key(sk))
		// The entry at j may move to i only if its home is not cyclically in (i, j].
		if (i <= j && (h <= i || h > j)) || (i > j && h <= i && h > j) {
			t.touch(j)
			t.move(i, j)
			i = j
		}
	}
	s := &t.slots[i]
	s.key.Store(0)
	s.meta.Store(0)
	s.exp.Store(0)
	s.time.Store(0)
}

// --- reader side (no lock) ---

// readerStripes remembers the stripes one probe read and their counters.
type readerStripes struct {
	n   int
	st  [4]uint64
	ver [4]uint64
}

// enter records stripe st; it returns false if the stripe is being written
// or the probe spans too many stripes.
func (r *readerStripes) enter(t *table, st uint64) bool {
	if r.n == len(r.st) {
		return false
	}
	v := t.stripes[st].Load()
	if v&1 == 1 {
		return false
	}
	r.st[r.n], r.ver[r.n] = st, v
	r.n++
	return true
}

// valid reports whether no recorded stripe changed since it was entered.
func (r *readerStripes) valid(t *table) bool {
	for i := 0; i < r.n; i++ {
		if t.stripes[r.st[i]].Load() != r.ver[i] {
			return false
		}
	}
	return true
}
