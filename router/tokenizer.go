package router

import (
	"encoding/binary"
	"fmt"
)

// Tokenizer turns a canonical rendering into token ids, mapping message ends to token offsets.
//
// Tokenize appends to dstTokens[:0] and dstEnds[:0] (so pooled buffers are
// reused) and returns them: dstEnds[i] is the number of tokens that cover
// units[:ends[i]]. A tokenizer must keep the prefix property of the
// rendering: the tokens of units[:ends[i]] are a prefix of the tokens of
// units, so a boundary never falls inside a token.
//
// The default is none: the router hashes the rendering's bytes (byte mode).
// A Prompt in FormatTokens already holds ids; read them with DecodeTokenIDs
// instead of tokenizing.
type Tokenizer interface {
	Tokenize(model string, units []byte, ends []int, dstTokens []uint32, dstEnds []int) ([]uint32, []int, error)
}

// WordTokenizer is a simple Tokenizer for tests and a template for real
// ones. It is NOT model-accurate: its token counts and boundaries have
// nothing to do with any model's vocabulary, so block sizes measured in its
// tokens do not line up with a backend's KV-cache blocks.
//
// A token is a maximal run of bytes other than ASCII whitespace and the
// rendering's marker bytes (0x1B..0x1F); each marker byte is a token of its
// own (ids 1..5), and whitespace produces none. A message end always ends a
// word. Word ids are a 64-bit hash of the word, seeded with Seed, folded
// into [16, 2^32).
type WordTokenizer struct {
	Seed uint64 // change it to get a different, equally arbitrary vocabulary
}

// reservedTokenIDs are kept out of word ids (0 unused, 1..5 markers).
const reservedTokenIDs = 16

// Tokenize implements Tokenizer; model is ignored.
func (w WordTokenizer) Tokenize(model string, units []byte, ends []int, dstTokens []uint32, dstEnds []int) ([]uint32, []int, error) {
	dstTokens, dstEnds = dstTokens[:0], dstEnds[:0]
	prev := 0
	for i, e := range ends {
		if e < prev || e > len(units) {
			return dstTokens, dstEnds, fmt.Errorf("tokenizer: ends[%d]=%d is out of order or past %d units", i, e, len(units))
		}
		dstTokens = w.appendWords(dstTokens, units[prev:e])
		dstEnds = append(dstEnds, len(dstTokens))
		prev = e
	}
	return w.appendWords(dstTokens, units[prev:]), dstEnds, nil
}

func (w WordTokenizer) appendWords(dst []uint32, b []byte) []uint32 {
	start := -1
	for i, c := range b {
		space := c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'
		if !space && !isMarker(c) {
			if start < 0 {
				start = i
			}
			continue
		}
		if start >= 0 {
			dst = append(dst, w.wordID(b[start:i]))
			start = -1
		}
		if isMarker(c) {
			dst = append(dst, uint32(c-markEsc)+1)
		}
	}
	if start >= 0 {
		dst = append(dst, w.wordID(b[start:]))
	}
	return dst
}

func (w WordTokenizer) wordID(word []byte) uint32 {
	return reservedTokenIDs + uint32(hash64(word, w.Seed)%(1<<32-reservedTokenIDs))
}

// DecodeTokenIDs appends the ids of a FormatTokens rendering (4-byte
// little-endian words) to dst[:0]. A trailing partial word is ignored.
func DecodeTokenIDs(units []byte, dst []uint32) []uint32 {
	dst = dst[:0]
	for ; len(units) >= 4; units = units[4:] {
		dst = append(dst, binary.LittleEndian.Uint32(units))
	}
	return dst
}
