package mesh

import (
	"time"

	"github.com/kvmesh/kvmesh/tree"
)

// End ends the claims of keys on backend (an engine's KV events reported the
// blocks evicted) and queues the tombstones for the peers. Together with
// Learn and Invalidate it is what router/kvevents writes through; it never
// waits for the network.
func (n *Node) End(keys []tree.Key, backend tree.BackendID) {
	if len(keys) == 0 {
		return
	}
	now := n.nowMs()
	n.mu.Lock()
	d := n.drainLearnsLocked(now)
	d += int64(n.rep.End(keys, backend, now))
	n.mu.Unlock()
	n.noteChanges(d)
}

// EndedFunc is told the claims a peer's message ended on this node: the
// tombstones of keys on backend it applied.
type EndedFunc func(keys []tree.Key, backend tree.BackendID)

// OnEnded sets fn to be called, after each received message, with the
// claims its tombstones ended here (nil: nobody is told). A router in
// eviction-link mode (router.Router.EndLinked) ends the byte-keyed claims
// it linked to engine blocks whose claims the stream's owner ended. fn runs
// on the apply goroutine, without the node's lock; it may call End.
func (n *Node) OnEnded(fn EndedFunc) {
	if fn == nil {
		n.onEnded.Store(nil)
		return
	}
	n.onEnded.Store(&fn)
}

// tellEnded calls the OnEnded function with the tombstones among claims
// (applied by the last Receive, copied by the caller), by backend.
func (n *Node) tellEnded(claims []tree.Claim) {
	fn := n.onEnded.Load()
	if fn == nil {
		return
	}
	keys := n.endedBuf[:0]
	for len(claims) > 0 {
		b := claims[0].Backend
		keys = keys[:0]
		rest := claims[:0]
		for _, c := range claims {
			switch {
			case c.Backend != b:
				rest = append(rest, c)
			case c.Ended():
				keys = append(keys, c.Key)
			}
		}
		if len(keys) > 0 {
			(*fn)(keys, b)
		}
		claims = rest
	}
	n.endedBuf = keys
}

// Retract ends the claims of keys on backend that expire no later than
// claims learned now for ttl would (crdt.Replica.Retract): a router's
// provisional claims for an attempt that failed (router/retract.go), not
// a longer-lived claim a concurrent answer or an engine's events wrote for
// the same blocks meanwhile. The tombstones are queued for the peers.
func (n *Node) Retract(keys []tree.Key, backend tree.BackendID, ttl time.Duration) {
	if len(keys) == 0 {
		return
	}
	now := n.nowMs()
	n.mu.Lock()
	d := n.drainLearnsLocked(now)
	d += int64(n.rep.Retract(keys, backend, ttl.Milliseconds(), now))
	n.mu.Unlock()
	n.noteChanges(d)
}

// AliveMembers returns the names of the members that are alive, are
// peers by protocol and key scheme (Member.NotPeer empty: the claims an
// owner publishes reach them) and consume the same engine streams
// (the same TagPrecise as Config.PreciseStreams), this node included,
// sorted: the set over which each engine's KV-event stream gets one owner.
// Members configured otherwise pick owners among themselves: a stream may
// then be read twice during a rollout, never by nobody.
func (n *Node) AliveMembers() []string {
	var out []string
	for _, m := range n.Members() {
		if m.Status == "alive" && (m.Self || m.NotPeer == "" && m.Tags[TagPrecise] == n.cfg.PreciseStreams) {
			out = append(out, m.Name)
		}
	}
	return out
}
