package mesh

import (
	"sync"

	"github.com/kvmesh/kvmesh/tree"
)

// learnQueue holds learns that arrived while the Replica was busy (a digest
// or a large apply holds it for milliseconds), so that Learn, which runs on
// the request path, never waits for it. Only the keys at the chain's learn
// depths are kept: that is all tree.Index.Learn reads. Two buffers are
// swapped so that steady state allocates nothing.
type learnQueue struct {
	mu    sync.Mutex
	max   int // keys
	keys  []tree.Key
	items []queuedLearn

	// drain's buffers, swapped with the ones above.
	dkeys  []tree.Key
	ditems []queuedLearn
}

type queuedLearn struct {
	off, n  int
	backend tree.BackendID
	ttlMs   int64
}

// push queues a copy of ch's learn keys; false when the queue is full.
func (q *learnQueue) push(ch *tree.Chain, b tree.BackendID, ttlMs int64) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.keys)+len(ch.Learn) > q.max {
		return false
	}
	off := len(q.keys)
	for _, d := range ch.Learn {
		if d >= 1 && int(d) <= len(ch.Keys) {
			q.keys = append(q.keys, ch.Keys[d-1])
		}
	}
	if len(q.keys) > off {
		q.items = append(q.items, queuedLearn{off: off, n: len(q.keys) - off, backend: b, ttlMs: ttlMs})
	}
	return true
}

// drain calls fn for every queued learn, oldest first, and empties the
// queue. fn's keys are only valid during the call.
func (q *learnQueue) drain(fn func(keys []tree.Key, b tree.BackendID, ttlMs int64)) {
	q.mu.Lock()
	if len(q.items) == 0 {
		q.mu.Unlock()
		return
	}
	q.keys, q.dkeys = q.dkeys[:0], q.keys
	q.items, q.ditems = q.ditems[:0], q.items
	keys, items := q.dkeys, q.ditems
	q.mu.Unlock()
	// The drained buffers are only touched here, and drain runs under the
	// Node's replica mutex, so no other drain can swap them meanwhile.
	for _, it := range items {
		fn(keys[it.off:it.off+it.n], it.backend, it.ttlMs)
	}
}
