package tree

import (
	"fmt"
	"testing"
)

func TestKeySchemeFollowsBlockSize(t *testing.T) {
	a := DefaultConfig()
	b := a
	b.BlockTokens = 32
	if a.KeyScheme() == b.KeyScheme() {
		t.Fatalf("block sizes 16 and 32 share the scheme %q: their keys differ", a.KeyScheme())
	}
	c := a
	c.CheckpointTokens, c.Capacity = 1024, a.Capacity/2
	if a.KeyScheme() != c.KeyScheme() {
		t.Fatalf("checkpoints and capacity changed the scheme (%q, %q): they do not change keys", a.KeyScheme(), c.KeyScheme())
	}
	if want := fmt.Sprintf("k%d.b16", KeyVersion); a.KeyScheme() != want {
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
