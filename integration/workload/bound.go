package workload

// CacheBound is the best prefix-cache result any routing could achieve: a
// single backend with an infinite cache that has seen every earlier request,
// in arrival order. It is the ceiling for a measured hit rate.
type CacheBound struct {
	// BlockTokens is the cache granularity: only whole blocks hit, as in
	// vLLM's prefix cache.
	BlockTokens int
	// PromptTokens is the total prompt length.
	PromptTokens int64
	// HitTokens is the number of prompt tokens found in the cache: for each
	// request, the leading run of its blocks that earlier requests stored.
	HitTokens int64
	// UniqueBlocks is the number of distinct blocks stored: the working set
	// an infinite cache ends up holding.
	UniqueBlocks int
}

// HitRate is HitTokens / PromptTokens (0 for an empty workload).
func (b CacheBound) HitRate() float64 {
	if b.PromptTokens == 0 {
		return 0
	}
	return float64(b.HitTokens) / float64(b.PromptTokens)
}

// Token identities for the bound: template markers are constants, a content
// word is identified by (text block, index), which matches text equality up
// to negligible vocabulary collisions.
const (
	tokEnd uint64 = 0xe0d0 + iota
	tokGenPrompt
	tokRoleBase
)

// PrefixCacheBound computes the infinite-cache bound of the rendered prompts
// at blockTokens granularity over kvmesh-sim's token stream (template markers
// included), in Requests order. blockTokens <= 0 means 16, vLLM's default
// block size.
//
// A prompt whose length is a whole number of blocks, all seen before, counts
// every block as a hit here, although kvmesh-sim, like vLLM, recomputes its
// last block (a prompt computes at least one token): for workloads that
// repeat identical prompts the bound slightly overstates the ceiling, by
// one block per such request.
//
// Cost: one hash per prompt token and one map entry per distinct block; for
// the whole Mooncake trace at 16 tokens that is 145M tokens, several seconds
// and a map of 5.7M entries (a few hundred MB), so prefer a slice there. For
// the Mooncake trace at its own 512-token granularity see TraceInfo.Bound.
func (w *Workload) PrefixCacheBound(blockTokens int) CacheBound {
	if blockTokens <= 0 {
		blockTokens = 16
	}
	b := CacheBound{BlockTokens: blockTokens}
	seen := make(map[uint64]struct{})
	for i := range w.Requests {
		r := &w.Requests[i]
		b.PromptTokens += int64(r.PromptTokens)
		c := chainer{size: blockTokens, seen: seen, hitting: true}
		for m := range r.msgs {
			msg := &r.msgs[m]
			c.add(tokRoleBase + uint64(msg.role))
			for _, s := range msg.spans {
				base := fmix(s.block ^ 0x70c)
				for j := range uint64(s.words) {
					c.add(base + j)
				}
			}
			c.add(tokEnd)
		}
		c.add(tokGenPrompt)
		b.HitTokens += int64(c.hits) * int64(blockTokens)
	}
	b.UniqueBlocks = len(seen)
	return b
}

// chainer folds one request's tokens into a running hash; at every block
// boundary the hash names the whole prefix so far (a chained block key).
type chainer struct {
	size    int
	n       int
	h       uint64
	hits    int
	hitting bool
	seen    map[uint64]struct{}
}

func (c *chainer) add(tok uint64) {
	c.h = fmix(c.h ^ tok + golden)
	c.n++
	if c.n < c.size {
		return
	}
	c.n = 0
	if _, ok := c.seen[c.h]; ok {
		if c.hitting {
			c.hits++
		}
		return
	}
	c.hitting = false
	c.seen[c.h] = struct{}{}
}
