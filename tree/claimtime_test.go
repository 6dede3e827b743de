package tree

import (
	"math/rand/v2"
	"slices"
	"testing"
)

func TestClaimTimeSeesAFresherSharedHead(t *testing.T) {
	ix := newTestIndex(t, nil)
	b := backends(t, ix, "a", "b")
	r := rand.New(rand.NewPCG(2, 2))
	sys := randTokens(r, 16*10)                                // 10 shared blocks
	conv1 := append(slices.Clone(sys), randTokens(r, 16*6)...) // + 6 blocks
	conv2 := append(slices.Clone(sys), randTokens(r, 16*4)...) // + 4 other blocks
	now := int64(1_000_000)
	old, fresh := MakeTimestamp(now, 0), MakeTimestamp(now+30_000, 0)
	ch1 := chainOf(ix, conv1, 160, len(conv1))
	ix.Learn(ch1, b[0], old, 10*minute, 1, now, nil)
	// Another prompt with the same head, later, on the same backend.
	ix.Learn(chainOf(ix, conv2, 160, len(conv2)), b[0], fresh, 10*minute, 1, now+30_000, nil)

	at := now + 31_000
	var res Result
	ix.Lookup(ch1, at, &res)
	if len(res.Matches) != 1 || res.Matches[0].Blocks != 16 || res.Matches[0].Time != old {
		t.Fatalf("lookup = %+v, want a's 16-block claim stamped %v", res.Matches, old)
	}
	// The deepest claim is the old one; the shared head was used since.
	if ts, ok := ix.ClaimTime(ch1, 10, b[0], at); !ok || ts != fresh {
		t.Errorf("ClaimTime(10 blocks, a) = %v, %v; want %v, true", ts, ok, fresh)
	}
	if ts, ok := ix.ClaimTime(ch1, 16, b[0], at); !ok || ts != old {
		t.Errorf("ClaimTime(16 blocks, a) = %v, %v; want %v, true", ts, ok, old)
	}
	// No claim: a depth with no learn, another backend, out of range.
	for _, q := range []struct {
		depth int32
		b     BackendID
	}{{12, b[0]}, {10, b[1]}, {0, b[0]}, {17, b[0]}, {10, 99}} {
		if ts, ok := ix.ClaimTime(ch1, q.depth, q.b, at); ok {
			t.Errorf("ClaimTime(%d blocks, backend %d) = %v, true; want none", q.depth, q.b, ts)
		}
	}
	// Expired claims are not reported.
	if _, ok := ix.ClaimTime(ch1, 10, b[0], now+30_000+10*minute+1); ok {
		t.Error("ClaimTime reports an expired claim")
	}
}
