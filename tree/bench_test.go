package tree

import (
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
)

// The fixture of the floors: an index of 1,000,000 claims over 8
// backends, and a 4,096-token prompt whose prefixes are claimed on three of
// them at different depths.
type fixture struct {
	ix     *Index
	prompt []uint32
}

var (
	fixOnce sync.Once
	fix     fixture
)

func millionClaims(tb testing.TB) fixture {
	fixOnce.Do(func() {
		cfg := DefaultConfig() // capacity 1,000,000
		ix, err := New(cfg)
		if err != nil {
			tb.Fatal(err)
		}
		ids := backends(tb, ix, "b0", "b1", "b2", "b3", "b4", "b5", "b6", "b7")
		r := rand.New(rand.NewPCG(42, 42))
		now := int64(1_000_000)
		batch := make([]Claim, 0, 4096)
		for n := 0; n < cfg.Capacity-100; n += len(batch) {
			batch = batch[:0]
			for i := 0; i < 4096 && n+i < cfg.Capacity-100; i++ {
				batch = append(batch, Claim{Key: Key(r.Uint64() | 1), Backend: ids[r.IntN(8)],
					Time: MakeTimestamp(now, 0), Expires: now + 3_600_000, Origin: NodeID(r.IntN(3))})
			}
			ix.UpsertBatch(batch, now, nil)
		}
		prompt := randTokens(r, 4096)
		var ch Chain
		ix.Keyer().Tokens(&ch, NewSeed("model", "", ""), prompt[:1024], []int{512})
		ix.Learn(&ch, ids[1], MakeTimestamp(now, 1), 3_600_000, 1, now, nil)
		ix.Keyer().Tokens(&ch, NewSeed("model", "", ""), prompt[:3000], []int{512})
		ix.Learn(&ch, ids[4], MakeTimestamp(now, 1), 3_600_000, 1, now, nil)
		ix.Keyer().Tokens(&ch, NewSeed("model", "", ""), prompt[:256], nil)
		ix.Learn(&ch, ids[6], MakeTimestamp(now, 1), 3_600_000, 1, now, nil)
		fix = fixture{ix: ix, prompt: prompt}
	})
	return fix
}

// BenchmarkHashAndLookup4096 is the router's hot path: chain a 4,096-token
// prompt and look it up in an index of 1,000,000 claims over 8 backends.
// Floor: 5 us/op, 0 allocs/op.
func BenchmarkHashAndLookup4096(b *testing.B) {
	f := millionClaims(b)
	seed := NewSeed("model", "", "")
	var ch Chain
	var res Result
	ends := []int{100, 900, 4000}
	f.ix.Keyer().Tokens(&ch, seed, f.prompt, ends) // size the buffers once
	f.ix.Lookup(&ch, 1_000_000, &res)
	if res.Depth(4) != 187 || res.Depth(1) != 64 || res.Depth(6) != 16 {
		b.Fatalf("fixture lookup: %+v", res.Matches)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		f.ix.Keyer().Tokens(&ch, seed, f.prompt, ends)
		f.ix.Lookup(&ch, 1_000_000, &res)
	}
}

// BenchmarkHash4096 isolates the hashing part of the hot path.
func BenchmarkHash4096(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 1))
	prompt := randTokens(r, 4096)
	seed := NewSeed("model", "", "")
	var ch Chain
	b.ReportAllocs()
	b.SetBytes(4 * 4096)
	for b.Loop() {
		DefaultKeyer.Tokens(&ch, seed, prompt, nil)
	}
}

var DefaultKeyer = NewKeyer(DefaultConfig())

// BenchmarkLearnPerClaim learns one request's claims (a 4,096-token,
// 10-message prompt: 17 claims) into a full index of 1,000,000 claims, so
// the figure includes eviction, and reports the cost per claim. Every
// iteration uses a new seed: all its claims are new, none coalesce. The
// timed loop includes chaining the prompt (about 1.4 us of the ~17 claims'
// cost), so the per-claim figure is an upper bound. Floor: 2 us/claim.
func BenchmarkLearnPerClaim(b *testing.B) {
	f := millionClaims(b)
	ix := f.ix
	ends := []int{400, 800, 1200, 1600, 2000, 2400, 2800, 3200, 3600, 4096}
	var ch Chain
	ix.Keyer().Tokens(&ch, 1, f.prompt, ends)
	perLearn := len(ch.Learn)
	changed := make([]Claim, 0, 64)
	i := 0
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		learnSeed++
		ix.Keyer().Tokens(&ch, Seed(0x9e3779b97f4a7c15*learnSeed), f.prompt, ends)
		learnNow++
		now := learnNow
		changed = ix.Learn(&ch, BackendID(i%8), MakeTimestamp(now, 0), 3_600_000, 1, now, changed[:0])
		if len(changed) != perLearn {
			b.Fatalf("learn %d changed %d claims, want %d", i, len(changed), perLearn)
		}
		i++
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(i*perLearn), "ns/claim")
}

// Shared by every run of BenchmarkLearnPerClaim over the one fixture, so that
// each run's claims are new and above the floor earlier runs raised.
var learnSeed uint64
var learnNow int64 = 2_000_000

// TestMemoryPerClaim measures the heap an Index of 1,000,000 claims takes.
// Floor: 96 bytes per claim.
func TestMemoryPerClaim(t *testing.T) {
	if testing.Short() {
		t.Skip("allocates ~70 MB")
	}
	perClaim := measureMemoryPerClaim(t, 1_000_000)
	t.Logf("%.1f bytes per claim at 1,000,000 claims", perClaim)
	if perClaim > 96 {
		t.Fatalf("%.1f bytes per claim, above the 96-byte budget", perClaim)
	}
}

func BenchmarkMemoryPerClaim(b *testing.B) {
	for b.Loop() {
		b.ReportMetric(measureMemoryPerClaim(b, 1_000_000), "B/claim")
	}
}

func measureMemoryPerClaim(tb testing.TB, n int) float64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	cfg := DefaultConfig()
	cfg.Capacity = n
	ix, err := New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	ids := backends(tb, ix, "b0", "b1", "b2", "b3", "b4", "b5", "b6", "b7")
	r := rand.New(rand.NewPCG(3, 3))
	batch := make([]Claim, 0, 1024)
	for done := 0; done < n; {
		batch = batch[:0]
		for i := 0; i < 1024 && done+i < n; i++ {
			batch = append(batch, Claim{Key: Key(r.Uint64() | 1), Backend: ids[r.IntN(8)], Expires: 1 << 40, Origin: 1})
		}
		ix.UpsertBatch(batch, 0, nil)
		done += len(batch)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	if got := ix.Len(); got != n {
		tb.Fatalf("index holds %d claims, want %d", got, n)
	}
	runtime.KeepAlive(ix)
	return float64(after.HeapAlloc-before.HeapAlloc) / float64(n)
}
