package tree

// Chain is one prompt's block keys and the depths at which it leaves claims.
// A Chain is meant to be reused across requests: Keyer fills it in place and
// allocates only when a prompt is longer than any before it.
type Chain struct {
	// Keys[i] names the prefix made of blocks 0..i (depth i+1 blocks).
	Keys []Key
	// Learn holds, ascending and without duplicates, the depths in blocks at
	// which this prompt leaves claims: every message end aligned down to a
	// block, every checkpoint, and the last full block.
	Learn []int32
	// UnitsPerBlock is the block size in this chain's units: tokens in token
	// mode, bytes in byte mode.
	UnitsPerBlock int
	// Units is the prompt's length in units, including a trailing partial
	// block that has no key. A caller that keyed only a prefix of the prompt
	// may count the rest too (the router's precise mode, for a turn keyed by
	// its previous turn's tokens): the keys then end before Units does.
	Units int
}

// Blocks is the number of full blocks, that is len(Keys).
func (c *Chain) Blocks() int { return len(c.Keys) }

// UnitsAt converts a depth in blocks to units.
func (c *Chain) UnitsAt(blocks int) int { return blocks * c.UnitsPerBlock }

// NextLearn is the first depth in Learn deeper than depth (in blocks), or
// Blocks() when there is none: the next place a claim of this prompt can
// sit. What lies between a claim and it is unknown to every claim: a
// backend holding the shallower claim may hold part of it too (an engine
// caches every full block, a claim sits only at a learn depth).
func (c *Chain) NextLearn(depth int32) int32 {
	lo, hi := 0, len(c.Learn)
	for lo < hi { // the first index whose depth exceeds depth
		m := int(uint(lo+hi) >> 1)
		if c.Learn[m] > depth {
			hi = m
		} else {
			lo = m + 1
		}
	}
	if lo < len(c.Learn) {
		return c.Learn[lo]
	}
	return int32(len(c.Keys))
}

// Reset empties the chain and keeps its buffers.
func (c *Chain) Reset() {
	c.Keys = c.Keys[:0]
	c.Learn = c.Learn[:0]
	c.Units = 0
}

// Keyer turns prompts into Chains. It is a small value; copy it freely.
type Keyer struct {
	blockTokens      int
	checkpointBlocks int
}

// NewKeyer returns the Keyer for a configuration. cfg must be valid.
func NewKeyer(cfg Config) Keyer {
	k := Keyer{blockTokens: cfg.BlockTokens}
	if cfg.CheckpointTokens > 0 {
		k.checkpointBlocks = cfg.CheckpointTokens / cfg.BlockTokens
	}
	return k
}

// BlockTokens is the block size in tokens (the block is BytesPerToken times
// as many bytes in byte mode).
func (k Keyer) BlockTokens() int { return k.blockTokens }

// CheckpointBlocks is the checkpoint interval in blocks (0: none): every
// chain learns at its multiples, and Index.Lookup relies on a claim coming
// with the checkpoint claims below it.
func (k Keyer) CheckpointBlocks() int { return k.checkpointBlocks }

// Bytes fills dst with the chain of a prompt given as the bytes of its
// canonical rendering. ends are the byte offsets where messages end; values
// outside (0, len(units)] are ignored.
func (k Keyer) Bytes(dst *Chain, seed Seed, units []byte, ends []int) {
	bs := k.blockTokens * BytesPerToken
	n := len(units) / bs
	dst.Reset()
	dst.UnitsPerBlock = bs
	dst.Units = len(units)
	dst.Keys = grow(dst.Keys, n)
	prev := uint64(seed)
	for i := 0; i < n; i++ {
		key := hashBlockBytes(prev, units[i*bs:(i+1)*bs])
		dst.Keys[i] = key
		prev = uint64(key)
	}
	k.positions(dst, ends)
}

// Tokens fills dst with the chain of a prompt given as token ids. ends are
// the token offsets where messages end.
func (k Keyer) Tokens(dst *Chain, seed Seed, tokens []uint32, ends []int) {
	bs := k.blockTokens
	n := len(tokens) / bs
	dst.Reset()
	dst.UnitsPerBlock = bs
	dst.Units = len(tokens)
	dst.Keys = grow(dst.Keys, n)
	prev := uint64(seed)
	for i := 0; i < n; i++ {
		key := hashBlockTokens(prev, tokens[i*bs:(i+1)*bs])
		dst.Keys[i] = key
		prev = uint64(key)
	}
	k.positions(dst, ends)
}

func grow(keys []Key, n int) []Key {
	if cap(keys) < n {
		return make([]Key, n, n+n/4)
	}
	return keys[:n]
}

// positions fills dst.Learn: message ends aligned down to a block,
// checkpoints at absolute multiples of the checkpoint interval (so prompts
// sharing a long document share them), and the last full block. Depths that
// align to the same block appear once.
func (k Keyer) positions(dst *Chain, ends []int) {
	n := len(dst.Keys)
	if n == 0 {
		return
	}
	learn := dst.Learn[:0]
	for _, e := range ends {
		if e <= 0 || e > dst.Units {
			continue
		}
		if d := e / dst.UnitsPerBlock; d > 0 {
			learn = append(learn, int32(d))
		}
	}
	if cp := k.checkpointBlocks; cp > 0 {
		for d := cp; d <= n; d += cp {
			learn = append(learn, int32(d))
		}
	}
	learn = append(learn, int32(n))
	// Insertion sort: the input is two ascending runs, so this is near linear.
	for i := 1; i < len(learn); i++ {
		v := learn[i]
		j := i
		for j > 0 && learn[j-1] > v {
			learn[j] = learn[j-1]
			j--
		}
		learn[j] = v
	}
	out := learn[:1]
	for _, d := range learn[1:] {
		if d != out[len(out)-1] {
			out = append(out, d)
		}
	}
	dst.Learn = out
}
