package tree

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// LookupSince ignores a backend's claims stamped before its bound and
// reports the stamp of the claim each match came from; other backends and
// a nil bound are unaffected.
func TestLookupSinceIgnoresOlderClaims(t *testing.T) {
	ix := newTestIndex(t, nil)
	b := backends(t, ix, "a", "b")
	r := rand.New(rand.NewPCG(7, 7))
	sys := randTokens(r, 16*10)
	conv := append(slices.Clone(sys), randTokens(r, 16*6)...)
	now := int64(1_000_000)
	old, fresh := MakeTimestamp(now-50_000, 0), MakeTimestamp(now-1_000, 0)
	// The whole conversation was sent to a long ago; its system prompt was
	// sent again recently (another conversation); b got everything recently.
	ix.Learn(chainOf(ix, conv, 160, len(conv)), b[0], old, minute, 1, now, nil)
	ix.Learn(chainOf(ix, sys, 160), b[0], fresh, minute, 1, now, nil)
	ix.Learn(chainOf(ix, conv, 160, len(conv)), b[1], fresh, 10*minute, 1, now, nil)
	follow := chainOf(ix, append(slices.Clone(conv), randTokens(r, 32)...))

	var res Result
	ix.Lookup(follow, now, &res)
	if res.Depth(b[0]) != 16 || res.Depth(b[1]) != 16 {
		t.Fatalf("without a bound: %+v", res.Matches)
	}
	for _, m := range res.Matches {
		if want := map[BackendID]Timestamp{b[0]: old, b[1]: fresh}[m.Backend]; m.Time != want {
			t.Fatalf("match %+v: time %v, want %v", m, m.Time, want)
		}
	}
	// a's cache turned over since 10 s ago: only its recent system prompt counts.
	since := []Timestamp{MakeTimestamp(now-10_000, 0), 0}
	ix.LookupSince(follow, now, since, &res)
	if res.Depth(b[0]) != 10 || res.Depth(b[1]) != 16 || res.Deepest != 16 {
		t.Fatalf("with a's bound: %+v", res.Matches)
	}
	// Past everything a holds: a matches nothing; b still all.
	since[0] = MakeTimestamp(now, 0)
	ix.LookupSince(follow, now, since, &res)
	if res.Depth(b[0]) != 0 || res.Depth(b[1]) != 16 {
		t.Fatalf("with a's bound past its claims: %+v", res.Matches)
	}
	// A short bound slice filters only the backends it covers.
	ix.LookupSince(follow, now, since[:1], &res)
	if res.Depth(b[1]) != 16 {
		t.Fatalf("b filtered by a bound it has none of: %+v", res.Matches)
	}
}
