package sim

import (
	"unicode"
	"unicode/utf8"
)

// The sim's tokenizer. The rule is documented in doc.go and relied on by the
// workload generators; change it only together with them.

const (
	fnvOffset32 = 2166136261
	fnvPrime32  = 16777619

	// imageTokens is how many tokens one image_url content part becomes.
	imageTokens = 16

	// VocabSize bounds the ids: a word's FNV-1a hash is reduced modulo
	// it. A real engine's ids are below its vocabulary's size (Qwen2's
	// 151,936 here; Llama 3's is 128,256), five or six digits in a
	// /tokenize answer. Unreduced 32-bit hashes have ten: an answer had 1.7
	// times a real engine's bytes, and its encoding and parsing ran on the
	// cores the benchmark's routers share with the sims.
	VocabSize = 151936
)

// Special tokens of the chat template.
var (
	tokEnd       = TokenID("<|end|>")
	tokAssistant = TokenID("<|assistant|>")
)

// TokenID returns the token id of one word: its 32-bit FNV-1a hash modulo
// VocabSize.
func TokenID(word string) uint32 {
	h := uint32(fnvOffset32)
	for i := 0; i < len(word); i++ {
		h ^= uint32(word[i])
		h *= fnvPrime32
	}
	return h % VocabSize
}

// asciiSpace marks the ASCII bytes unicode.IsSpace accepts.
var asciiSpace = [utf8.RuneSelf]bool{'\t': true, '\n': true, '\v': true, '\f': true, '\r': true, ' ': true}

// appendWords appends the token ids of the whitespace-separated words of s
// (exactly the words strings.Fields would return) to dst.
func appendWords(dst []uint32, s []byte) []uint32 {
	i := 0
	for i < len(s) {
		// Skip whitespace.
		for i < len(s) {
			c := s[i]
			if c < utf8.RuneSelf {
				if !asciiSpace[c] {
					break
				}
				i++
				continue
			}
			r, w := utf8.DecodeRune(s[i:])
			if !unicode.IsSpace(r) {
				break
			}
			i += w
		}
		if i >= len(s) {
			break
		}
		// Hash the word's bytes up to the next whitespace.
		h := uint32(fnvOffset32)
		for i < len(s) {
			c := s[i]
			if c < utf8.RuneSelf {
				if asciiSpace[c] {
					break
				}
				h ^= uint32(c)
				h *= fnvPrime32
				i++
				continue
			}
			r, w := utf8.DecodeRune(s[i:])
			if unicode.IsSpace(r) {
				break
			}
			for k := 0; k < w; k++ {
				h ^= uint32(s[i+k])
				h *= fnvPrime32
			}
			i += w
		}
		dst = append(dst, h%VocabSize)
	}
	return dst
}

// roleToken returns the id of the word "<|" + lowercase(role) + "|>", where
// only ASCII letters are lowercased.
func roleToken(role []byte) uint32 {
	h := uint32(fnvOffset32)
	add := func(c byte) {
		h ^= uint32(c)
		h *= fnvPrime32
	}
	add('<')
	add('|')
	for _, c := range role {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		add(c)
	}
	add('|')
	add('>')
	return h % VocabSize
}

// appendImage appends the imageTokens ids standing for an image: token k is
// the FNV-1a hash of the URL's bytes followed by the single byte k, modulo
// VocabSize.
func appendImage(dst []uint32, url []byte) []uint32 {
	h := uint32(fnvOffset32)
	for _, c := range url {
		h ^= uint32(c)
		h *= fnvPrime32
	}
	for k := 0; k < imageTokens; k++ {
		dst = append(dst, (h^uint32(k))*fnvPrime32%VocabSize)
	}
	return dst
}

// Block keys. A block's key names its whole prefix: key_i = H(key_{i-1},
// tokens of block i), with key_{-1} the seed of (model, cache_salt). Only the
// sim uses these keys, so the hash is ours (a 64-bit multiply-xorshift chain
// finished with the murmur3 mixer), not vLLM's.

const (
	mulA = 0x9e3779b97f4a7c15
	mulB = 0xff51afd7ed558ccd
)

// fmix64 is murmur3's 64-bit finaliser: a bijective avalanche mixer.
func fmix64(h uint64) uint64 {
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	return h
}

// seedState is the running state of a seed hash (64-bit FNV-1a).
type seedState uint64

func newSeedState() seedState { return 14695981039346656037 }

func (s seedState) add(b []byte) seedState {
	h := uint64(s)
	for _, c := range b {
		h ^= uint64(c)
		h *= 1099511628211
	}
	return seedState(h)
}

func (s seedState) addString(str string) seedState {
	h := uint64(s)
	for i := 0; i < len(str); i++ {
		h ^= uint64(str[i])
		h *= 1099511628211
	}
	return seedState(h)
}

// modelSeedState is the seed state of a model without a salt.
func modelSeedState(model string) seedState {
	return newSeedState().addString("kvmesh-sim\x00model\x00").addString(model)
}

// finishSeed returns the root key for a model state and an optional salt.
func finishSeed(model seedState, salt []byte, hasSalt bool) uint64 {
	if hasSalt {
		model = model.addString("\x00cache_salt\x00").add(salt)
	}
	return fmix64(uint64(model))
}

// chainKey returns the key of a block given its parent's key.
func chainKey(parent uint64, toks []uint32) uint64 {
	h := parent ^ mulA
	for _, t := range toks {
		h = (h ^ uint64(t)) * mulB
		h ^= h >> 29
	}
	return fmix64(h ^ uint64(len(toks)))
}

// appendBlockKeys appends the chained keys of every full block of toks.
func appendBlockKeys(dst []uint64, seed uint64, toks []uint32, blockSize int) []uint64 {
	parent := seed
	for i := 0; i+blockSize <= len(toks); i += blockSize {
		parent = chainKey(parent, toks[i:i+blockSize])
		dst = append(dst, parent)
	}
	return dst
}
