package router

import (
	"sync"
	"time"

	"github.com/kvmesh/kvmesh/tree"
)

// Learner records what the router learns. The mesh implements it by
// writing into the shared tree.Index and replicating the changes; a single
// node without a mesh uses LocalLearner.
//
// Learn is called on the request path, up to three times per attempt
// (at dispatch with Config.ProvisionalTTL; at a 2xx answer's first byte
// and when it completes, with ConfirmedTTL): it
// must not block on the network. Both methods are called concurrently.
type Learner interface {
	// Learn records that backend now holds every prefix of ch at ch.Learn's
	// depths, for ttl. ch is only valid during the call.
	Learn(ch *tree.Chain, backend tree.BackendID, ttl time.Duration)
	// Invalidate drops every claim of a backend: it restarted with a cold
	// cache (removed=false) or left the fleet (removed=true).
	Invalidate(backend string, removed bool)
}

// LocalLearner is the Learner of a router that runs alone: it writes claims
// straight into an Index, stamped with wall-clock hybrid timestamps
// (Unix ms << 16 | counter) that never go backwards.
type LocalLearner struct {
	ix     *tree.Index
	origin tree.NodeID
	// Now is the clock; nil means time.Now. Set it before first use.
	Now func() time.Time

	mu      sync.Mutex
	clock   tree.Clock   // hybrid logical clock: never goes back, even if the wall clock does
	changed []tree.Claim // scratch for Index.Learn
}

// NewLocalLearner returns a Learner writing into ix as node.
func NewLocalLearner(ix *tree.Index, node string) *LocalLearner {
	return &LocalLearner{ix: ix, origin: tree.NodeIDOf(node)}
}

// Learn implements Learner.
func (l *LocalLearner) Learn(ch *tree.Chain, backend tree.BackendID, ttl time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now, ts := l.stamp()
	l.changed = l.ix.Learn(ch, backend, ts, ttl.Milliseconds(), l.origin, now, l.changed[:0])
}

// Invalidate implements Learner.
func (l *LocalLearner) Invalidate(backend string, removed bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, ts := l.stamp()
	_, _ = l.ix.Invalidate(backend, removed, ts, l.origin) // only fails when the registry is full
}

// stamp returns the wall clock in ms and a timestamp greater than every one
// before it, even if the clock stepped back. Callers hold l.mu.
func (l *LocalLearner) stamp() (int64, tree.Timestamp) {
	now := time.Now
	if l.Now != nil {
		now = l.Now
	}
	ms := now().UnixMilli()
	return ms, l.clock.Now(ms)
}

// learnAbove is what a decision with LearnAbove depth learns of learn
// (the prompt's learn positions, ascending): the positions deeper than
// depth, and the deepest checkpoint (a multiple of cp blocks) at or below
// depth, which the backend holds as well: Index.Lookup finds each
// backend's deepest checkpoint first and then looks only in the blocks
// above it, so a backend with claims above the holder's match but none at
// the checkpoint below them would be found only by chance. All of learn
// for depth 0. The result is learn's suffix, or *buf refilled (never
// sharing learn's array).
func learnAbove(buf *[]int32, learn []int32, depth int32, cp int) []int32 {
	if depth <= 0 {
		return learn
	}
	i := 0
	for i < len(learn) && learn[i] <= depth {
		i++
	}
	if cp <= 0 || i == len(learn) {
		return learn[i:]
	}
	c := depth / int32(cp) * int32(cp)
	j := i - 1
	for j >= 0 && learn[j] > c {
		j--
	}
	if c == 0 || j < 0 || learn[j] != c {
		return learn[i:] // thinned away (max_learn_positions): nothing to add
	}
	*buf = append(append((*buf)[:0], c), learn[i:]...)
	return *buf
}
