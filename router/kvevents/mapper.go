package kvevents

import (
	"github.com/kvmesh/kvmesh/tree"
)

// Seed is the key-chain seed of precise mode. An engine keeps caches apart
// by model (a LoRA adapter is its own model name in the OpenAI API) and
// cache_salt only, so these are all the seed holds: the router keys a
// request by Seed(request model, cache_salt) and the events of a block by
// Seed(adapter name or the stream's base model, salt from the block's extra
// keys). The fixed prefix keeps precise seeds apart from approximate ones.
func Seed(model, cacheSalt string) tree.Seed {
	return tree.NewSeed(model, "kvmesh-precise\x00"+cacheSalt, "")
}

// MapperConfig sets how one engine's blocks become kvmesh keys.
type MapperConfig struct {
	// BlockTokens is kvmesh's block size (tree.Config.BlockTokens). An
	// engine block must be a whole number of them; it maps to the key of its
	// last one, since the engine reuses only whole blocks.
	BlockTokens int
	// MaxBlocks bounds the engine hash -> key map (about 48 bytes each).
	MaxBlocks int
	// Model is the model name of blocks stored without a LoRA adapter: the
	// name requests use for the engine's base model.
	Model string
}

// MapperStats counts what the mapper did, by outcome.
type MapperStats struct {
	// Blocks reported stored and removed, per tier (Other: any tier but
	// GPU and CPU). Only GPU blocks make claims.
	StoredGPU, StoredCPU, StoredOther    uint64
	RemovedGPU, RemovedCPU, RemovedOther uint64

	Claimed        uint64 // blocks that became claims
	Ended          uint64 // claims ended by removals
	UnknownParent  uint64 // stored blocks whose parent was never seen (joined mid-stream)
	UnknownRemoved uint64 // removals of blocks never seen
	Unmatchable    uint64 // blocks with extra keys the router cannot reproduce (multimodal, embeddings)
	BadBlockSize   uint64 // blocks whose size is not a multiple of BlockTokens
	OtherGroup     uint64 // blocks of a secondary KV-cache group (hybrid models)
	Full           uint64 // blocks not mapped because MaxBlocks was reached
	Clears         uint64 // AllBlocksCleared events
}

// Ops is what events ask of the claim state. Keys alias the Mapper's
// buffers until its next call.
type Ops struct {
	Store []tree.Key // claim these for the backend
	End   []tree.Key // end these claims
	Clear bool       // the engine dropped its whole cache: invalidate the backend
}

// Reset empties ops, keeping its buffers.
func (o *Ops) Reset() { o.Store, o.End, o.Clear = o.Store[:0], o.End[:0], false }

// Mapper turns one engine's events into kvmesh claims: it derives each
// stored block's chained key from its parent's key and its tokens, and
// remembers engine hash -> key (and when the claim's lease ends) for the
// blocks the engine holds, so removals can end them and live claims can be
// renewed. Pure; not safe for concurrent use.
type Mapper struct {
	cfg   MapperConfig
	m     map[Hash]entry
	Stats MapperStats
}

type entry struct {
	key tree.Key
	exp int64 // lease end of the claim as last announced (Unix ms)
}

// NewMapper returns an empty Mapper. cfg.BlockTokens must be a positive
// multiple of 8 (tree's rule).
func NewMapper(cfg MapperConfig) *Mapper {
	return &Mapper{cfg: cfg, m: make(map[Hash]entry)}
}

// Len is the number of engine blocks mapped.
func (mp *Mapper) Len() int { return len(mp.m) }

// Forget drops every mapping (after a gap that could not be repaired, or a
// new stream): the claims themselves are invalidated by the caller.
func (mp *Mapper) Forget() { clear(mp.m) }

// Apply adds what event e asks to ops. Claims made now get a lease ending
// at leaseEnd (Unix ms), recorded for Due.
func (mp *Mapper) Apply(e *Event, leaseEnd int64, ops *Ops) {
	switch e.Kind {
	case Cleared:
		mp.Stats.Clears++
		clear(mp.m)
		ops.Clear = true
		ops.Store, ops.End = ops.Store[:0], ops.End[:0] // a clear supersedes what came before in the batch
	case Removed:
		mp.removed(e, ops)
	case Stored:
		mp.stored(e, leaseEnd, ops)
	}
}

