package tree

import (
	"cmp"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
)

// randomClaims returns n claims on b with random keys, expiring at exp.
func randomClaims(r *rand.Rand, b BackendID, n int, now, exp int64) []Claim {
	cs := make([]Claim, n)
	for i := range cs {
		cs[i] = Claim{Key: Key(r.Uint64() | 1), Backend: b, Time: MakeTimestamp(now, 0), Expires: exp, Origin: 1}
	}
	return cs
}

// oneBackendIndex is an index of the given capacity with one backend, a
// seeded source of claims and the time to write them at.
func oneBackendIndex(tb testing.TB, capacity int, seed1, seed2 uint64) (*Index, BackendID, *rand.Rand, int64) {
	tb.Helper()
	ix := newTestIndex(tb, func(c *Config) { c.Capacity = capacity })
	return ix, backends(tb, ix, "a")[0], rand.New(rand.NewPCG(seed1, seed2)), 1_000_000
}

// upsertInBatches writes claims into ix, size at a time.
func upsertInBatches(ix *Index, claims []Claim, size int, now int64) {
	for i := 0; i < len(claims); i += size {
		ix.UpsertBatch(claims[i:min(i+size, len(claims))], now, nil)
	}
}

// has reports whether the lock-free probe finds key on b.
func has(ix *Index, key Key, b BackendID, now int64) bool {
	var (
		buf   [16]uint64
		times [16]Timestamp
	)
	n, ok := 0, false
	for try := 0; try < maxRetries && !ok; try++ {
		n, ok = ix.probe(ix.tab.Load(), uint64(key), now, ix.floor.Load(), &buf, &times)
	}
	if !ok {
		n = ix.probeLocked(uint64(key), now, ix.floor.Load(), &buf, &times)
	}
	for _, m := range buf[:n] {
		if BackendID(m) == b {
			return true
		}
	}
	return false
}

func TestTableGrowsWithTheClaims(t *testing.T) {
	ix, b, r, now := oneBackendIndex(t, 1_000_000, 1, 2)
	if got := ix.Stats().TableBytes; got != initialSlots*slotBytes {
		t.Fatalf("an empty index takes %d bytes, want %d", got, initialSlots*slotBytes)
	}
	claims := randomClaims(r, b, 100_000, now, now+minute)
	upsertInBatches(ix, claims, 1000, now)
	st := ix.Stats()
	// 100,000 claims at a load of at most 1/2: 262,144 slots, two doublings.
	if st.Claims != 100_000 || st.TableBytes != 262_144*slotBytes || st.Grown != 2 {
		t.Fatalf("after 100,000 claims: %d claims, %d bytes, grown %d times; want 100000, %d, 2",
			st.Claims, st.TableBytes, st.Grown, 262_144*slotBytes)
	}
	for _, c := range claims {
		if !has(ix, c.Key, b, now) {
			t.Fatalf("claim %x lost in the growth", c.Key)
		}
	}
	var n int
	ix.Range(now, func(*Claim) bool { n++; return true })
	if n != len(claims) {
		t.Fatalf("Range saw %d claims, want %d", n, len(claims))
	}
}

// The table never outgrows what Capacity needs: past it, eviction makes
// room, as before.
func TestTableStopsGrowingAtCapacity(t *testing.T) {
	ix, b, r, now := oneBackendIndex(t, 40_000, 3, 4)
	for i := 0; i < 60; i++ {
		ix.UpsertBatch(randomClaims(r, b, 1000, now, now+minute+int64(i)), now, nil)
	}
	st := ix.Stats()
	if st.TableBytes != tableSize(40_000)*slotBytes {
		t.Fatalf("table of %d bytes, want %d", st.TableBytes, tableSize(40_000)*slotBytes)
	}
	if st.Claims > 40_000 || st.Evicted == 0 {
		t.Fatalf("%d claims, %d evicted: eviction should have kept the index at its capacity", st.Claims, st.Evicted)
	}
}

// A table full of dead claims is swept, not doubled: growing is for live
// claims only.
func TestTableSweepsBeforeGrowing(t *testing.T) {
	ix, b, r, now := oneBackendIndex(t, 1_000_000, 5, 6)
	old := randomClaims(r, b, initialSlots/2, now, now+1000)
	ix.UpsertBatch(old, now, nil)
	if st := ix.Stats(); st.Grown != 0 {
		t.Fatalf("grew at %d claims in %d bytes", st.Claims, st.TableBytes)
	}
	later := now + 2000 // every claim so far has expired
	fresh := randomClaims(r, b, 1000, later, later+minute)
	// The first new claim (whose insert finds the table at its load and
	// sweeps it) has the home slot of an old one, so before the sweep its
	// free slot lies past that home.
	fresh[0].Key = old[0].Key ^ 2
	ix.UpsertBatch(fresh, later, nil)
	st := ix.Stats()
	if st.Grown != 0 || st.Claims != 1000 {
		t.Fatalf("with every old claim expired: grown %d times, %d claims; want 0 and 1000", st.Grown, st.Claims)
	}
	// The claim whose insert ran the sweep went where the swept table has
	// room for it, not to the slot found before the sweep.
	for _, c := range fresh {
		if !has(ix, c.Key, b, later) {
			t.Fatalf("claim %x stored after the sweep is not found", c.Key)
		}
	}
}

