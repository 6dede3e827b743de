package sim

import (
	"bytes"
	"hash/maphash"
	"sync"
	"sync/atomic"
)

// wordMemo remembers the token ids of long texts the tokenizer has read
// lately, so that the same text read again costs a hash and a compare
// instead of a word-by-word pass.
//
// Why: a real engine tokenizes on its own host. In the benchmark the
// simulated engines share the router's cores, and the same prompt is read
// two to four times within milliseconds: by the harness (the reach figure:
// how much of it some engine holds, before it is sent), by the engine that
// serves it, and by /tokenize when a router keys it by tokens (precise
// mode) or links it to the engine's blocks (eviction links). On the
// Mooncake trace that word-by-word pass was a seventh of the benchmark
// process's CPU, time taken from the router under test that no real
// deployment would take. The memo changes no answer: a hit is checked byte
// for byte against the remembered text.
//
// Safe for concurrent use; entries are immutable once stored.
type wordMemo struct {
	minBytes int // texts shorter than this are tokenized every time
	maxBytes int // bound on the texts and token ids held (4 bytes an id)
	hash     func([]byte) uint64

	mu    sync.Mutex
	m     map[uint64]*memoEntry
	order []uint64 // keys in the order stored, oldest first (from head)
	head  int
	held  int

	hits, misses atomic.Uint64
}

type memoEntry struct {
	text []byte
	toks []uint32
}

func (e *memoEntry) size() int { return len(e.text) + 4*len(e.toks) }

// memoSeed keys the process's memo hash.
var memoSeed = maphash.MakeSeed()

func newWordMemo(minBytes, maxBytes int) *wordMemo {
	return &wordMemo{
		minBytes: minBytes,
		maxBytes: maxBytes,
		hash:     func(b []byte) uint64 { return maphash.Bytes(memoSeed, b) },
		m:        make(map[uint64]*memoEntry),
	}
}

// textMemo is the memo every instance of the process shares: the tokenizer is
// a pure function of the text, so what one simulated engine read, another
// may reuse. Texts from 4 KiB (about 700 words: shorter ones take a few
// microseconds to read); 64 MiB (the Mooncake trace's longest prompt is
// 123k tokens, about 1 MB with its ids; a few hundred recent prompts fit).
var textMemo = newWordMemo(4<<10, 64<<20)

// appendWords appends s's token ids to dst as appendWords does.
func (wm *wordMemo) appendWords(dst []uint32, s []byte) []uint32 {
	if len(s) < wm.minBytes || len(s) > wm.maxBytes/2 { // short, or would push out half the memo
		return appendWords(dst, s)
	}
	h := wm.hash(s)
	wm.mu.Lock()
	e := wm.m[h]
	wm.mu.Unlock()
	if e != nil && bytes.Equal(e.text, s) {
		wm.hits.Add(1)
		return append(dst, e.toks...)
	}
	wm.misses.Add(1)
	n := len(dst)
	dst = appendWords(dst, s)
	if e == nil { // a different text under the same hash keeps its place
		wm.store(h, &memoEntry{text: bytes.Clone(s), toks: append([]uint32(nil), dst[n:]...)})
	}
	return dst
}

// store adds e under h, dropping the oldest entries past maxBytes.
func (wm *wordMemo) store(h uint64, e *memoEntry) {
	wm.mu.Lock()
	defer wm.mu.Unlock()
	if _, ok := wm.m[h]; ok { // stored meanwhile by another reader
		return
	}
	wm.m[h] = e
	wm.order = append(wm.order, h)
	wm.held += e.size()
	for wm.held > wm.maxBytes && wm.head < len(wm.order) {
		old := wm.order[wm.head]
		wm.head++
		wm.held -= wm.m[old].size()
		delete(wm.m, old)
	}
	if wm.head > len(wm.order)/2 { // compact the queue now and then
		wm.order = append(wm.order[:0], wm.order[wm.head:]...)
		wm.head = 0
	}
}

// stats returns the memo's hits and misses and the bytes it holds.
func (wm *wordMemo) stats() (hits, misses uint64, held int) {
	wm.mu.Lock()
	held = wm.held
	wm.mu.Unlock()
	return wm.hits.Load(), wm.misses.Load(), held
}
