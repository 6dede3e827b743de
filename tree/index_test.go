package tree

import (
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
)

const minute = int64(60_000)

func newTestIndex(t testing.TB, mod func(*Config)) *Index {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Capacity = 1 << 12
	if mod != nil {
		mod(&cfg)
	}
	ix, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return ix
}

func backends(t testing.TB, ix *Index, names ...string) []BackendID {
	t.Helper()
	ids := make([]BackendID, len(names))
	for i, n := range names {
		id, err := ix.EnsureBackend(n)
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = id
	}
	return ids
}

// prompt returns token chains: a shared prefix of sharedBlocks blocks then a
// unique tail, with message ends at the given token offsets.
func chainOf(ix *Index, toks []uint32, ends ...int) *Chain {
	var c Chain
	ix.Keyer().Tokens(&c, NewSeed("m", "", ""), toks, ends)
	return &c
}

func TestLearnThenLookupFindsDeepestPerBackend(t *testing.T) {
	ix := newTestIndex(t, nil)
	b := backends(t, ix, "a", "b", "c")
	r := rand.New(rand.NewPCG(1, 1))
	sys := randTokens(r, 16*10)                                // 10-block system prompt
	conv1 := append(slices.Clone(sys), randTokens(r, 16*5)...) // + 5 blocks
	conv2 := append(slices.Clone(sys), randTokens(r, 16*8)...) // + 8 other blocks
	now := int64(1_000_000)
	ts := MakeTimestamp(now, 0)
	ix.Learn(chainOf(ix, conv1, 160, len(conv1)), b[0], ts, minute, 1, now, nil)
	ix.Learn(chainOf(ix, conv2, 160, len(conv2)), b[1], ts, minute, 1, now, nil)

	// A follow-up of conversation 1 matches a fully (15 blocks), b at the
	// shared system prompt (10 blocks), and c not at all.
	follow := append(slices.Clone(conv1), randTokens(r, 16*3)...)
	var res Result
	ix.Lookup(chainOf(ix, follow), now, &res)
	if res.Deepest != 15 || res.Depth(b[0]) != 15 || res.Depth(b[1]) != 10 || res.Depth(b[2]) != 0 {
		t.Fatalf("got %+v", res.Matches)
	}
	if res.Matches[0].Backend != b[0] {
		t.Fatalf("matches not deepest first: %+v", res.Matches)
	}
	// A prompt with a different seed (another tenant) matches nothing.
	var other Chain
	ix.Keyer().Tokens(&other, NewSeed("m", "tenant2", ""), follow, nil)
	ix.Lookup(&other, now, &res)
	if len(res.Matches) != 0 {
		t.Fatalf("another tenant matched: %+v", res.Matches)
	}
}

func TestSeveralHoldersOfOnePrefix(t *testing.T) {
	ix := newTestIndex(t, nil)
	b := backends(t, ix, "a", "b", "c")
	toks := randTokens(rand.New(rand.NewPCG(2, 2)), 16*4)
	ch := chainOf(ix, toks)
	for _, id := range b[:2] {
		ix.Learn(ch, id, MakeTimestamp(10, 0), minute, 1, 10, nil)
	}
	var res Result
	ix.Lookup(ch, 10, &res)
	if len(res.Matches) != 2 || res.Depth(b[0]) != 4 || res.Depth(b[1]) != 4 {
		t.Fatalf("holders %+v", res.Matches)
	}
}

