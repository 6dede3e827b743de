package tree

// The table starts small and doubles as claims arrive (when half full, or
// when a claim lands far from its home: see maxProbe), up to the size that
// Capacity needs (tableSize). A node that holds 100,000 claims then walks,
// sweeps, digests and pages in a table sized for them rather than one of
// 2,097,152 slots (64 MiB) sized for a full index: on a machine where random
// access to memory is dear (virtual machines with nested paging), the claims
// of a mesh's peers apply several times faster into the smaller table.
//
// Growing copies every live claim into a new table of twice the size and
// publishes it with one atomic store. Lookups take no lock: one that loaded
// the old table reads it to the end, and the old table never changes again
// once the new one is built (the writer holds the Index mutex throughout and
// writes only to the new table), so its stripes validate and it sees the
// claims as of the moment before the swap. The copy drops dead claims, a
// sweep for free. It holds the writers' lock for the whole copy, which is
// linear in the claims held: a few milliseconds at 100,000 claims, about
// 70 ms for the last doubling of a 1,000,000-claim index on a 2-core VM
// (BenchmarkGrowLastDoubling); lookups never wait for it.

// initialSlots is the table size an Index starts with (2 MiB), or the size
// Capacity needs if that is smaller.
const initialSlots = 1 << 16

// maxLoadNum/maxLoadDen is the load (occupied slots / slots) at which the
// table grows: 1/2, the most a full index of the largest table has.
const (
	maxLoadNum = 1
	maxLoadDen = 2
)

// maxProbe is the distance from its home slot past which a new claim
// doubles the table whatever its load. Claims often arrive in key order:
// a full transfer from a peer and a repair come range by range, a snapshot
// in slot order. Then one range of the table fills while the table as a
// whole is far from its load, and without this every insert there would
// walk one ever longer run. At a load of 1/2, linear probing almost never
// goes this far by chance (and if it does, the table only grows sooner).
const maxProbe = 64

// full reports whether one more claim would take the table past its load.
func (ix *Index) full() bool {
	return (ix.count+1)*maxLoadDen > len(ix.t.slots)*maxLoadNum
}

// growForInsert runs before a new claim with key k is stored at slot i
// (the empty slot find returned). It doubles the table if i is more than
// maxProbe slots past k's home. Otherwise, when the table is at its load,
// it first reclaims dead claims and doubles the table if that freed less
// than a quarter of what the table may hold, so that a sweep that frees
// little is not repeated on every insert. It reports whether the table
// changed (the caller's slot index is then stale).
func (ix *Index) growForInsert(i uint64, k Key, now int64) bool {
	if len(ix.t.slots) >= ix.maxSlots {
		return false
	}
	if (i-ix.t.home(k))&ix.t.mask > maxProbe {
		ix.t.done()
		ix.grow(2*len(ix.t.slots), now)
		return true
	}
	if !ix.full() {
		return false
	}
	ix.t.done()
	ix.sweep(now)
	if (ix.count+len(ix.t.slots)/8)*maxLoadDen > len(ix.t.slots)*maxLoadNum {
		ix.grow(2*len(ix.t.slots), now)
	}
	return true
}

// grow moves every live claim into a new table of size slots and
// publishes it to lookups.
func (ix *Index) grow(size int, now int64) {
	old := ix.t
	nt := newTable(size)
	kept := 0
	for i := range old.slots {
		if old.slots[i].key.Load() == 0 {
			continue
		}
		c := old.load(uint64(i))
		if ix.dead(&c, now) {
			continue
		}
		j := nt.home(c.Key)
		for nt.slots[j].key.Load() != 0 {
			j = (j + 1) & nt.mask
		}
		s := &nt.slots[j]
		s.time.Store(uint64(c.Time))
		s.exp.Store(uint64(c.Expires))
		s.meta.Store(packMeta(&c))
		s.key.Store(uint64(c.Key))
		kept++
	}
	ix.stats.swept.Add(uint64(ix.count - kept))
	ix.stats.grown.Add(1)
	ix.count = kept
	ix.cursor = 0
	ix.t = nt
	ix.tab.Store(nt)
}
