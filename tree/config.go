package tree

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
)

// Config sets how prompts become keys and how much the Index holds.
//
// Every node of a mesh must use the same BlockTokens, CheckpointTokens and
// Capacity: keys and eviction must agree across replicas. The first two
// make the KeyScheme, which nodes announce: members of another scheme do
// not share claims (package mesh). Nodes announce Capacity too: one of
// another capacity stays a peer, with a warning.
type Config struct {
	// BlockTokens is the number of tokens in one block. 16 is vLLM's default
	// KV block size, so a claim never points inside a block the backend could
	// not reuse. In byte mode (no tokenizer) a block is BytesPerToken *
	// BlockTokens bytes (64 by default): about as much English text as 16
	// tokens. Must be a positive multiple of 8 so a block is whole 32-byte
	// hash chunks.
	BlockTokens int

	// CheckpointTokens is the distance between checkpoints, claims learned at
	// absolute positions inside long messages so that two prompts sharing a
	// long document share claims even when their message ends differ. 512
	// costs about one extra claim per 512 tokens (the granularity of the
	// Mooncake trace's prefix blocks). A multiple of BlockTokens; 0 disables
	// checkpoints.
	CheckpointTokens int

	// Capacity is the most claims the Index holds. 1,000,000 claims take
	// about 64 MiB (the table grows to that as claims arrive) and cover
	// ~40,000 typical requests (25 claims each), more than a fleet's KV
	// caches can hold. All replicas should use the same
	// capacity: eviction raises a floor shared by every replica.
	Capacity int

	// MaxBackends bounds the backend registry (and the width of lookup
	// results). 4,096 is far above any single model's replica count and keeps
	// the registry a small array. Removed backends hold their names until
	// ForgetRemovedMillis has passed, so what counts is the backends listed
	// plus those removed within that time.
	MaxBackends int

	// ForgetRemovedMillis is how long after its removal (by the removal's
	// timestamp) a removed backend's id is freed for a new name, by
	// ForgetRemoved (forget.go). Until then its entry must win over late
	// copies that still say active; past it no claim of it is alive (the
	// replicas cap a claim's life at their MaxTTL, 10 minutes, which
	// package mesh requires this to exceed) and a node that missed the
	// removal for this long was partitioned away for hours. 6 hours: a
	// Deployment of 300 replicas rolled every hour holds ~2,100 names at
	// most; without it (0, never) every rollout's pod names stay for good
	// and the registry fills.
	ForgetRemovedMillis int64

	// MaxForgotten is how many forgotten names are kept (without an id) so
	// late copies of their entries are refused and a name listed again
	// goes on from its generation. 65,536 (a few MB at most): years of
	// rollouts; past it the oldest half is dropped.
	MaxForgotten int

	// EvictFraction is the share of Capacity freed at once when the Index is
	// full. An eviction round walks the whole table about three times
	// (~20 ms at the default capacity); 1/16 spreads that over ~62,000
	// inserts (well under a microsecond each) while keeping 94% of the
	// capacity in use.
	EvictFraction float64

	// RefreshFraction: learning a claim that exists already is a refresh, and
	// a refresh changes the claim (and so gets replicated) only when it would
	// push the expiry out by more than this fraction of the TTL. 0.25 means a
	// prefix used a thousand times a second is re-sent at most every quarter
	// TTL, and a claim never lives less than 3/4 of a TTL after its last use.
	RefreshFraction float64
	// RefreshMaxMillis caps that slack in milliseconds: a claim's timestamp
	// is never more than this older than its last use. The timestamp says
	// when the backend last saw the prefix, which a reader that models the
	// backend's cache as an LRU (how much was sent there since) depends on;
	// with a 10-minute TTL the fraction alone would let it lag 150 s behind,
	// longer than a busy engine keeps a prefix. 2000 (2 s): a prefix in
	// constant use is re-sent every 2 s, a few claims a second mesh-wide.
	// 0: no cap.
	RefreshMaxMillis int64

	// SweepPerWrite is how many slots each write examines to reclaim expired,
	// evicted or invalidated claims in the background. 4 reclaims the whole
	// table once every ~500,000 writes at the default capacity at a cost of a
	// few nanoseconds per write.
	SweepPerWrite int
}

// BytesPerToken is how many bytes of rendered text count as one token in byte
// mode. Four bytes per token is the usual figure for English with BPE
// tokenizers.
const BytesPerToken = 4

// DefaultConfig returns the defaults described on each Config field.
func DefaultConfig() Config {
	return Config{
		BlockTokens:         16,
		CheckpointTokens:    512,
		Capacity:            1_000_000,
		MaxBackends:         4096,
		ForgetRemovedMillis: 6 * 3600 * 1000,
		MaxForgotten:        65536,
		EvictFraction:       1.0 / 16,
		RefreshFraction:     0.25,
		RefreshMaxMillis:    2000,
		SweepPerWrite:       4,
	}
}

// Validate reports the first setting that cannot work, with the reason.
func (c Config) Validate() error {
	switch {
	case c.BlockTokens <= 0 || c.BlockTokens%8 != 0:
		return fmt.Errorf("tree: BlockTokens must be a positive multiple of 8, got %d", c.BlockTokens)
	case c.BlockTokens > 4096:
		return fmt.Errorf("tree: BlockTokens %d is above the limit of 4096", c.BlockTokens)
	case c.CheckpointTokens < 0 || (c.CheckpointTokens > 0 && c.CheckpointTokens%c.BlockTokens != 0):
		return fmt.Errorf("tree: CheckpointTokens must be 0 or a multiple of BlockTokens (%d), got %d", c.BlockTokens, c.CheckpointTokens)
	case c.Capacity < 16:
		return fmt.Errorf("tree: Capacity must be at least 16 claims, got %d", c.Capacity)
	case c.Capacity > 1<<30:
		return fmt.Errorf("tree: Capacity %d is above the limit of 2^30 claims", c.Capacity)
	case c.MaxBackends < 1 || c.MaxBackends > math.MaxUint16:
		return fmt.Errorf("tree: MaxBackends must be in [1, 65535], got %d", c.MaxBackends)
	case c.ForgetRemovedMillis < 0:
		return fmt.Errorf("tree: ForgetRemovedMillis must not be negative (0: never), got %d", c.ForgetRemovedMillis)
	case c.MaxForgotten < 0:
		return fmt.Errorf("tree: MaxForgotten must not be negative, got %d", c.MaxForgotten)
	case !(c.EvictFraction > 0 && c.EvictFraction <= 0.5):
		return fmt.Errorf("tree: EvictFraction must be in (0, 0.5], got %v", c.EvictFraction)
	case !(c.RefreshFraction >= 0 && c.RefreshFraction < 1):
		return fmt.Errorf("tree: RefreshFraction must be in [0, 1), got %v", c.RefreshFraction)
	case c.RefreshMaxMillis < 0:
		return fmt.Errorf("tree: RefreshMaxMillis must not be negative, got %d", c.RefreshMaxMillis)
	case c.SweepPerWrite < 0:
		return errors.New("tree: SweepPerWrite must not be negative")
	}
	return nil
}

// tableSize is the number of slots for a capacity: the next power of two at
// or above twice the capacity, so the table is never more than half full and
// linear probes stay short.
func tableSize(capacity int) int {
	return 1 << bits.Len(uint(2*capacity-1))
}