func TestExpiryIsAbsolute(t *testing.T) {
	ix := newTestIndex(t, nil)
	b := backends(t, ix, "a")
	ch := chainOf(ix, randTokens(rand.New(rand.NewPCG(3, 3)), 16*4))
	ix.Learn(ch, b[0], MakeTimestamp(1000, 0), 500, 1, 1000, nil)
	var res Result
	ix.Lookup(ch, 1499, &res)
	if res.Deepest != 4 {
		t.Fatalf("claim missing before expiry: %+v", res)
	}
	ix.Lookup(ch, 1500, &res)
	if res.Deepest != 0 {
		t.Fatal("claim matched at its expiry")
	}
	// An expired claim arriving later (a late delta) is rejected.
	c := Claim{Key: ch.Keys[0], Backend: b[0], Time: MakeTimestamp(1000, 1), Expires: 1500, Origin: 2}
	if o := ix.Upsert(c, 1600); o != RejectedExpired {
		t.Fatalf("late expired claim: %v", o)
	}
	if n := ix.Sweep(1600); n != 1 { // the learned claim (one learn depth)
		t.Fatalf("swept %d", n)
	}
	if ix.Len() != 0 {
		t.Fatalf("len %d after sweep", ix.Len())
	}
}

func TestRefreshIsCoalesced(t *testing.T) {
	ix := newTestIndex(t, func(c *Config) { c.RefreshMaxMillis = 0 }) // RefreshFraction 0.25, no cap
	b := backends(t, ix, "a")
	ch := chainOf(ix, randTokens(rand.New(rand.NewPCG(4, 4)), 16*4))
	ttl := int64(100_000)
	if got := ix.Learn(ch, b[0], MakeTimestamp(0, 0), ttl, 1, 0, nil); len(got) != 1 {
		t.Fatalf("first learn changed %d", len(got))
	}
	// Re-learning within a quarter TTL changes nothing and emits nothing.
	if got := ix.Learn(ch, b[0], MakeTimestamp(20_000, 0), ttl, 1, 20_000, nil); len(got) != 0 {
		t.Fatalf("refresh within 1/4 TTL emitted %d", len(got))
	}
	// Beyond a quarter TTL the refresh replaces the claim and is emitted.
	got := ix.Learn(ch, b[0], MakeTimestamp(30_000, 0), ttl, 2, 30_000, nil)
	if len(got) != 1 || got[0].Expires != 130_000 || got[0].Origin != 2 {
		t.Fatalf("refresh after 1/4 TTL: %+v", got)
	}
	// A short (provisional) learn never shortens a longer claim.
	if got := ix.Learn(ch, b[0], MakeTimestamp(31_000, 0), 5_000, 1, 31_000, nil); len(got) != 0 {
		t.Fatalf("provisional learn over a confirmed claim emitted %+v", got)
	}
	if ix.Len() != 1 {
		t.Fatalf("refresh duplicated the claim: len %d", ix.Len())
	}
}

func TestInvalidateBackend(t *testing.T) {
	ix := newTestIndex(t, nil)
	b := backends(t, ix, "a", "b")
	ch := chainOf(ix, randTokens(rand.New(rand.NewPCG(5, 5)), 16*8), 64)
	for _, id := range b {
		ix.Learn(ch, id, MakeTimestamp(1, 0), minute, 1, 1, nil)
	}
	e, err := ix.Invalidate("a", false, MakeTimestamp(2, 0), 1)
	if err != nil || e.Gen != 1 || e.State != BackendActive {
		t.Fatalf("invalidate: %+v %v", e, err)
	}
	var res Result
	ix.Lookup(ch, 2, &res)
	if res.Depth(b[0]) != 0 || res.Depth(b[1]) != 8 {
		t.Fatalf("after invalidation: %+v", res.Matches)
	}
	// A replayed claim of the old generation is rejected...
	old := Claim{Key: ch.Keys[7], Backend: b[0], Gen: 0, Time: MakeTimestamp(3, 0), Expires: minute, Origin: 3}
	if o := ix.Upsert(old, 3); o != RejectedStale {
		t.Fatalf("old-generation claim: %v", o)
	}
	// ...and claims learned after the restart match again.
	ix.Learn(ch, b[0], MakeTimestamp(4, 0), minute, 1, 4, nil)
	ix.Lookup(ch, 4, &res)
	if res.Depth(b[0]) != 8 {
		t.Fatalf("relearned after restart: %+v", res.Matches)
	}
	// Removal: nothing matches and new learns are ignored.
	if _, err := ix.Invalidate("b", true, MakeTimestamp(5, 0), 1); err != nil {
		t.Fatal(err)
	}
	ix.Learn(ch, b[1], MakeTimestamp(6, 0), minute, 1, 6, nil)
	ix.Lookup(ch, 6, &res)
	if res.Depth(b[1]) != 0 {
		t.Fatalf("removed backend matched: %+v", res.Matches)
	}
	// The sweep reclaims the old generation's and the removed backend's slots.
	ix.Sweep(6)
	if n := ix.Len(); n != 2 {
		t.Fatalf("len %d after sweep, want 2 (a's new-generation claims)", n)
	}
}

