package kvevents

import (
	"encoding/binary"
	"math/bits"
)

// Kind is an event's type.
type Kind uint8

const (
	// Stored: blocks entered the engine's prefix cache (vLLM BlockStored).
	Stored Kind = iota + 1
	// Removed: blocks left it (BlockRemoved).
	Removed
	// Cleared: the whole cache was dropped (AllBlocksCleared), e.g. a reset
	// or a restart.
	Cleared
)

func (k Kind) String() string {
	switch k {
	case Stored:
		return "stored"
	case Removed:
		return "removed"
	case Cleared:
		return "cleared"
	}
	return "unknown"
}

// Medium is the cache tier an event is about. vLLM reports "GPU" (or no
// medium at all, in versions before tiers) for its own KV cache and "CPU"
// (and others) for offloaded copies; kvmesh counts them apart because only
// the GPU tier saves prefill at full speed.
type Medium uint8

const (
	MediumGPU Medium = iota
	MediumCPU
	MediumOther
)

func (m Medium) String() string {
	switch m {
	case MediumGPU:
		return "gpu"
	case MediumCPU:
		return "cpu"
	}
	return "other"
}

func mediumOf(s []byte) Medium {
	switch string(s) {
	case "GPU", "gpu", "cuda", "CUDA":
		return MediumGPU
	case "CPU", "cpu":
		return MediumCPU
	}
	return MediumOther
}

// Hash is an engine block hash folded to 64 bits. vLLM sends either an
// integer (builtin hash) or bytes (sha256, sha256_cbor); both map here
// deterministically, so the same block always gets the same Hash.
type Hash uint64

// hashBytes folds a byte-string hash to 64 bits (a wyhash-style mixer over
// 8-byte words, length-seeded). Engine hashes are already uniform, so this
// only has to be deterministic and keep distinct inputs apart.
func hashBytes(p []byte) Hash {
	h := uint64(len(p))*0x9e3779b97f4a7c15 ^ 0xa0761d6478bd642f
	for ; len(p) >= 8; p = p[8:] {
		h = fold(h^binary.LittleEndian.Uint64(p), 0xe7037ed1a0b428db)
	}
	if len(p) > 0 {
		var t [8]byte
		copy(t[:], p)
		h = fold(h^binary.LittleEndian.Uint64(t[:]), 0x8ebc6af09c88c6e3)
	}
	return Hash(fold(h, 0x589965cc75374cc3))
}

func fold(a, b uint64) uint64 {
	// 64x64 -> 128 multiply, folded.
	hi, lo := bits.Mul64(a, b)
	return hi ^ lo
}

// ExtraKey is one element of a block's extra keys (the inputs besides the
// tokens that vLLM hashes into a block: LoRA name, cache_salt on the first
// block, multimodal hashes, prompt-embedding hashes). Only strings can be
// reproduced by the router (LoRA name, cache_salt); anything else marks the
// block unmatchable.
type ExtraKey struct {
	Str   string
	IsStr bool
}

// Event is one decoded KV-cache event. Slices are reused by the Decoder:
// they are valid until the next Decode into the same Batch.
type Event struct {
	Kind Kind
	// Hashes are the blocks' engine hashes, in chain order for Stored.
	Hashes []Hash
	// Parent is the hash of the block before Hashes[0] (HasParent false for
	// a chain that starts at the beginning of a prompt).
	Parent    Hash
	HasParent bool
	// Tokens are the token ids of all the stored blocks, BlockSize each.
	Tokens    []uint32
	BlockSize int
	// LoraID is vLLM's deprecated adapter id (-1 when absent); LoraName the
	// adapter name ("" for the base model).
	LoraID   int64
	LoraName string
	Medium   Medium
	// Extra holds the extra keys per block: ExtraOff[i]..ExtraOff[i+1] index
	// Extra for block i. ExtraOff is empty when the event had none.
	ExtraOff []int32
	Extra    []ExtraKey
	// Group is the KV-cache group (hybrid models have several; -1 when
	// absent, which means the only one).
	Group int
}

// BlockExtra returns block i's extra keys (nil if none).
func (e *Event) BlockExtra(i int) []ExtraKey {
	if i+1 >= len(e.ExtraOff) {
		return nil
	}
	return e.Extra[e.ExtraOff[i]:e.ExtraOff[i+1]]
}

func (e *Event) reset() {
	e.Kind = 0
	e.Hashes = e.Hashes[:0]
	e.Parent, e.HasParent = 0, false
	e.Tokens = e.Tokens[:0]
	e.BlockSize = 0
	e.LoraID, e.LoraName = -1, ""
	e.Medium = MediumGPU
	e.ExtraOff = e.ExtraOff[:0]
	e.Extra = e.Extra[:0]
	e.Group = -1
}

// Batch is one published message: vLLM's EventBatch [ts, events, dp_rank?].
type Batch struct {
	// TS is the engine's timestamp (seconds since the epoch, float).
	TS float64
	// DPRank is the data-parallel rank that published it (-1 when absent).
	DPRank int
	Events []Event
	// Skipped counts events of an unknown type or with inconsistent fields
	// that were dropped while the rest of the batch was kept.
	Skipped int
}
