package bench

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/kvmesh/kvmesh/router"
	"github.com/kvmesh/kvmesh/tree"
)

// shadowRouter is one router that sees all the traffic of a multi-node
// arm: its index gets every node's learns (teeLearner) and its view of the
// backends' bookings is the sum of every node's exact bookings (its own
// are none: it never dispatches). Before each request is sent to a node,
// the shadow decides it too (router.Router.Shadow); the share of requests
// the node sent where the shadow would have is the arm's agreement: 1 for
// nodes that route as one router, lower as their views diverge.
type shadowRouter struct {
	rt     *router.Router
	ix     *tree.Index
	learn  *router.LocalLearner
	nodes  []*router.Router
	toNode [][]tree.BackendID // [node][shadow id] -> that node's id, noBackend if unknown
	path   string

	lessonMu sync.Mutex
	lessonAt int64 // ms of the last read of the nodes' lessons
	lessons  map[tree.BackendID]shadowLesson

	// learns carries the nodes' learns and invalidations to the shadow's
	// index, in the order the nodes made them, applied by one goroutine
	// (applyLearns) off the nodes' request paths: applied there, under
	// the shadow learner's lock shared by every node, they made each
	// request of an 8-node arm wait for the others' (time outside the
	// engines at TTFT p50: 14.5 ms wall per request with them, 7.8 ms
	// without the shadow at all, Mooncake 3x at time scale 10). stop ends
	// the goroutine; applied is closed when it has.
	learns  chan shadowLearn
	stop    chan struct{}
	applied chan struct{}
}

// shadowLearn is one learn (chain set), retraction (ends set, ttl the
// provisional TTL), end (ends set, ttl 0: an engine's eviction through
// kvmesh+evict's links) or invalidation (backend set) for the shadow's
// index. id is the backend's id in from, the node's index: applyLearns
// puts it in the shadow's by name, off the node's request path (the two
// registry reads take each index's lock, which a node's replication and
// its streams' ends hold in turn: on the request path of
// kvmesh+evict:8:mesh they waited 30 ms of wall time a request, by a block
// profile of a Mooncake 3x run, the benchmark's own cost counted as TTFT).
type shadowLearn struct {
	chain   *tree.Chain // a copy: the node's may be reused once Learn returns
	ends    []tree.Key  // a copy, likewise
	from    *tree.Index
	id      tree.BackendID
	ttl     time.Duration
	backend string
	removed bool
}

// shadowLearnQueue is how many learns may wait for the shadow's index:
// a few seconds of an 8-node arm's traffic at three learns a request.
const shadowLearnQueue = 4096

func newShadowRouter(rc router.Config, tcfg tree.Config, tokens bool, path string) (*shadowRouter, error) {
	ix, err := tree.New(tcfg)
	if err != nil {
		return nil, err
	}
	s := &shadowRouter{ix: ix, learn: router.NewLocalLearner(ix, "shadow"), path: path, lessons: make(map[tree.BackendID]shadowLesson),
		learns: make(chan shadowLearn, shadowLearnQueue), stop: make(chan struct{}), applied: make(chan struct{})}
	deps := router.Deps{Index: ix, Learner: s.learn, Peers: s}
	if tokens {
		deps.Tokenizer = router.WordTokenizer{}
	}
	if s.rt, err = router.New(rc, deps); err != nil {
		return nil, err
	}
	// Only now: on New's error nothing would ever close stop, and the
	// goroutine would wait for it for ever.
	go s.applyLearns()
	return s, nil
}

// watch makes the nodes' bookings the shadow's and starts its signal
// loops (scrapes), like any node's.
func (s *shadowRouter) watch(ctx context.Context, nodes []*router.Router, indexes []*tree.Index) error {
	s.nodes = nodes
	reg := s.ix.Backends(nil)
	s.toNode = make([][]tree.BackendID, len(nodes))
	for i := range nodes {
		m := make([]tree.BackendID, len(reg))
		for j, e := range reg {
			m[j] = noBackend
			if id, ok := indexes[i].BackendByName(e.Name); ok {
				m[j] = id
			}
		}
		s.toNode[i] = m
	}
	return s.rt.Start(ctx)
}

// decide is the shadow's choice for a request body and its reason (""
// when it has none).
func (s *shadowRouter) decide(body []byte) (backend, reason string) {
	b, why, aerr := s.rt.Shadow(s.path, body, "")
	if aerr != nil {
		return "", ""
	}
	return b, why.String()
}

// answered counts an answer of any node in the shadow's estimate of the
// fleet's reuse (the kvmesh policy's spread term), as that node did.
func (s *shadowRouter) answered(promptTokens, cachedTokens int) {
	s.rt.ObserveAnswer(int64(promptTokens), int64(cachedTokens))
}

// PeerLoad sums every node's bookings at the backend (router.PeerLoad).
func (s *shadowRouter) PeerLoad(id tree.BackendID) (units, requests, inFlight float64) {
	for i, n := range s.nodes {
		if int(id) >= len(s.toNode[i]) || s.toNode[i][id] == noBackend {
			continue
		}
		want := s.toNode[i][id]
		n.LocalLoad(func(nid tree.BackendID, u, r, f, _ int64) {
			if nid == want {
				units, requests, inFlight = units+float64(u), requests+float64(r), inFlight+float64(f)
			}
		})
	}
	return units, requests, inFlight
}

func (s *shadowRouter) MeshShare() float64 { return 1 }