func TestRegistryJoinIsLastWriterWins(t *testing.T) {
	ix := newTestIndex(t, nil)
	e1 := BackendEntry{Name: "x", Gen: 3, State: BackendActive, Time: 10, Origin: 1}
	e0 := BackendEntry{Name: "x", Gen: 2, State: BackendRemoved, Time: 99, Origin: 9}
	if _, ch, _ := ix.JoinBackend(e1); !ch {
		t.Fatal("first join did not change")
	}
	if _, ch, _ := ix.JoinBackend(e0); ch {
		t.Fatal("older generation won")
	}
	if _, ch, _ := ix.JoinBackend(e1); ch {
		t.Fatal("duplicate changed the registry")
	}
	id, _ := ix.BackendByName("x")
	if g, active := ix.Generation(id); g != 3 || !active {
		t.Fatalf("gen %d active %v", g, active)
	}
	if _, _, err := ix.JoinBackend(BackendEntry{Name: "y", State: 7}); err == nil {
		t.Fatal("invalid state accepted")
	}
	full := newTestIndex(t, func(c *Config) { c.MaxBackends = 1 })
	backends(t, full, "only")
	if _, err := full.EnsureBackend("two"); err != ErrTooManyBackends {
		t.Fatalf("full registry: %v", err)
	}
}

func TestCapacityEvictsSoonestExpiry(t *testing.T) {
	ix := newTestIndex(t, func(c *Config) { c.Capacity = 1000; c.EvictFraction = 0.1 })
	b := backends(t, ix, "a")
	r := rand.New(rand.NewPCG(6, 6))
	for i := 0; i < 3000; i++ {
		c := Claim{Key: Key(r.Uint64() | 1), Backend: b[0], Time: MakeTimestamp(int64(i), 0), Expires: int64(10_000 + i), Origin: 1}
		ix.Upsert(c, 0)
		if n := ix.Len(); n > 1000 {
			t.Fatalf("len %d above capacity", n)
		}
	}
	// Everything left expires after everything evicted: the floor separates them.
	floor := ix.Floor()
	kept := 0
	ix.Range(0, func(c *Claim) bool {
		if c.Expires <= floor {
			t.Fatalf("claim below floor kept: %d <= %d", c.Expires, floor)
		}
		kept++
		return true
	})
	if kept < 900 || kept > 1000 || floor < 10_000+2000-1 {
		t.Fatalf("kept %d, floor %d", kept, floor)
	}
	// A claim below the floor is rejected when it arrives again.
	if o := ix.Upsert(Claim{Key: 12345, Backend: b[0], Time: 1, Expires: floor, Origin: 1}, 0); o != RejectedEvicted {
		t.Fatalf("below floor: %v", o)
	}
	st := ix.Stats()
	if st.Evicted == 0 || st.FloorRaises == 0 || st.Claims != kept {
		t.Fatalf("stats %+v", st)
	}
}

