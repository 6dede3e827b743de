package tree

import (
	"encoding/binary"
	"math/bits"
)

// Key names a prefix: the chained hash of every block from the start of the
// prompt up to and including one block, under a Seed. Key 0 is never
// produced (it marks an empty slot in the Index).
type Key uint64

// Seed starts a key chain. It is derived from everything that must keep two
// prompts' caches apart even when their text is equal: the model, the tenant
// (or cache_salt) and the adapter.
type Seed uint64

// Odd constants for the block mixer (digits of pi and e, as hex).
const (
	c0 = 0x243f6a8885a308d3
	c1 = 0x13198a2e03707345
	c2 = 0xa4093822299f31d1
	c3 = 0x082efa98ec4e6c89
	c4 = 0x452821e638d01377
	c5 = 0xbe5466cf34e90c6d
	c6 = 0xb7e151628aed2a6b
)

// mix is the 64x64->128 multiply folded to 64 bits, the core of wyhash-style
// hashes: fast, and every input bit reaches every output bit.
func mix(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	return hi ^ lo
}

// NewSeed derives the seed of a key chain. Each part is length-framed, so
// ("ab", "c") and ("a", "bc") give different seeds.
func NewSeed(model, tenant, adapter string) Seed {
	h := uint64(c6)
	for _, s := range [3]string{model, tenant, adapter} {
		h = mix(h^c0, uint64(len(s))^c1)
		for len(s) >= 8 {
			h = mix(h^c2, binary.LittleEndian.Uint64([]byte(s[:8]))^c3)
			s = s[8:]
		}
		var tail [8]byte
		copy(tail[:], s)
		h = mix(h^c4, binary.LittleEndian.Uint64(tail[:])^c5)
	}
	if h == 0 {
		h = c0
	}
	return Seed(h)
}

// chainKey links a block's content hash to the key of the prefix before it:
// k_i = H(k_{i-1}, block_i). The content hash does not depend on the chain,
// so the processor hashes the blocks of a prompt in parallel and only this
// one multiply per block is sequential.
func chainKey(prev, a, b uint64) Key {
	k := mix(a^prev^c4, b^prev^c5)
	k ^= k >> 29
	if k == 0 {
		k = c6 // 0 is reserved for empty slots
	}
	return Key(k)
}

// hashBlockBytes is H(prev, block) for a block of len(p) bytes, len(p) a
// multiple of 32. Two independent lanes keep the multiplier busy.
func hashBlockBytes(prev uint64, p []byte) Key {
	a, b := uint64(c0), uint64(c1)
	for ; len(p) >= 32; p = p[32:] {
		a = mix(binary.LittleEndian.Uint64(p[0:8])^c2, binary.LittleEndian.Uint64(p[8:16])^a)
		b = mix(binary.LittleEndian.Uint64(p[16:24])^c3, binary.LittleEndian.Uint64(p[24:32])^b)
	}
	return chainKey(prev, a, b)
}

// hashBlockTokens is hashBlockBytes over the little-endian bytes of the
// tokens, without converting them: the same tokens give the same key on every
// machine. len(t) is a multiple of 8.
func hashBlockTokens(prev uint64, t []uint32) Key {
	a, b := uint64(c0), uint64(c1)
	for ; len(t) >= 8; t = t[8:] {
		w0 := uint64(t[0]) | uint64(t[1])<<32
		w1 := uint64(t[2]) | uint64(t[3])<<32
		w2 := uint64(t[4]) | uint64(t[5])<<32
		w3 := uint64(t[6]) | uint64(t[7])<<32
		a = mix(w0^c2, w1^a)
		b = mix(w2^c3, w3^b)
	}
	return chainKey(prev, a, b)
}
