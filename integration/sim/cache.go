package sim

// blockPool is the paged KV cache: a fixed number of blocks, each either
// referenced by running sequences, cached-and-unreferenced (evictable, kept
// in LRU order) or free. It follows vLLM's BlockPool:
//
//   - a block gets a key (and so becomes a prefix-cache entry) once all its
//     tokens are computed; partial blocks are never cached;
//   - blocks with references are never evicted;
//   - when the last reference goes, a cached block joins the tail of the LRU
//     list (evicted last) and an uncached one becomes free;
//   - allocation takes a free block first and otherwise evicts the LRU head.
//
// except in the last point. vLLM V1 keeps one free queue, uncached blocks
// and evictable cached blocks together in the order they were freed, and
// allocates from its head, so it may evict a cached block while an
// uncached one freed later waits behind it. Here every uncached block (a
// finished request's partial last block, a duplicate copy of a prefix two
// requests computed at once) is reused before any cached block is evicted:
// the simulator's effective cache is slightly larger than vLLM's with the
// same number of blocks, and its hit rates slightly higher. Kept so, since
// the published figures were measured with it.
//
// The pool is not safe for concurrent use; the engine guards it.
type blockPool struct {
	blocks []block
	free   []int32          // unreferenced, uncached blocks (a stack)
	index  map[uint64]int32 // key -> cached block
	lru    lruList          // unreferenced cached blocks, head evicted first
	inUse  int              // blocks with ref > 0

	evictions uint64 // cached blocks evicted to make room (cumulative)
	// evicted collects evicted keys for KV events while trackEvicted is set.
	evicted      []uint64
	trackEvicted bool
}

type block struct {
	key    uint64
	cached bool  // key is valid and index[key] == this block
	ref    int32 // running sequences holding the block
	prev   int32 // LRU links, valid while cached && ref == 0
	next   int32
}

const nilBlock int32 = -1

func newBlockPool(n int) *blockPool {
	p := &blockPool{
		blocks: make([]block, n),
		free:   make([]int32, 0, n),
		index:  make(map[uint64]int32, n),
	}
	p.reset()
	return p
}

// reset empties the cache and frees every block (a restart).
func (p *blockPool) reset() {
	clear(p.index)
	p.free = p.free[:0]
	for i := len(p.blocks) - 1; i >= 0; i-- {
		p.blocks[i] = block{prev: nilBlock, next: nilBlock}
		p.free = append(p.free, int32(i))
	}
	p.lru = lruList{head: nilBlock, tail: nilBlock}
	p.inUse = 0
}

// capacity is the number of blocks.
func (p *blockPool) capacity() int { return len(p.blocks) }

// available is how many blocks an allocation can obtain: free plus evictable.
func (p *blockPool) available() int { return len(p.free) + p.lru.n }

// cachedBlocks is how many blocks hold a cache entry.
func (p *blockPool) cachedBlocks() int { return len(p.index) }

// usage is the fraction of blocks referenced by running sequences.
func (p *blockPool) usage() float64 { return float64(p.inUse) / float64(len(p.blocks)) }

// lookup returns the cached block with key, without touching LRU order.
func (p *blockPool) lookup(key uint64) (int32, bool) {
	id, ok := p.index[key]
	return id, ok
}

// match returns how many leading keys are cached, at most limit.
func (p *blockPool) match(keys []uint64, limit int) int {
	if limit > len(keys) {
		limit = len(keys)
	}
	for i := 0; i < limit; i++ {
		if _, ok := p.index[keys[i]]; !ok {
			return i
		}
	}
	return max(limit, 0)
}

// evictable reports whether id is cached and unreferenced (so taking a
// reference removes it from the evictable set).
func (p *blockPool) evictable(id int32) bool {
	b := &p.blocks[id]
	return b.cached && b.ref == 0
}

// acquire takes a reference on a cached block (a prefix-cache hit).
func (p *blockPool) acquire(id int32) {
	b := &p.blocks[id]
	if b.ref == 0 {
		p.lru.remove(p.blocks, id)
		p.inUse++
	}
	b.ref++
}

// allocate takes a free block, or evicts the least recently released cached
// block. It returns false when every block is referenced.
func (p *blockPool) allocate() (int32, bool) {
	var id int32
	if n := len(p.free); n > 0 {
		id = p.free[n-1]
		p.free = p.free[:n-1]
	} else {
		id = p.lru.head
		if id == nilBlock {
			return nilBlock, false
		}
		p.lru.remove(p.blocks, id)
		b := &p.blocks[id]
		delete(p.index, b.key)
		b.cached = false
		p.evictions++
		if p.trackEvicted {
			p.evicted = append(p.evicted, b.key)
		}
	}
	p.blocks[id].ref = 1
	p.inUse++
	return id, true
}

// release drops one reference. The last reference makes a cached block
// evictable (most recently used) and an uncached block free.
func (p *blockPool) release(id int32) {
	b := &p.blocks[id]
	b.ref--
	if b.ref > 0 {
		return
	}
	p.inUse--
	if b.cached {
		p.lru.pushTail(p.blocks, id)
	} else {
		p.free = append(p.free, id)
	}
}

// register makes a fully computed, referenced block a cache entry under key.
// If another block already holds key (two sequences computed the same prefix
// at once) the block stays uncached and is freed normally.
func (p *blockPool) register(id int32, key uint64) {
	b := &p.blocks[id]
	if b.cached {
		return
	}
	if _, dup := p.index[key]; dup {
		return
	}
	b.key = key
	b.cached = true
	p.index[key] = id
}

// lruList is an intrusive doubly linked list over blockPool.blocks.
type lruList struct {
	head, tail int32
	n          int
}

func (l *lruList) pushTail(bs []block, id int32) {
	bs[id].prev = l.tail
	bs[id].next = nilBlock
	if l.tail != nilBlock {
		bs[l.tail].next = id
	} else {
		l.head = id
	}
	l.tail = id
	l.n++
}

func (l *lruList) remove(bs []block, id int32) {
	b := &bs[id]
	if b.prev != nilBlock {
		bs[b.prev].next = b.next
	} else {
		l.head = b.next
	}
	if b.next != nilBlock {
		bs[b.next].prev = b.prev
	} else {
		l.tail = b.prev
	}
	b.prev, b.next = nilBlock, nilBlock
	l.n--
}