// Two replicas receiving the same claims in different orders, with
// duplicates, a capacity that forces eviction and a floor exchanged at the
// end, hold identical contents.
func TestReplicasConvergeUnderEvictionAndExpiry(t *testing.T) {
	mk := func() *Index {
		ix := newTestIndex(t, func(c *Config) { c.Capacity = 500; c.EvictFraction = 0.05 })
		backends(t, ix, "a", "b", "c")
		return ix
	}
	r := rand.New(rand.NewPCG(7, 7))
	var claims []Claim
	for i := 0; i < 4000; i++ {
		c := Claim{Key: Key(r.Uint64N(1500) + 1), Backend: BackendID(r.IntN(3)), Gen: 0,
			Time: MakeTimestamp(int64(r.IntN(5000)), uint16(r.IntN(3))), Origin: NodeID(r.IntN(4))}
		c.Expires = c.Time.Millis() + int64(r.IntN(3))*1000 + 500
		claims = append(claims, c)
	}
	a, b := mk(), mk()
	for _, c := range claims {
		a.Upsert(c, 0)
	}
	perm := r.Perm(len(claims))
	for _, i := range perm {
		b.Upsert(claims[i], 0)
		if r.IntN(4) == 0 {
			b.Upsert(claims[i], 0) // duplicate
		}
	}
	for _, now := range []int64{0, 2000, 4000} {
		f := max(a.Floor(), b.Floor())
		a.RaiseFloor(f, now)
		b.RaiseFloor(f, now)
		if sa, sb := contents(a, now), contents(b, now); !slices.Equal(sa, sb) {
			t.Fatalf("now=%d: replicas differ: %d vs %d claims", now, len(sa), len(sb))
		}
	}
}

func contents(ix *Index, now int64) []Claim {
	var out []Claim
	ix.Range(now, func(c *Claim) bool { out = append(out, *c); return true })
	slices.SortFunc(out, func(x, y Claim) int {
		if x.Key != y.Key {
			if x.Key < y.Key {
				return -1
			}
			return 1
		}
		return int(x.Backend) - int(y.Backend)
	})
	return out
}

func TestRangeKeysSeesExactlyTheRange(t *testing.T) {
	ix := newTestIndex(t, func(c *Config) { c.Capacity = 2000 })
	b := backends(t, ix, "a", "b")
	r := rand.New(rand.NewPCG(8, 8))
	for i := 0; i < 2000; i++ {
		ix.Upsert(Claim{Key: Key(r.Uint64() | 1), Backend: b[r.IntN(2)], Expires: minute, Origin: 1}, 0)
	}
	all := contents(ix, 0)
	ranges := [][2]Key{{1, 1<<63 - 1}, {1 << 63, ^Key(0)}, {1, ^Key(0)}, {0x1000, 0x2000}, {all[10].Key, all[20].Key}, {all[len(all)-5].Key, ^Key(0)}}
	for _, rg := range ranges {
		want := 0
		for _, c := range all {
			if c.Key >= rg[0] && c.Key <= rg[1] {
				want++
			}
		}
		got := 0
		ix.RangeKeys(rg[0], rg[1], 0, func(c *Claim) bool {
			if c.Key < rg[0] || c.Key > rg[1] {
				t.Fatalf("key %#x outside [%#x, %#x]", c.Key, rg[0], rg[1])
			}
			got++
			return true
		})
		if got != want {
			t.Fatalf("range [%#x, %#x]: got %d, want %d", rg[0], rg[1], got, want)
		}
	}
}

