package router

import (
	"sync"

	"github.com/kvmesh/kvmesh/tree"
)

// The eviction order of an eviction-link backend (PreciseConfig.
// EvictionOrder): the router's copy of its engine's LRU, in the prompt
// units of the claims this router left there, and from it how much the
// engine must allocate before a claim is evicted.
//
// An engine with prefix caching keeps the blocks no running request uses
// in a queue ordered by release: a request's blocks join the back when it
// ends (its deepest blocks first), a request that reuses cached blocks
// takes them out of the queue while it runs, and each block the engine
// allocates evicts the one at the front. So a released prefix lasts until
// the engine has allocated as many blocks as are queued ahead of it. The
// router sees each of those steps for the requests it sends: which claims
// one matched, when its first byte came (the engine scheduled it) and when
// its answer ended. It keeps each claim's segment (the prompt's units from
// the previous claim's depth to its own) in that order, pins the segments
// a request matched from its first byte to its end (and, from its dispatch
// to its first byte, keeps a trim from taking them), drops the ones the
// engine's events evicted, and trims everything released more than
// PreciseConfig.EvictionOrderSlack before the newest release the events
// evicted (the queue is first in, first out: what was ahead of an evicted
// block is gone too, and a claim trimmed so is gone, not unknown; but
// answers that end in the same engine step are released in an order the
// router does not see). What a request sent now finds is then the claims
// whose units ahead of them outlast what the engine allocates before it
// schedules the request: the prefill queued ahead of it (the bookings, in
// the same units).
//
// The retention the eviction edge measures (evictedge.go) is the same
// queue's length in time, which varies by 17-19% from one eviction to the
// next with what the engine's running requests pin; the units ahead of a
// claim do not depend on how long the queue is behind it. Checked on the
// customers benchmark (one run, kvmesh+evict with the order): of the
// claims the events evicted, 95% were at the front of the order when they
// went (no unit ahead of them but the same batch's); of 1,645 prefix routes
// whose claim had at least the booked prefill queued ahead of it, 2 lost
// part of the prompt, of 34 with 5,000 units less, 21.

// maxOrderNodes bounds one backend's order: past it the front is dropped
// (a claim no longer in the order is not doubted). Claims sit at least at
// every checkpoint (512 tokens by default), so a cache of 10^6 blocks of 16
// tokens holds up to about 31,000 segments; 65,536 covers twice that.
const maxOrderNodes = 1 << 16

// orderWalk bounds the nodes a lookup walks from the front: past it a
// claim counts as safe. Risk is decided near the front, where the walk is
// short.
const orderWalk = 512

// maxOrderGone bounds the segments an order remembers it trimmed.
const maxOrderGone = 1 << 14

// orderState is where a claim's segment is in a backend's order.
type orderState uint8

const (
	orderUnknown orderState = iota // never released here, or forgotten
	orderPinned                    // a request in flight holds it
	orderQueued                    // in the LRU queue
	orderGone                      // trimmed: released before a block the engine evicted
)

// orderNode is one claim's segment at a backend.
type orderNode struct {
	key        tree.Key
	units      float64 // the segment's prompt units
	at         int64   // released at (Unix ms), when queued
	pins       int32   // requests in flight that matched it, scheduled
	awaits     int32   // requests sent that matched it, not yet scheduled
	slot       int32   // during aheadOf: 1 + the index of its place in the answer
	queued     bool
	prev, next *orderNode
}

// evictOrder is one backend's order. Safe for concurrent use.
type evictOrder struct {
	mu         sync.Mutex
	nodes      map[tree.Key]*orderNode
	head, tail *orderNode // the queue, front first
	queued     int
	free       *orderNode // spare nodes (linked by next)
	// gone holds the segments trimmed and not released since, with goneRing
	// their keys in the order trimmed (at most maxOrderGone).
	gone     map[tree.Key]struct{}
	goneRing []tree.Key
	goneNext int
	// batch is aheadOf's scratch: the queued nodes it looks for.
	batch []*orderNode
}

