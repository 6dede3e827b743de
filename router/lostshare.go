package router

import (
	"sync"
	"sync/atomic"

	"github.com/kvmesh/kvmesh/tree"
)

// Sharing lost marks (lostprefix.go) with the mesh: a conversation's next
// request reaches whichever node the load balancer picks, so a mark made
// on one node must reach the others, or N nodes doubt a lost context on 1
// request in N. The router keeps the marks it made itself in an outbox
// that the mesh's load channel drains (LocalLost) and sends to every peer;
// a peer's mark is recorded (PeerLost) but not kept for sending: every
// node hears each mark from its author, so relaying would only multiply
// the traffic.

// lostOutboxMax bounds the marks waiting for the mesh: far more than a
// node makes between two of the load channel's polls (10 ms). A mark that
// does not fit is not shared.
const lostOutboxMax = 1024

// lostMark is one mark waiting to be sent.
type lostMark struct {
	key tree.Key
	id  tree.BackendID
	ms  int64 // when it was made (router clock)
}

// lostOutbox holds this node's marks until the mesh takes them. It keeps
// nothing until the first LocalLost call: a router without a mesh never
// fills it.
type lostOutbox struct {
	wanted atomic.Bool
	mu     sync.Mutex
	marks  []lostMark
}

// add keeps a mark for the mesh, if one is listening.
func (o *lostOutbox) add(m lostMark) {
	if !o.wanted.Load() {
		return
	}
	o.mu.Lock()
	if len(o.marks) < lostOutboxMax {
		o.marks = append(o.marks, m)
	}
	o.mu.Unlock()
}

// take calls fn with every waiting mark, oldest first, and empties the
// outbox. fn runs under its lock: it must not call back into the router.
func (o *lostOutbox) take(fn func(lostMark)) {
	o.wanted.Store(true)
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, m := range o.marks {
		fn(m)
	}
	o.marks = o.marks[:0]
}

// markLost marks the prompt whose last learn position has key k lost at
// backend id, here and, through the outbox, on the mesh's other nodes.
func (rt *Router) markLost(k tree.Key, id tree.BackendID, nowMs int64) {
	rt.lost.mark(k, id, nowMs)
	rt.lostOut.add(lostMark{key: k, id: id, ms: nowMs})
	rt.metrics.lostPrefixes.WithLabelValues("own").Inc()
}

// LocalLost calls fn with every lost mark this node made since the last
// call (not those its peers sent): the prompt's key, the backend and how
// long ago the mark was made (ms). The mesh's load channel calls it to
// tell the peers; until it first does, no mark is kept for it.
func (rt *Router) LocalLost(fn func(k tree.Key, id tree.BackendID, ageMs int64)) {
	nowMs := rt.now().UnixMilli()
	rt.lostOut.take(func(m lostMark) { fn(m.key, m.id, max(nowMs-m.ms, 0)) })
}

// PeerLost records a lost mark a peer made ageMs ago (its backend id
// already in this node's terms): this node's next request matching that
// prompt at that backend is doubted there as if it had made the mark
// itself. A mark older than BeliefConfig.LostTTL changes nothing.
func (rt *Router) PeerLost(k tree.Key, id tree.BackendID, ageMs int64) {
	ttl := rt.cfg.Belief.LostTTL.Milliseconds()
	if ttl <= 0 || ageMs < 0 || ageMs >= ttl {
		return
	}
	if rt.lost.markIfNewer(k, id, rt.now().UnixMilli()-ageMs) {
		rt.metrics.lostPrefixes.WithLabelValues("peer").Inc()
	}
}
