package router

import (
	"encoding/binary"
	"hash/maphash"
	"sync"
)

// tokenCache remembers the engine's tokens of recent prompts, keyed by a
// hash of (model, rendering format, canonical rendering up to a message
// end). A conversation's next turn extends the previous turn's messages, so
// the rendering of the previous turn is a prefix of the new one, ending at
// one of its message ends: the router finds the previous turn's tokens
// there without asking the engine again (see Router.preciseKeys).
//
// Entries are immutable once stored (readers keep using a slice after it
// is evicted; nothing is recycled). The bound is in tokens; eviction is
// CLOCK (FIFO with a second chance for entries read since they last came
// round), so a conversation that keeps coming back keeps its entry.
type tokenCache struct {
	mu     sync.Mutex
	m      map[uint64]*tokenEntry
	ring   []uint64 // insertion order; ring[head:] is live
	head   int
	tokens int // sum of len(toks) over m
	max    int
}

type tokenEntry struct {
	toks []uint32
	ref  bool
}

func newTokenCache(maxTokens int) *tokenCache {
	return &tokenCache{m: make(map[uint64]*tokenEntry), max: maxTokens}
}

// get returns the tokens stored under k (nil if none). The slice must not
// be modified.
func (c *tokenCache) get(k uint64) []uint32 {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.m[k]
	if e == nil {
		return nil
	}
	e.ref = true
	return e.toks
}

// put stores a copy of toks under k, evicting as needed. Prompts above an
// eighth of the bound are not stored: one would flush many conversations.
func (c *tokenCache) put(k uint64, toks []uint32) {
	if len(toks) == 0 || len(toks) > c.max/8 {
		return
	}
	cp := append([]uint32(nil), toks...)
	c.mu.Lock()
	defer c.mu.Unlock()
	if old := c.m[k]; old != nil {
		c.tokens += len(cp) - len(old.toks)
		old.toks, old.ref = cp, true
		for c.tokens > c.max && c.head < len(c.ring) { // longer than before: the bound still holds
			c.evictOne()
		}
		return
	}
	for c.tokens+len(cp) > c.max && c.head < len(c.ring) {
		c.evictOne()
	}
	c.m[k] = &tokenEntry{toks: cp}
	c.tokens += len(cp)
	c.ring = append(c.ring, k)
}

// evictOne drops the oldest entry not read since it last came round (an
// entry read since goes to the back, once).
func (c *tokenCache) evictOne() {
	for c.head < len(c.ring) {
		k := c.ring[c.head]
		c.head++
		e := c.m[k]
		if e != nil && e.ref {
			e.ref = false
			c.ring = append(c.ring, k)
			continue
		}
		if e != nil {
			c.tokens -= len(e.toks)
			delete(c.m, k)
		}
		break
	}
	if c.head > 1024 && c.head > len(c.ring)/2 { // compact the consumed front
		n := copy(c.ring, c.ring[c.head:])
		c.ring, c.head = c.ring[:n], 0
	}
}

// size returns the entries and tokens held.
func (c *tokenCache) size() (entries, tokens int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m), c.tokens
}

// cacheSeed seeds the prefix hashes; the cache lives in this process only.
var cacheSeed = maphash.MakeSeed()

// prefixHashes appends to dst[:0] one hash per end in ends: the hash of
// (model, format, opts, units[:end]), computed in one pass over units. opts
// stands for whatever else changes the tokens (see appendTokenizeBody).
// Ends out of order or past units get the hash of the longest valid prefix.
func prefixHashes(dst []uint64, model string, f UnitFormat, opts uint64, units []byte, ends []int) []uint64 {
	dst = dst[:0]
	var h maphash.Hash
	h.SetSeed(cacheSeed)
	var hdr [17]byte
	binary.LittleEndian.PutUint64(hdr[0:], uint64(len(model)))
	binary.LittleEndian.PutUint64(hdr[8:], opts)
	hdr[16] = byte(f)
	h.Write(hdr[:])
	h.WriteString(model)
	prev := 0
	for _, e := range ends {
		if e > prev && e <= len(units) {
			h.Write(units[prev:e])
			prev = e
		}
		dst = append(dst, h.Sum64())
	}
	return dst
}