// A sweep that frees only a little does not spare the doubling: otherwise
// every insert from then on would sweep the whole table again.
func TestTableGrowsWhenTheSweepFreesLittle(t *testing.T) {
	ix, b, r, now := oneBackendIndex(t, 1_000_000, 11, 12)
	// Half the table full, a sixteenth of its slots about to expire.
	ix.UpsertBatch(randomClaims(r, b, initialSlots/16, now, now+1000), now, nil)
	ix.UpsertBatch(randomClaims(r, b, initialSlots/2-initialSlots/16, now, now+minute), now, nil)
	later := now + 2000
	ix.UpsertBatch(randomClaims(r, b, 100, later, later+minute), later, nil)
	if st := ix.Stats(); st.Grown != 1 || st.TableBytes != 2*initialSlots*slotBytes {
		t.Fatalf("after a sweep that freed a sixteenth: grown %d times, %d bytes; want 1 and %d",
			st.Grown, st.TableBytes, 2*initialSlots*slotBytes)
	}
}

// With a capacity of a power of two the largest table is exactly twice the
// capacity, so it reaches its load before the index is full: it must not
// grow past the size the capacity needs.
func TestTableOfAPowerOfTwoCapacityStopsGrowing(t *testing.T) {
	ix, b, r, now := oneBackendIndex(t, 1<<16, 13, 14)
	for i := 0; i < 80; i++ {
		ix.UpsertBatch(randomClaims(r, b, 1000, now, now+minute+int64(i)), now, nil)
	}
	if st := ix.Stats(); st.TableBytes != tableSize(1<<16)*slotBytes || st.Claims > 1<<16 {
		t.Fatalf("table of %d bytes holding %d claims; want %d bytes and at most %d claims",
			st.TableBytes, st.Claims, tableSize(1<<16)*slotBytes, 1<<16)
	}
}

// Lookups take no lock: while the table doubles under them, every claim
// stored before stays visible to every probe (run with -race).
func TestLookupsSeeEveryClaimWhileTheTableGrows(t *testing.T) {
	ix, b, r, now := oneBackendIndex(t, 1_000_000, 7, 8)
	old := randomClaims(r, b, 2000, now, now+minute)
	ix.UpsertBatch(old, now, nil)
	more := randomClaims(r, b, 200_000, now, now+minute)

	var stop atomic.Bool
	var missed atomic.Int64
	var probes atomic.Int64
	var wg sync.WaitGroup
	for g := 0; g < 2; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; !stop.Load(); i++ {
				if !has(ix, old[i%len(old)].Key, b, now) {
					missed.Add(1)
				}
				probes.Add(1)
			}
		}()
	}
	upsertInBatches(ix, more, 500, now)
	stop.Store(true)
	wg.Wait()
	if st := ix.Stats(); st.Grown < 3 {
		t.Fatalf("the table grew %d times, want at least 3 for the test to mean anything", st.Grown)
	}
	if missed.Load() != 0 {
		t.Fatalf("%d of %d probes missed a claim stored before the table grew", missed.Load(), probes.Load())
	}
}

// BenchmarkGrowLastDoubling copies 500,000 claims from a table of 1,048,576
// slots into one of 2,097,152: the last doubling of an index of the default
// capacity (1,000,000 claims), the longest the writers' lock is held for
// growth. Lookups do not wait for it.
func BenchmarkGrowLastDoubling(b *testing.B) {
	ix, id, r, now := oneBackendIndex(b, 1_000_000, 9, 10)
	claims := randomClaims(r, id, 500_000, now, now+minute)
	upsertInBatches(ix, claims, 1000, now)
	ix.mu.Lock()
	defer ix.mu.Unlock()
	full := ix.t
	if len(full.slots) != 1<<20 {
		b.Fatalf("fixture has %d slots, want %d", len(full.slots), 1<<20)
	}
	b.ReportAllocs()
	for b.Loop() {
		ix.t, ix.count = full, len(claims)
		ix.grow(2*len(full.slots), now)
	}
	if ix.count != len(claims) {
		b.Fatalf("kept %d claims of %d", ix.count, len(claims))
	}
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/grow")
}

// longestProbe is the farthest any claim sits from its home slot.
func longestProbe(ix *Index) uint64 {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	var most uint64
	for j := range ix.t.slots {
		if k := ix.t.slots[j].key.Load(); k != 0 {
			most = max(most, (uint64(j)-ix.t.home(Key(k)))&ix.t.mask)
		}
	}
	return most
}

// Claims that arrive in key order (a full transfer from a peer comes range
// by range, a snapshot in slot order) fill one range of the table while the
// table as a whole is far from its load: the table grows on a long probe
// too, or every insert there would walk one ever longer run.
func TestTableGrowsForClaimsInKeyOrder(t *testing.T) {
	ix, b, r, now := oneBackendIndex(t, 1_000_000, 15, 16)
	claims := randomClaims(r, b, 200_000, now, now+minute)
	slices.SortFunc(claims, func(x, y Claim) int { return cmp.Compare(x.Key, y.Key) })
	for i := 0; i < len(claims); i += 4096 {
		ix.UpsertBatch(claims[i:min(i+4096, len(claims))], now, nil)
		// Checked after every batch: growing at the load alone spreads the
		// run again at the next doubling, after each insert walked it.
		if got := longestProbe(ix); got > 4*maxProbe {
			t.Fatalf("after %d claims, one sits %d slots past its home (table of %d bytes)", i+4096, got, ix.Stats().TableBytes)
		}
	}
	for _, c := range claims {
		if !has(ix, c.Key, b, now) {
			t.Fatalf("claim %x not found", c.Key)
		}
	}
}