func newEvictOrder() *evictOrder {
	return &evictOrder{nodes: make(map[tree.Key]*orderNode), gone: make(map[tree.Key]struct{})}
}

// segment is one claim of a prompt for the order: its key, its units and
// whether the request pinned it.
type segment struct {
	key    tree.Key
	units  float64
	pinned bool
}

func (o *evictOrder) unlink(n *orderNode) {
	if !n.queued {
		return
	}
	if n.prev != nil {
		n.prev.next = n.next
	} else {
		o.head = n.next
	}
	if n.next != nil {
		n.next.prev = n.prev
	} else {
		o.tail = n.prev
	}
	n.prev, n.next, n.queued = nil, nil, false
	o.queued--
}

func (o *evictOrder) pushBack(n *orderNode) {
	n.prev, n.next, n.queued = o.tail, nil, true
	if o.tail != nil {
		o.tail.next = n
	} else {
		o.head = n
	}
	o.tail = n
	o.queued++
}

func (o *evictOrder) remove(n *orderNode) {
	o.unlink(n)
	delete(o.nodes, n.key)
	o.recycle(n)
}

// recycle puts n, out of the queue and the map, on the spare list.
func (o *evictOrder) recycle(n *orderNode) {
	*n = orderNode{next: o.free}
	o.free = n
}

// await marks the segments of keys as matched by a request just sent:
// the engine takes them out of its queue when it schedules the request,
// which the router learns only at its first byte (pin). Unknown keys are
// skipped.
func (o *evictOrder) await(keys []tree.Key) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, k := range keys {
		if n := o.nodes[k]; n != nil {
			n.awaits++
		}
	}
}

// unawait ends await's mark for a request that ended before its first
// byte. A segment trim held out of the queue for it (and no request pins)
// is forgotten: whether the engine kept it is not known.
func (o *evictOrder) unawait(keys []tree.Key) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, k := range keys {
		if n := o.nodes[k]; n != nil && n.awaits > 0 {
			if n.awaits--; n.awaits == 0 && n.pins == 0 && !n.queued {
				o.remove(n)
			}
		}
	}
}

// pin takes the segments of keys that are held out of the queue: a
// request that matched them (await) is scheduled. Unknown keys are
// skipped.
func (o *evictOrder) pin(keys []tree.Key) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, k := range keys {
		if n := o.nodes[k]; n != nil {
			n.awaits = max(n.awaits-1, 0)
			n.pins++
			o.unlink(n)
		}
	}
}

// release ends a request's hold on segs (the prompt's claims, shallowest
// first) at ms: each one the request pinned loses that pin, and each one
// no request pins joins the back of the queue, the deepest first (an
// engine frees a request's blocks tail first).
func (o *evictOrder) release(segs []segment, ms int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for i := len(segs) - 1; i >= 0; i-- {
		s := segs[i]
		delete(o.gone, s.key)
		n := o.nodes[s.key]
		if n == nil {
			if n = o.free; n != nil {
				o.free = n.next
				n.next = nil
			} else {
				n = &orderNode{}
			}
			n.key = s.key
			o.nodes[s.key] = n
		}
		if s.pinned && n.pins > 0 {
			n.pins--
		}
		n.units, n.at = s.units, ms
		o.unlink(n)
		if n.pins == 0 {
			o.pushBack(n)
		}
	}
	for len(o.nodes) > maxOrderNodes && o.head != nil {
		o.remove(o.head)
	}
}

// drop removes the segments of keys: the engine evicted them.
func (o *evictOrder) drop(keys []tree.Key) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, k := range keys {
		delete(o.gone, k)
		if n := o.nodes[k]; n != nil {
			o.remove(n)
		}
	}
}

