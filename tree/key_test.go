package tree

import (
	"encoding/binary"
	"math/rand/v2"
	"slices"
	"testing"
)

func randTokens(r *rand.Rand, n int) []uint32 {
	t := make([]uint32, n)
	for i := range t {
		t[i] = r.Uint32N(200_000)
	}
	return t
}

func tokenBytes(t []uint32) []byte {
	b := make([]byte, 4*len(t))
	for i, v := range t {
		binary.LittleEndian.PutUint32(b[4*i:], v)
	}
	return b
}

func TestTokensAndBytesGiveTheSameKeys(t *testing.T) {
	k := NewKeyer(DefaultConfig())
	r := rand.New(rand.NewPCG(1, 2))
	toks := randTokens(r, 16*20+5)
	seed := NewSeed("m", "", "")
	var a, b Chain
	k.Tokens(&a, seed, toks, nil)
	// 16 tokens per block in token mode; 64 bytes per block in byte mode: the
	// little-endian bytes of the tokens must chain to the same keys.
	k.Bytes(&b, seed, tokenBytes(toks), nil)
	if !slices.Equal(a.Keys, b.Keys) || len(a.Keys) != 20 {
		t.Fatalf("token and byte chains differ: %d vs %d keys", len(a.Keys), len(b.Keys))
	}
	if a.UnitsPerBlock != 16 || b.UnitsPerBlock != 64 || a.Units != 325 {
		t.Fatalf("units per block %d/%d, units %d", a.UnitsPerBlock, b.UnitsPerBlock, a.Units)
	}
}

func TestChainIsAPrefixFunction(t *testing.T) {
	k := NewKeyer(DefaultConfig())
	r := rand.New(rand.NewPCG(3, 4))
	base := randTokens(r, 16*10)
	other := slices.Clone(base)
	other[16*6+3]++ // differ inside block 6
	seed := NewSeed("m", "t", "")
	var a, b Chain
	k.Tokens(&a, seed, base, nil)
	k.Tokens(&b, seed, other, nil)
	for i := range a.Keys {
		if same := a.Keys[i] == b.Keys[i]; same != (i < 6) {
			t.Fatalf("block %d: keys equal=%v, want %v", i, same, i < 6)
		}
	}
	// A key names the whole prefix: the same block after a different prefix
	// gets a different key.
	shifted := append(randTokens(r, 16), base[:16]...)
	var c Chain
	k.Tokens(&c, seed, shifted, nil)
	if c.Keys[1] == a.Keys[0] {
		t.Fatal("same block after a different prefix got the same key")
	}
}

func TestSeedsSeparateKeys(t *testing.T) {
	k := NewKeyer(DefaultConfig())
	r := rand.New(rand.NewPCG(5, 6))
	toks := randTokens(r, 16*64)
	seeds := []Seed{
		NewSeed("llama", "", ""), NewSeed("llama", "a", ""), NewSeed("llama", "b", ""),
		NewSeed("llama", "", "lora1"), NewSeed("llama2", "", ""), NewSeed("ab", "c", ""), NewSeed("a", "bc", ""),
		NewSeed("", "", ""),
	}
	seen := map[Key]int{}
	for si, s := range seeds {
		var c Chain
		k.Tokens(&c, s, toks, nil)
		for _, key := range c.Keys {
			if key == 0 {
				t.Fatal("key 0 produced")
			}
			if prev, ok := seen[key]; ok && prev != si {
				t.Fatalf("seeds %d and %d share a key", prev, si)
			}
			seen[key] = si
		}
	}
	if NewSeed("ab", "c", "") == NewSeed("a", "bc", "") {
		t.Fatal("seed parts are not framed")
	}
}

func TestKeysAreStable(t *testing.T) {
	// Keys are part of the wire protocol between nodes: a change of the hash
	// breaks mixed-version meshes. This pins the first keys of a fixed input.
	k := NewKeyer(DefaultConfig())
	toks := make([]uint32, 32)
	for i := range toks {
		toks[i] = uint32(i * 7)
	}
	var c Chain
	k.Tokens(&c, NewSeed("model", "", ""), toks, nil)
	got := []Key{c.Keys[0], c.Keys[1]}
	want := []Key{0x76d1ff1145909543, 0x2ab33488b3f2ae3b}
	if !slices.Equal(got, want) {
		t.Fatalf("keys changed: got %#x, want %#x", got, want)
	}
}

func TestLearnPositions(t *testing.T) {
	cfg := DefaultConfig() // 16-token blocks, checkpoints every 32 blocks
	k := NewKeyer(cfg)
	var c Chain
	toks := make([]uint32, 16*70+9)
	// Message ends at 10 tokens (inside block 0: no claim), 40 (block 2),
	// 47 (also block 2: deduped), 600 (block 37), and the end (block 70).
	k.Tokens(&c, 1, toks, []int{10, 40, 47, 600, len(toks), 0, -5, 99999})
	want := []int32{2, 32, 37, 64, 70}
	if !slices.Equal(c.Learn, want) {
		t.Fatalf("learn depths %v, want %v", c.Learn, want)
	}
	// Unordered ends are sorted; a prompt shorter than a block learns nothing.
	k.Tokens(&c, 1, toks[:16*5], []int{64, 17})
	if !slices.Equal(c.Learn, []int32{1, 4, 5}) {
		t.Fatalf("learn depths %v", c.Learn)
	}
	k.Tokens(&c, 1, toks[:15], []int{15})
	if len(c.Learn) != 0 || len(c.Keys) != 0 {
		t.Fatalf("short prompt: keys %d learn %v", len(c.Keys), c.Learn)
	}
}

func TestConfigValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatal(err)
	}
	bad := []func(*Config){
		func(c *Config) { c.BlockTokens = 12 },
		func(c *Config) { c.CheckpointTokens = 100 },
		func(c *Config) { c.Capacity = 1 },
		func(c *Config) { c.MaxBackends = 0 },
		func(c *Config) { c.EvictFraction = 0 },
		func(c *Config) { c.RefreshFraction = 1 },
		func(c *Config) { c.SweepPerWrite = -1 },
	}
	for i, f := range bad {
		c := DefaultConfig()
		f(&c)
		if c.Validate() == nil {
			t.Errorf("case %d: invalid config accepted", i)
		}
		if _, err := New(c); err == nil {
			t.Errorf("case %d: New accepted invalid config", i)
		}
	}
}
