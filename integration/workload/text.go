package workload

import "sync"

// Deterministic synthetic text.
//
// A text block id names an endless stream of pseudo-words; AppendWords(dst,
// id, n) renders its first n words. The stream is drawn from a fixed
// vocabulary with a splitmix64 generator seeded by the id, four 16-bit word
// indices per 64-bit draw, so:
//   - the same id always gives the same words, on every machine and Go release;
//   - the first n words of a block are a prefix of its first m > n words;
//   - different ids give different text with overwhelming probability (two
//     blocks start with the same word with probability ~1/vocabSize).
//
// Words are 2-9 lowercase ASCII letters; with the separating space they
// average ~5.7 bytes, close to the ~4-6 bytes per token of real English BPE
// text, so byte-based routing (character radix trees, prefix hashing over
// bytes) sees realistic sizes. Words never contain "<|", so they can never be
// mistaken for chat-template markers.

const (
	vocabBits = 16
	vocabSize = 1 << vocabBits
	// maxWordBytes is the longest word plus its trailing space.
	maxWordBytes = 10
)

// vword is one vocabulary slot: the word followed by a space in the first
// bytes, zero padding, and the word's length including the space in the last
// byte. Rendering copies whole 16-byte slots (two register moves) and then
// advances by the length, which is much cheaper than a variable-length copy.
type vword [vwordSize]byte

const vwordSize = 16

func (w *vword) len() int { return int(w[vwordSize-1]) }

// wordLengthWeights[i] is the relative frequency of words of i+2 letters. The
// mean is 4.68 letters (5.68 bytes with the space), the shape roughly that of
// English word lengths, cut to 2-9 letters.
var wordLengthWeights = [8]int{12, 20, 20, 17, 12, 9, 6, 4}

// vocabSeed fixes the vocabulary forever; changing it changes every workload.
const vocabSeed = 0x6b766d657368 // "kvmesh"

var vocabulary = sync.OnceValue(buildVocabulary)

func buildVocabulary() *[vocabSize]vword {
	var v [vocabSize]vword
	r := newRNG(vocabSeed)
	total := 0
	for _, w := range wordLengthWeights {
		total += w
	}
	for i := range v {
		pick := r.IntN(total)
		letters := 2
		for _, w := range wordLengthWeights {
			if pick < w {
				break
			}
			pick -= w
			letters++
		}
		for j := range letters {
			v[i][j] = byte('a' + r.IntN(26))
		}
		v[i][letters] = ' '
		v[i][vwordSize-1] = byte(letters + 1)
	}
	return &v
}

// blockState seeds the word stream of a block id.
func blockState(id uint64) uint64 { return mix(id, 0xb10c) }

// appendWordsSpaced appends the first n words of block id, each followed by
// one space. It may write scratch bytes into dst's spare capacity beyond the
// returned length.
func appendWordsSpaced(dst []byte, id uint64, n int) []byte {
	if n <= 0 {
		return dst
	}
	v := vocabulary()
	s := blockState(id)
	for ; n > 0; n -= 4 {
		s += golden
		x := fmix(s)
		k := min(n, 4)
		l := len(dst)
		if cap(dst)-l < 4*vwordSize {
			// Slow path near the end of capacity: exact appends.
			for range k {
				w := &v[x&0xffff]
				dst = append(dst, w[:w.len()]...)
				x >>= 16
			}
			continue
		}
		buf := dst[l : l+4*vwordSize]
		p := 0
		for range k {
			w := &v[x&0xffff]
			*(*vword)(buf[p : p+vwordSize]) = *w
			p += w.len()
			x >>= 16
		}
		dst = dst[:l+p]
	}
	return dst
}

// spacedLen returns len(appendWordsSpaced(nil, id, n)) without rendering.
func spacedLen(id uint64, n int) int {
	if n <= 0 {
		return 0
	}
	v := vocabulary()
	s := blockState(id)
	total := 0
	for ; n > 0; n -= 4 {
		s += golden
		x := fmix(s)
		for range min(n, 4) {
			total += v[x&0xffff].len()
			x >>= 16
		}
	}
	return total
}

// AppendWords appends the first n words of text block id to dst, separated by
// single spaces, with no leading or trailing space, and returns the extended
// slice. It allocates only when dst lacks capacity (about 5.7*n bytes).
func AppendWords(dst []byte, id uint64, n int) []byte {
	if n <= 0 {
		return dst
	}
	dst = appendWordsSpaced(dst, id, n)
	return dst[:len(dst)-1]
}

// Words returns the first n words of text block id as a string (see
// AppendWords). Convenient for tests and tools; hot paths use AppendWords.
func Words(id uint64, n int) string {
	return string(AppendWords(make([]byte, 0, n*maxWordBytes), id, n))
}
