package crdt

import (
	"crypto/sha256"
	"slices"
	"strings"
	"testing"

	"github.com/kvmesh/kvmesh/tree"
)

// snapNet is a replica with claims on three backends (one invalidated
// once), some short-lived, and an eviction floor.
func snapNet(t *testing.T) (*simNet, *tree.Index) {
	s := newSimNet(t, 41, nil)
	s.add("a")
	for i := 0; i < 200; i++ {
		ttl := int64(600_000)
		if i%4 == 0 {
			ttl = 5_000 // expires before the restart below
		}
		s.learn("a", prompt(i, i%7, 6, 2), []string{"b0", "b1", "b2"}[i%3], ttl)
	}
	if _, err := s.node("a").r.Invalidate("b1", false, s.now); err != nil {
		t.Fatal(err)
	}
	s.learn("a", prompt(999, 0, 6, 2), "b1", 600_000)
	return s, s.node("a").r.Index()
}

// A snapshot applied to an empty index gives it exactly the claims, the
// registry (generations included) and the floor that were live; claims
// that expired in between stay out.
func TestSnapshotRoundTrip(t *testing.T) {
	s, ix := snapNet(t)
	ix.RaiseFloor(s.now-100_000, s.now)
	data, info, err := AppendSnapshot(nil, ix, s.now)
	if err != nil {
		t.Fatal(err)
	}
	if info.Claims == 0 || info.Backends != 3 || info.Bytes != len(data) {
		t.Fatalf("info %+v for %d bytes", info, len(data))
	}
	snap, err := ParseSnapshot(data)
	if err != nil {
		t.Fatal(err)
	}
	if snap.Info.Claims != info.Claims || snap.Info.Created != s.now || snap.Info.Floor != ix.Floor() {
		t.Fatalf("parsed info %+v, written %+v", snap.Info, info)
	}

	fresh, err := tree.New(s.icfg)
	if err != nil {
		t.Fatal(err)
	}
	got := snap.Apply(fresh, s.now, 3_600_000)
	if got.Claims != info.Claims || got.Rejected != 0 || got.Backends != 3 {
		t.Fatalf("applied %+v, want %d claims, 3 backends", got, info.Claims)
	}
	if a, b := sortedContents(ix, s.now), sortedContents(fresh, s.now); !slices.Equal(a, b) {
		t.Fatalf("restored index differs: %d claims, want %d", len(b), len(a))
	}
	for _, name := range []string{"b0", "b1", "b2"} {
		ia, _ := ix.BackendByName(name)
		ib, ok := fresh.BackendByName(name)
		ga, _ := ix.Generation(ia)
		gb, _ := fresh.Generation(ib)
		if !ok || ga != gb {
			t.Fatalf("%s: generation %d restored as %d", name, ga, gb)
		}
	}
	if fresh.Floor() != ix.Floor() {
		t.Fatalf("floor %d restored as %d", ix.Floor(), fresh.Floor())
	}

	// Ten seconds later the 5-second claims are gone from the restored index.
	later := s.now + 10_000
	again, _ := tree.New(s.icfg)
	res := snap.Apply(again, later, 3_600_000)
	if res.Rejected == 0 || res.Claims >= info.Claims {
		t.Fatalf("applied at a later time: %+v, want the expired claims rejected", res)
	}
	if a, b := sortedContents(ix, later), sortedContents(again, later); !slices.Equal(a, b) {
		t.Fatalf("restored later: %d live claims, want %d", len(b), len(a))
	}
	// Applying twice changes nothing (the join is idempotent).
	if res := snap.Apply(again, later, 3_600_000); res.Claims != 0 {
		t.Fatalf("a second apply changed %d claims", res.Claims)
	}
}

// Every truncation and every flipped byte is refused before anything is
// applied.
func TestSnapshotRejectsDamage(t *testing.T) {
	_, ix := snapNet(t)
	data, _, err := AppendSnapshot(nil, ix, 1_000_000)
	if err != nil {
		t.Fatal(err)
	}
	for n := 0; n < len(data); n += 1 + n/16 {
		if _, err := ParseSnapshot(data[:n]); err == nil {
			t.Fatalf("a snapshot truncated to %d of %d bytes parsed", n, len(data))
		}
	}
	for i := 0; i < len(data); i += 1 + i/32 {
		bad := slices.Clone(data)
		bad[i] ^= 0x40
		if _, err := ParseSnapshot(bad); err == nil {
			t.Fatalf("a snapshot with byte %d flipped parsed", i)
		}
	}
	if _, err := ParseSnapshot(append(slices.Clone(data), 0)); err == nil {
		t.Fatal("a snapshot with a trailing byte parsed")
	}
}

// An empty index makes a valid, empty snapshot.
func TestSnapshotEmpty(t *testing.T) {
	ix, _ := tree.New(tree.DefaultConfig())
	data, info, err := AppendSnapshot(nil, ix, 5)
	if err != nil || info.Claims != 0 {
		t.Fatalf("%+v %v", info, err)
	}
	snap, err := ParseSnapshot(data)
	if err != nil || snap.Info.Claims != 0 {
		t.Fatalf("%+v %v", snap, err)
	}
}

// FuzzParseSnapshot: any bytes parse or fail cleanly; what parses applies
// without a panic. (The checksum makes random inputs fail early; the seeds
// with a valid checksum explore the decoder behind it.)
func FuzzParseSnapshot(f *testing.F) {
	s := newSimNet(f, 42, nil)
	s.add("a")
	for i := 0; i < 20; i++ {
		s.learn("a", prompt(i, i%3, 4, 1), "b", 600_000)
	}
	data, _, err := AppendSnapshot(nil, s.node("a").r.Index(), s.now)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(data)
	f.Add(data[:40])
	f.Add([]byte(snapshotMagic))
	// Checksummed, so that the decoder behind the checksum sees them: a key
	// scheme longer than allowed, and one running past the end.
	for _, body := range []string{snapshotMagicScheme + "\x01\x41" + strings.Repeat("k", 65) + "\x00",
		snapshotMagicScheme + "\x01\x20k1"} {
		sum := sha256.Sum256([]byte(body))
		f.Add(append([]byte(body), sum[:]...))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		snap, err := ParseSnapshot(data)
		if err != nil {
			return
		}
		ix, _ := tree.New(s.icfg)
		if err := snap.Fits(ix); err != nil && snap.Info.KeyScheme == s.icfg.KeyScheme() {
			t.Fatalf("a snapshot of this index's scheme does not fit: %v", err)
		}
		snap.Apply(ix, 1_000_000, 3_600_000)
	})
}