// Lookups run concurrently with learning, applying and sweeping; run with
// -race. Every lookup must see the stable claims, whatever the writers do.
func TestConcurrentLookupsDuringWrites(t *testing.T) {
	ix := newTestIndex(t, func(c *Config) { c.Capacity = 3000; c.EvictFraction = 0.2 })
	b := backends(t, ix, "a", "b", "c", "d")
	r := rand.New(rand.NewPCG(9, 9))
	stable := chainOf(ix, randTokens(r, 16*32))
	ix.Learn(stable, b[0], MakeTimestamp(0, 0), 1<<40, 1, 0, nil) // never expires or gets evicted first
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for w := 0; w < 2; w++ {
		wg.Add(1)
		go func(seed uint64) {
			defer wg.Done()
			r := rand.New(rand.NewPCG(seed, seed))
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				ch := chainOf(ix, randTokens(r, 16*(1+r.IntN(40))), 16*r.IntN(10))
				ix.Learn(ch, b[r.IntN(4)], MakeTimestamp(int64(i), 0), int64(1000+r.IntN(5000)), 1, int64(i/4), nil)
				if i%500 == 0 {
					ix.Sweep(int64(i / 4))
				}
			}
		}(uint64(w + 10))
	}
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var res Result
			for i := 0; i < 3000; i++ {
				ix.Lookup(stable, 0, &res)
				if res.Depth(b[0]) != 32 {
					t.Errorf("stable claim not seen: %+v", res.Matches)
					return
				}
			}
		}()
	}
	// Let readers finish, then stop writers.
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	for ix.Stats().Inserted < 5000 {
		select {
		case <-done:
		default:
			continue
		}
		break
	}
	close(stop)
	<-done
}

// RefreshMaxMillis caps the coalescing: a claim's timestamp lags its last
// use by at most that much, whatever the TTL.
func TestRefreshCoalescingIsCapped(t *testing.T) {
	ix := newTestIndex(t, func(c *Config) { c.RefreshMaxMillis = 2_000 })
	b := backends(t, ix, "a")
	ch := chainOf(ix, randTokens(rand.New(rand.NewPCG(5, 5)), 16*4))
	ttl := 10 * minute
	ix.Learn(ch, b[0], MakeTimestamp(0, 0), ttl, 1, 0, nil)
	if got := ix.Learn(ch, b[0], MakeTimestamp(1_500, 0), ttl, 1, 1_500, nil); len(got) != 0 {
		t.Fatalf("refresh within the cap emitted %d", len(got))
	}
	got := ix.Learn(ch, b[0], MakeTimestamp(2_500, 0), ttl, 1, 2_500, nil)
	if len(got) != 1 || got[0].Time != MakeTimestamp(2_500, 0) {
		t.Fatalf("refresh past the 2 s cap (a quarter TTL is 150 s): %+v", got)
	}
}

// A short-lived learn (the router's provisional claim at dispatch) over a
// longer-lived claim (one confirmed earlier) records the prefix's new use:
// the claim keeps its expiry and takes the new timestamp, once it lags by
// more than the cap.
func TestShortLearnRefreshesLastUse(t *testing.T) {
	ix := newTestIndex(t, func(c *Config) { c.RefreshMaxMillis = 2_000 })
	b := backends(t, ix, "a")
	ch := chainOf(ix, randTokens(rand.New(rand.NewPCG(6, 6)), 16*8), 64)
	ttl, short := 10*minute, int64(30_000)
	ix.Learn(ch, b[0], MakeTimestamp(0, 0), ttl, 1, 0, nil)
	// Within the cap: nothing changes.
	if got := ix.Learn(ch, b[0], MakeTimestamp(1_000, 0), short, 1, 1_000, nil); len(got) != 0 {
		t.Fatalf("short learn within the cap emitted %+v", got)
	}
	// Past it: both claims take the new timestamp and keep their expiry.
	at := MakeTimestamp(60_000, 0)
	got := ix.Learn(ch, b[0], at, short, 2, 60_000, nil)
	if len(got) != 2 {
		t.Fatalf("short learn past the cap changed %d claims, want 2: %+v", len(got), got)
	}
	for _, c := range got {
		if c.Time != at || c.Expires != ttl || c.Origin != 2 {
			t.Fatalf("claim %+v: want time %v, the confirmed expiry %d", c, at, ttl)
		}
	}
	var res Result
	ix.Lookup(ch, 60_000, &res)
	if len(res.Matches) != 1 || res.Matches[0].Time != at || res.Matches[0].Blocks != 8 {
		t.Fatalf("lookup after the refresh: %+v, want 8 blocks stamped %v", res.Matches, at)
	}
	// The confirmed expiry still holds: the claims outlive the short TTL.
	ix.Lookup(ch, 60_000+short+1, &res)
	if len(res.Matches) != 1 || res.Matches[0].Blocks != 8 {
		t.Fatalf("after the short TTL: %+v, want the confirmed claims", res.Matches)
	}
}