// trim removes the queued segments released before front (Unix ms): the
// engine evicted one released then, and what was ahead of it went first.
// A segment a request sent there matched (await) is held out of the queue
// instead: the engine may have scheduled that request, and then holds it;
// if it evicted it first its events say so (drop).
func (o *evictOrder) trim(front int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for n := o.head; n != nil && n.at < front; n = o.head {
		if n.awaits > 0 {
			o.unlink(n)
			continue
		}
		o.markGone(n.key)
		o.remove(n)
	}
}

// markGone remembers k's segment as trimmed, forgetting the oldest such
// past maxOrderGone. Caller holds mu.
func (o *evictOrder) markGone(k tree.Key) {
	if len(o.goneRing) < maxOrderGone {
		o.goneRing = append(o.goneRing, k)
	} else {
		delete(o.gone, o.goneRing[o.goneNext])
		o.goneRing[o.goneNext] = k
		o.goneNext = (o.goneNext + 1) % maxOrderGone
	}
	o.gone[k] = struct{}{}
}

// ahead is where k's segment is and, queued, the units queued ahead of
// it, counted up to limit (past it, limit+1).
func (o *evictOrder) ahead(k tree.Key, limit float64) (float64, orderState) {
	keys, out := [1]tree.Key{k}, [1]orderPlace{}
	o.aheadOf(keys[:], limit, out[:])
	return out[0].ahead, out[0].state
}

// orderPlace is where one segment is in an order (ahead's answer).
type orderPlace struct {
	ahead float64
	state orderState
}

// aheadOf answers ahead for each of keys into out (as long as keys) in one
// walk from the front: a decision looks up every claim of a prompt at a
// backend, and a walk per claim made a long prompt's lookups cost as many
// walks as it has claims (BenchmarkEvictOrderLongPrompt). The walk stops
// once every queued segment of keys is found, the units counted pass
// limit, or it has walked orderWalk segments; the ones it did not reach
// have more than limit ahead (answered as limit+1).
func (o *evictOrder) aheadOf(keys []tree.Key, limit float64, out []orderPlace) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.batch = o.batch[:0]
	dups := false
	for i, k := range keys {
		n := o.nodes[k]
		switch {
		case n == nil:
			out[i] = orderPlace{state: orderUnknown}
			if _, ok := o.gone[k]; ok {
				out[i].state = orderGone
			}
		case !n.queued:
			out[i] = orderPlace{state: orderPinned}
		case n.slot != 0:
			dups = true // answered below, as its first copy
		default:
			out[i] = orderPlace{state: orderQueued, ahead: limit + 1} // unless the walk reaches it
			n.slot = int32(i + 1)
			o.batch = append(o.batch, n)
		}
	}
	found, sum, walked := 0, 0.0, 0
	for p := o.head; p != nil && found < len(o.batch); p = p.next {
		if p.slot > 0 {
			out[p.slot-1].ahead = sum
			found++
		}
		sum += p.units
		if walked++; sum > limit || walked >= orderWalk {
			break
		}
	}
	if dups { // chained keys never repeat in a prompt; a caller's list might
		for i, k := range keys {
			if n := o.nodes[k]; n != nil && n.queued {
				out[i] = out[n.slot-1]
			}
		}
	}
	for _, n := range o.batch {
		n.slot = 0
	}
}

// segments is how many segments are queued.
func (o *evictOrder) segments() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.queued
}

// clear forgets every segment: the engine emptied its cache.
func (o *evictOrder) clear() {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, n := range o.nodes {
		o.recycle(n)
	}
	clear(o.nodes)
	o.head, o.tail, o.queued = nil, nil, 0
	clear(o.gone)
	o.goneRing, o.goneNext = o.goneRing[:0], 0
}

// orderRisk is the doubt on a segment with ahead units queued before it at
// a backend that will allocate need units before the request is scheduled:
// 0 while ahead covers need, rising to 1 at a shortfall of 2 x band.
func orderRisk(ahead, need, band float64) float64 {
	band = max(band, 1)
	return min(max((need-ahead)/(2*band), 0), 1)
}
