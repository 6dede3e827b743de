package tree

import (
	"math/rand/v2"
	"testing"
)

func TestChainTokensMatchesKeyer(t *testing.T) {
	ix := newTestIndex(t, nil)
	r := rand.New(rand.NewPCG(3, 3))
	toks := randTokens(r, 16*5)
	ch := chainOf(ix, toks)
	prev := uint64(NewSeed("m", "", ""))
	for i := 0; i < 5; i++ {
		k := ChainTokens(prev, toks[i*16:(i+1)*16])
		if k != ch.Keys[i] {
			t.Fatalf("block %d: ChainTokens %x, Keyer %x", i, k, ch.Keys[i])
		}
		prev = uint64(k)
	}
}

func TestEndedClaimStaysDeadInAnyOrder(t *testing.T) {
	now := int64(1_000_000)
	ix := newTestIndex(t, nil)
	b := backends(t, ix, "a")[0]
	r := rand.New(rand.NewPCG(4, 4))
	ch := chainOf(ix, randTokens(r, 16*4))
	changed := ix.Learn(ch, b, MakeTimestamp(now, 0), minute, 1, now, nil)
	if len(changed) != 1 {
		t.Fatalf("learned %d claims", len(changed))
	}
	live := changed[0]
	var res Result
	ix.Lookup(ch, now, &res)
	if res.Depth(b) != 4 {
		t.Fatalf("depth before End = %d", res.Depth(b))
	}
	tomb, ok := ix.End(live.Key, b, MakeTimestamp(now+1, 0), now+1)
	if !ok || !tomb.Ended() || tomb.Expires != live.Expires || !tomb.Dominates(live) {
		t.Fatalf("End = %+v %v", tomb, ok)
	}
	ix.Lookup(ch, now+1, &res)
	if res.Depth(b) != 0 {
		t.Fatalf("depth after End = %d", res.Depth(b))
	}
	if _, ok := ix.End(live.Key, b, MakeTimestamp(now+2, 0), now+2); ok {
		t.Fatal("ended twice")
	}
	// A replica receiving the tombstone before or after the live claim ends
	// up holding the tombstone.
	for _, order := range [][]Claim{{live, tomb}, {tomb, live}} {
		other := newTestIndex(t, nil)
		backends(t, other, "a")
		for _, c := range order {
			other.Upsert(c, now+1)
		}
		other.Lookup(ch, now+1, &res)
		if res.Depth(b) != 0 || len(contents(other, now+1)) != 1 || !contents(other, now+1)[0].Ended() {
			t.Fatalf("order %v: depth %d, contents %+v", order, res.Depth(b), contents(other, now+1))
		}
	}
	// Learning the block again (stored again), even with a shorter TTL that
	// would expire before the tombstone, claims it again.
	changed = ix.Learn(ch, b, MakeTimestamp(now+5, 0), minute/2, 1, now+5, nil)
	if len(changed) != 1 || changed[0].Expires <= tomb.Expires || changed[0].Ended() {
		t.Fatalf("re-learn = %+v", changed)
	}
	ix.Lookup(ch, now+5, &res)
	if res.Depth(b) != 4 {
		t.Fatalf("depth after re-learn = %d", res.Depth(b))
	}
}

func TestNodeIDOfNeverEnded(t *testing.T) {
	for i := 0; i < 1000; i++ {
		if NodeIDOf(string(rune('a'+i%26))+string(rune(i))) == EndedOrigin {
			t.Fatal("NodeIDOf returned EndedOrigin")
		}
	}
}

// EndExpiring ends a claim that expires by its bound only: a longer-lived
// one (learned meanwhile for a longer TTL) stays live.
func TestEndExpiringLeavesLongerLivedClaims(t *testing.T) {
	now := int64(1_000_000)
	ix := newTestIndex(t, nil)
	b := backends(t, ix, "a")[0]
	r := rand.New(rand.NewPCG(5, 5))
	ch := chainOf(ix, randTokens(r, 16*4))
	live := ix.Learn(ch, b, MakeTimestamp(now, 0), 10*minute, 1, now, nil)[0]
	if _, ok := ix.EndExpiring(live.Key, b, MakeTimestamp(now+1, 0), now+1, live.Expires-1); ok {
		t.Fatal("a claim expiring past the bound was ended")
	}
	var res Result
	ix.Lookup(ch, now+1, &res)
	if res.Depth(b) != 4 {
		t.Fatalf("depth %d after a bounded end that ended nothing, want 4", res.Depth(b))
	}
	if tomb, ok := ix.EndExpiring(live.Key, b, MakeTimestamp(now+2, 0), now+2, live.Expires); !ok || !tomb.Ended() {
		t.Fatal("a claim expiring at the bound was not ended")
	}
}