// A node that has just named a backend (the unwritten entry, generation 0)
// takes the mesh's generation however far the counter has gone, and its
// own unwritten entry never displaces the mesh's: generations half the
// 16-bit space from 0 compare below it in serial arithmetic.
func TestUnwrittenEntryYieldsToAnyGeneration(t *testing.T) {
	for _, gen := range []uint16{1, 32767, 32768, 40000, 65535} {
		mesh := BackendEntry{Name: "b", Gen: gen, State: BackendActive, Time: MakeTimestamp(5, 0), Origin: 2}
		fresh := newTestIndex(t, nil)
		id := backends(t, fresh, "b")[0]
		unwritten, _ := fresh.Backend(id)
		if _, changed, err := fresh.JoinBackend(mesh); err != nil || !changed {
			t.Fatalf("gen %d: a new node refused the mesh's entry (changed %v, err %v)", gen, changed, err)
		}
		if g, active := fresh.Generation(id); g != gen || !active {
			t.Fatalf("gen %d: new node at generation %d", gen, g)
		}
		// A peer at the mesh's generation, with a claim there, hears the
		// new node's unwritten entry (sent with its first claims).
		peer := newTestIndex(t, nil)
		pid, _, _ := peer.JoinBackend(mesh)
		c := Claim{Key: 7, Backend: pid, Gen: gen, Time: MakeTimestamp(6, 0), Expires: minute, Origin: 2}
		if o := peer.Upsert(c, 6); o != Inserted {
			t.Fatalf("gen %d: claim %v", gen, o)
		}
		if _, changed, _ := peer.JoinBackend(unwritten); changed {
			t.Fatalf("gen %d: the unwritten entry displaced the mesh's", gen)
		}
		var res Result
		ch := Chain{Keys: []Key{7}}
		peer.Lookup(&ch, 7, &res)
		if res.Depth(pid) != 1 {
			t.Fatalf("gen %d: the mesh's claim no longer matches: %+v", gen, res.Matches)
		}
	}
}

// An entry without a time can only be the unwritten one: any other
// generation or state without a time is refused (a peer's bug).
func TestEntryWithoutTimeMustBeUnwritten(t *testing.T) {
	ix := newTestIndex(t, nil)
	for _, e := range []BackendEntry{{Name: "x", Gen: 3, State: BackendActive}, {Name: "x", State: BackendRemoved}} {
		if _, _, err := ix.JoinBackend(e); err == nil {
			t.Fatalf("%+v accepted", e)
		}
	}
	if _, _, err := ix.JoinBackend(BackendEntry{Name: "x", State: BackendActive}); err != nil {
		t.Fatalf("the unwritten entry: %v", err)
	}
	if _, ok := ix.BackendByName("x"); !ok {
		t.Fatal("the unwritten entry did not register its backend")
	}
}

// Claims of any generation but the current one are reclaimed by the sweep,
// however far apart the two are.
func TestSweepReclaimsEveryOtherGeneration(t *testing.T) {
	ix := newTestIndex(t, nil)
	id := backends(t, ix, "b")[0]
	if o := ix.Upsert(Claim{Key: 9, Backend: id, Time: MakeTimestamp(1, 0), Expires: minute, Origin: 1}, 1); o != Inserted {
		t.Fatal(o)
	}
	if _, _, err := ix.JoinBackend(BackendEntry{Name: "b", Gen: 40000, State: BackendActive, Time: MakeTimestamp(2, 0), Origin: 2}); err != nil {
		t.Fatal(err)
	}
	if n := ix.Sweep(3); n != 1 || ix.Len() != 0 {
		t.Fatalf("swept %d, %d left", n, ix.Len())
	}
}