// PeerWritten sums what every node wrote to the backend.
func (s *shadowRouter) PeerWritten(id tree.BackendID) (w float64) {
	for i, n := range s.nodes {
		if int(id) >= len(s.toNode[i]) || s.toNode[i][id] == noBackend {
			continue
		}
		want := s.toNode[i][id]
		n.LocalLoad(func(nid tree.BackendID, _, _, _, written int64) {
			if nid == want {
				w += float64(written)
			}
		})
	}
	return w
}
func (s *shadowRouter) BookingsChanged() {}

// PeerLesson is the newest lesson any node holds about the backend
// (router.PeerLessons): the shadow learns from every node's answers, as
// one router seeing all the traffic would. The nodes' lessons are read at
// most once a millisecond: each read takes every node's belief locks.
func (s *shadowRouter) PeerLesson(id tree.BackendID) (stamp int64, scale, learned, doubt float64, doubtN uint64) {
	s.lessonMu.Lock()
	defer s.lessonMu.Unlock()
	if now := time.Now().UnixMilli(); now != s.lessonAt {
		s.lessonAt = now
		clear(s.lessons)
		for i, n := range s.nodes {
			n.LocalLessons(true, func(nid tree.BackendID, st int64, sc, le, d float64, dn uint64) {
				for sid, want := range s.toNode[i] {
					if want == nid && st > s.lessons[tree.BackendID(sid)].stamp {
						s.lessons[tree.BackendID(sid)] = shadowLesson{st, sc, le, d, dn}
					}
				}
			})
		}
	}
	l := s.lessons[id]
	return l.stamp, l.scale, l.learned, l.doubt, l.doubtN
}

// shadowLesson is one lesson as router.Router.LocalLessons lists it.
type shadowLesson struct {
	stamp                 int64
	scale, learned, doubt float64
	doubtN                uint64
}

func (s *shadowRouter) Close() {
	close(s.stop)
	<-s.applied
	_ = s.rt.Close()
}

// applyLearns applies the queued learns until stop.
func (s *shadowRouter) applyLearns() {
	defer close(s.applied)
	for {
		select {
		case <-s.stop:
			return
		case l := <-s.learns:
			if l.from != nil && !s.translate(&l) {
				continue // a backend the shadow does not know
			}
			switch {
			case l.chain != nil:
				s.learn.Learn(l.chain, l.id, l.ttl)
			case l.ends != nil && l.ttl == 0:
				s.learn.End(l.ends, l.id)
			case l.ends != nil:
				s.learn.Retract(l.ends, l.id, l.ttl)
			default:
				s.learn.Invalidate(l.backend, l.removed)
			}
		}
	}
}

// translate puts l's backend id, from l.from's registry, in the shadow's
// (by name); false when either does not know it. Ids are not reused while
// a fleet runs, so the node's id still names the backend it learned on.
func (s *shadowRouter) translate(l *shadowLearn) bool {
	e, ok := l.from.Backend(l.id)
	if !ok || e.Name == "" {
		return false
	}
	l.id, ok = s.ix.BackendByName(e.Name)
	return ok
}

// enqueue queues l for the shadow's index; it waits while the queue is
// full (a shadow that drops learns would not see all the traffic) and
// drops l once the shadow is closing.
func (s *shadowRouter) enqueue(l shadowLearn) {
	select {
	case s.learns <- l:
	case <-s.stop:
	}
}

// teeLearner passes a node's learns to its own learner and to the shadow's
// index (whose goroutine translates the node's backend ids by name). It
// takes no lock of either index: it runs on the node's request path.
type teeLearner struct {
	router.Learner
	nodeIx *tree.Index
	shadow *shadowRouter
}

func (t *teeLearner) Learn(ch *tree.Chain, backend tree.BackendID, ttl time.Duration) {
	t.Learner.Learn(ch, backend, ttl)
	c := *ch
	c.Keys, c.Learn = slices.Clone(ch.Keys), slices.Clone(ch.Learn)
	t.shadow.enqueue(shadowLearn{chain: &c, from: t.nodeIx, id: backend, ttl: ttl})
}

// Retract passes a node's retracted claims (a failed attempt's, router's
// retract.go) on like its learns, when the node's learner retracts claims.
func (t *teeLearner) Retract(keys []tree.Key, backend tree.BackendID, ttl time.Duration) {
	if e, ok := t.Learner.(interface {
		Retract([]tree.Key, tree.BackendID, time.Duration)
	}); ok {
		e.Retract(keys, backend, ttl)
	}
	if len(keys) > 0 {
		t.shadow.enqueue(shadowLearn{ends: slices.Clone(keys), from: t.nodeIx, id: backend, ttl: ttl})
	}
}

// End passes on the claims a node ended (kvmesh+evict: its links to an
// evicted engine block), when the node's learner ends claims.
func (t *teeLearner) End(keys []tree.Key, backend tree.BackendID) {
	if e, ok := t.Learner.(interface {
		End([]tree.Key, tree.BackendID)
	}); ok {
		e.End(keys, backend)
	}
	if len(keys) > 0 {
		t.shadow.enqueue(shadowLearn{ends: slices.Clone(keys), from: t.nodeIx, id: backend})
	}
}

func (t *teeLearner) Invalidate(backend string, removed bool) {
	t.Learner.Invalidate(backend, removed)
	t.shadow.enqueue(shadowLearn{backend: backend, removed: removed})
}

// noBackend marks a shadow backend a node does not know.
const noBackend = ^tree.BackendID(0)