func (mp *Mapper) removed(e *Event, ops *Ops) {
	n := uint64(len(e.Hashes))
	switch e.Medium {
	case MediumCPU:
		mp.Stats.RemovedCPU += n
		return
	case MediumGPU:
		mp.Stats.RemovedGPU += n
	default:
		mp.Stats.RemovedOther += n
		return
	}
	if e.Group > 0 {
		return
	}
	for _, h := range e.Hashes {
		en, ok := mp.m[h]
		if !ok {
			mp.Stats.UnknownRemoved++
			continue
		}
		delete(mp.m, h)
		ops.End = append(ops.End, en.key)
		mp.Stats.Ended++
	}
}

func (mp *Mapper) stored(e *Event, leaseEnd int64, ops *Ops) {
	n := len(e.Hashes)
	switch e.Medium {
	case MediumCPU:
		mp.Stats.StoredCPU += uint64(n)
		return
	case MediumGPU:
		mp.Stats.StoredGPU += uint64(n)
	default:
		mp.Stats.StoredOther += uint64(n)
		return
	}
	bt := mp.cfg.BlockTokens
	switch {
	case e.Group > 0:
		mp.Stats.OtherGroup += uint64(n)
		return
	case bt <= 0 || e.BlockSize%bt != 0:
		mp.Stats.BadBlockSize += uint64(n)
		return
	}
	model := mp.cfg.Model
	if e.LoraName != "" {
		model = e.LoraName
	}
	var prev uint64
	if e.HasParent {
		en, ok := mp.m[e.Parent]
		if !ok {
			mp.Stats.UnknownParent += uint64(n)
			return
		}
		prev = uint64(en.key)
	} else {
		salt, ok := rootSalt(e.BlockExtra(0), e.LoraName)
		if !ok {
			mp.Stats.Unmatchable += uint64(n)
			return
		}
		prev = uint64(Seed(model, salt))
	}
	for i, h := range e.Hashes {
		if i > 0 || e.HasParent {
			if !plainExtra(e.BlockExtra(i), e.LoraName) {
				mp.Stats.Unmatchable += uint64(n - i)
				return
			}
		}
		toks := e.Tokens[i*e.BlockSize : (i+1)*e.BlockSize]
		for j := 0; j < len(toks); j += bt {
			prev = uint64(tree.ChainTokens(prev, toks[j:j+bt]))
		}
		key := tree.Key(prev)
		if len(mp.m) >= mp.cfg.MaxBlocks { // (looked up only then: the map is large, a lookup a cache miss)
			if _, ok := mp.m[h]; !ok {
				mp.Stats.Full += uint64(n - i)
				return
			}
		}
		mp.m[h] = entry{key: key, exp: leaseEnd}
		ops.Store = append(ops.Store, key)
		mp.Stats.Claimed++
	}
}

// rootSalt reads the first block's extra keys: the LoRA name (already in
// the seed) and at most one more string, the cache_salt. Anything else
// (multimodal or embedding hashes) cannot be reproduced by the router.
func rootSalt(ks []ExtraKey, lora string) (string, bool) {
	salt, n := "", 0
	for _, k := range ks {
		switch {
		case !k.IsStr:
			return "", false
		case lora != "" && k.Str == lora:
		default:
			salt = k.Str
			n++
		}
	}
	return salt, n <= 1
}

// plainExtra reports whether a later block's extra keys hold nothing but
// the LoRA name.
func plainExtra(ks []ExtraKey, lora string) bool {
	for _, k := range ks {
		if !k.IsStr || k.Str != lora || lora == "" {
			return false
		}
	}
	return true
}

// Due appends to dst the keys of mapped blocks whose lease ends before
// now+within and records their new lease end; the caller re-announces them
// (renewal keeps a block that stays cached for hours claimed, since the
// engine reports a block only when it is stored).
func (mp *Mapper) Due(now, within, leaseEnd int64, dst []tree.Key) []tree.Key {
	for h, en := range mp.m {
		if en.exp < now+within {
			en.exp = leaseEnd
			mp.m[h] = en
			dst = append(dst, en.key)
		}
	}
	return dst
}

// All appends every mapped key to dst (for re-announcing after a takeover).
func (mp *Mapper) All(dst []tree.Key) []tree.Key {
	for _, en := range mp.m {
		dst = append(dst, en.key)
	}
	return dst
}
