package tree

import (
	"fmt"
	"testing"
)

func TestKeySchemeFollowsBlockSizeAndCheckpoints(t *testing.T) {
	a := DefaultConfig()
	b := a
	b.BlockTokens = 32
	if a.KeyScheme() == b.KeyScheme() {
		t.Fatalf("block sizes 16 and 32 share the scheme %q: their keys differ", a.KeyScheme())
	}
	c := a
	c.CheckpointTokens = 1024
	if a.KeyScheme() == c.KeyScheme() {
		t.Fatalf("checkpoints 512 and 1024 share the scheme %q: lookups miss each other's claims", a.KeyScheme())
	}
	d := a
	d.Capacity = a.Capacity / 2
	if a.KeyScheme() != d.KeyScheme() {
		t.Fatalf("capacity changed the scheme (%q, %q): it does not change where claims sit", a.KeyScheme(), d.KeyScheme())
	}
	if want := fmt.Sprintf("k%d.b16.c512", KeyVersion); a.KeyScheme() != want {
		t.Fatalf("KeyScheme = %q, want %q", a.KeyScheme(), want)
	}
}

// The scheme claims that equal schemes give equal keys and different block
// sizes different ones: the same prompt under both block sizes.
func TestKeySchemeMatchesKeys(t *testing.T) {
	text := make([]byte, 512)
	for i := range text {
		text[i] = byte('a' + i%26)
	}
	keys := func(blockTokens int) []Key {
		cfg := DefaultConfig()
		cfg.BlockTokens = blockTokens
		var ch Chain
		NewKeyer(cfg).Bytes(&ch, NewSeed("m", "", ""), text, []int{len(text)})
		return append([]Key(nil), ch.Keys...)
	}
	k16, k16again, k32 := keys(16), keys(16), keys(32)
	if fmt.Sprint(k16) != fmt.Sprint(k16again) {
		t.Fatal("the same scheme gave the same prompt different keys")
	}
	for _, k := range k32 {
		for _, j := range k16 {
			if k == j {
				t.Fatalf("block sizes 16 and 32 share key %x", k)
			}
		}
	}
}

// What the scheme says of checkpoints: a claim learned under other
// checkpoints, past the first checkpoint of this index's it was not learned
// with, is not found by this index's lookup; under equal ones it is.
func TestKeySchemeCheckpointsHideClaims(t *testing.T) {
	text := make([]byte, 100*64) // 100 blocks of 64 bytes
	for i := range text {
		text[i] = byte('a' + i*7%26)
	}
	found := func(learnedUnder, lookedUpUnder int) int32 {
		lc, kc := DefaultConfig(), DefaultConfig()
		lc.CheckpointTokens, kc.CheckpointTokens = learnedUnder, lookedUpUnder
		ix, err := New(kc)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := ix.EnsureBackend("b")
		var ch Chain
		NewKeyer(lc).Bytes(&ch, NewSeed("m", "", ""), text, []int{len(text)})
		now := int64(1_000_000)
		ix.Learn(&ch, b, MakeTimestamp(now, 1), 3_600_000, 1, now, nil)
		NewKeyer(kc).Bytes(&ch, NewSeed("m", "", ""), text, nil)
		var res Result
		ix.Lookup(&ch, now, &res)
		return res.Depth(b)
	}
	if d := found(1024, 1024); d != 100 {
		t.Fatalf("same checkpoints: depth %d, want 100", d)
	}
	// Learned with checkpoints at 64 blocks (and the message end, 100);
	// looked up with checkpoints at 32 blocks: it probes 96 (absent), 64,
	// then 65-95, and never reaches 100.
	if d := found(1024, 512); d == 100 {
		t.Fatalf("checkpoints 1024 read under 512: depth %d; the scheme says such claims are missed", d)
	}
}
