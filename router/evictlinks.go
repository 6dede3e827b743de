package router

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvmesh/kvmesh/router/kvevents"
	"github.com/kvmesh/kvmesh/tree"
)

// Eviction links (PreciseConfig.EvictionBackends, docs/precise.md): the
// engines' evictions for claims keyed by bytes.
//
// Approximate mode's claims know what was sent to a backend, never what
// its engine dropped. An engine that publishes KV events says exactly
// which blocks it dropped, but they are blocks of its own tokens, and
// keying every request by tokens costs a /tokenize round trip on its path
// (precise mode). Here requests keep their byte keys and wait for nothing:
// once a backend has answered, the router tokenizes the prompt in the
// background (the same /tokenize) and links each claim the answer left
// on that backend, at a message end, to the key of the engine block that
// holds the message's last whole block of tokens. When the engine's
// events remove that block, the linked byte claims on that backend end
// (through the Learner: in a mesh, for every node).
//
// A message end in bytes is put in tokens at the prompt's own bytes per
// token: the engine's chat template and the router's rendering are not
// the same bytes, but both are the messages in order. A link one block
// too deep ends its claim a little early (the engine frees a request's
// blocks tail first); one block too shallow ends it a little late.
//
// Each node links the claims it learned from its own routes; links are
// not replicated, the ends are. In a mesh each engine's stream is read by
// its owner (EvictionSink says how its ends reach the linking nodes).

// linkKey is an engine block of one backend.
type linkKey struct {
	backend tree.BackendID
	block   tree.Key
}

// evictionLinks maps engine blocks to the byte claims they end. Safe for
// concurrent use.
type evictionLinks struct {
	mu sync.Mutex
	m  map[linkKey][]linkedClaim
	// ring holds the links in the order they were made, max of them; a new
	// one past max drops the oldest.
	ring []linkEntry
	next int
	n    int // links held

	// endMu serializes EndLinked's use of endBuf (the streams' consumers
	// and the mesh's apply loop call it).
	endMu  sync.Mutex
	endBuf []tree.Key
}

type linkEntry struct {
	k     linkKey
	claim tree.Key
}

// linkedClaim is a claim linked to an engine block, and when the answer
// that linked it last ended (Unix ms): when the engine released the
// block into its LRU, whose eviction order it is (evictedge.go).
type linkedClaim struct {
	claim tree.Key
	at    int64
}

func newEvictionLinks(limit int) *evictionLinks {
	return &evictionLinks{m: make(map[linkKey][]linkedClaim), ring: make([]linkEntry, 0, min(limit, 1<<12))}
}

// add links claim to engine block k, released at at (Unix ms). A link
// already held is kept where it is in the ring, at the later time.
func (l *evictionLinks) add(k linkKey, claim tree.Key, at int64, limit int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	cs := l.m[k]
	for i := range cs {
		if cs[i].claim == claim {
			cs[i].at = max(cs[i].at, at)
			return
		}
	}
	e := linkEntry{k: k, claim: claim}
	if len(l.ring) < limit {
		l.ring = append(l.ring, e)
	} else {
		l.dropLocked(l.ring[l.next])
		l.ring[l.next] = e
		l.next = (l.next + 1) % len(l.ring)
	}
	l.m[k] = append(l.m[k], linkedClaim{claim: claim, at: at})
	l.n++
}

// dropLocked removes the link e if it is still held.
func (l *evictionLinks) dropLocked(e linkEntry) {
	cs := l.m[e.k]
	for i, c := range cs {
		if c.claim == e.claim {
			cs[i] = cs[len(cs)-1]
			cs = cs[:len(cs)-1]
			l.n--
			break
		}
	}
	if len(cs) == 0 {
		delete(l.m, e.k)
	} else {
		l.m[e.k] = cs
	}
}

// take removes the links of backend's blocks and appends their claims to
// dst. newest is the latest release time among them (Unix ms; 0 if none).
func (l *evictionLinks) take(backend tree.BackendID, blocks []tree.Key, dst []tree.Key) (_ []tree.Key, newest int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, b := range blocks {
		k := linkKey{backend, b}
		if cs, ok := l.m[k]; ok {
			for _, c := range cs {
				dst = append(dst, c.claim)
				newest = max(newest, c.at)
			}
			l.n -= len(cs)
			delete(l.m, k)
		}
	}
	return dst, newest
}

func (l *evictionLinks) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.n
}

// linkMetrics are registered with every router (zero without eviction
// links).
type linkMetrics struct {
	jobs  [numLinkOutcomes]prometheus.Counter
	ended prometheus.Counter
}

// What became of an answered prompt's links (kvmesh_router_eviction_link_prompts_total).
const (
	linkLinked      = iota // tokenized and linked
	linkBusy               // MaxTokenizeInFlight tokenizations were running: not linked
	linkFailed             // the tokenization failed or timed out: not linked
	linkUnsupported        // an endpoint or prompt shape /tokenize does not take
	numLinkOutcomes
)

var linkOutcomeNames = [numLinkOutcomes]string{"linked", "busy", "failed", "unsupported"}

func newLinkMetrics(reg prometheus.Registerer, held, queued func() float64) (*linkMetrics, error) {
	jobs := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvmesh_router_eviction_link_prompts_total",
		Help: "Answered prompts on eviction-link backends, by what became of their claims' links: linked, busy (the queue of prompts waiting to be linked was full, precise.link_queue), failed (the tokenization failed or timed out), unsupported (an endpoint /tokenize does not take)."},
		[]string{"outcome"})
	m := &linkMetrics{ended: prometheus.NewCounter(prometheus.CounterOpts{Name: "kvmesh_router_eviction_link_claims_ended_total",
		Help: "Byte-keyed claims ended because the engine's KV events removed the block they were linked to."})}
	for i, n := range linkOutcomeNames {
		m.jobs[i] = jobs.WithLabelValues(n)
	}
	gauge := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "kvmesh_router_eviction_links",
		Help: "Links from engine blocks to byte-keyed claims held (precise.max_eviction_links bounds them)."}, held)
	waiting := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "kvmesh_router_eviction_link_queue",
		Help: "Answered prompts waiting for the background tokenization that links their claims (precise.link_queue bounds them; precise.link_workers run them)."}, queued)
	return m, registerAll(reg, jobs, m.ended, gauge, waiting)
}

// linkJob is what the background tokenization of one answered prompt
// needs, copied from the request's state.
type linkJob struct {
	backend     tree.BackendID
	model, salt string
	units       int        // the prompt's rendering, in bytes
	upb         int        // bytes per byte block
	depths      []int32    // the claims' depths, in byte blocks
	claims      []tree.Key // the byte keys at those depths
	at          int64      // when the answer ended (Unix ms): the blocks' release into the engine's LRU
}

// linkAfter queues the linking of the claims a request's answer left on
// b to b's engine blocks, if b is in eviction-link mode (linkqueue.go).
// It is called once the answer is complete; it copies what it needs from
// st and never waits.
func (rt *Router) linkAfter(st *reqState, b *backend, ep Endpoint) {
	pc := rt.precise
	if pc == nil || pc.links == nil || st.precise || !st.routed || !pc.linkedOn(b) || len(st.chain.Learn) == 0 || st.prompt.Model == "" {
		return
	}
	u := pc.target(rt, st.prompt.Model)
	if u == nil {
		pc.lm.jobs[linkFailed].Inc()
		return
	}
	sc := pc.scratch()
	var err error
	if sc.body, _, err = appendTokenizeBody(sc.body[:0], ep, st.body); err != nil {
		pc.release(sc)
		pc.lm.jobs[linkUnsupported].Inc()
		return
	}
	j := &linkJob{backend: b.id, model: st.prompt.Model, salt: st.prompt.CacheSalt, units: st.chain.Units, upb: st.chain.UnitsPerBlock,
		at: rt.now().UnixMilli()}
	for _, d := range st.chain.Learn {
		if int(d) <= len(st.chain.Keys) {
			j.depths = append(j.depths, d)
			j.claims = append(j.claims, st.chain.Keys[d-1])
		}
	}
	pc.enqueueLink(&linkTask{rt: rt, b: b, u: u, sc: sc, j: j}) // linkqueue.go
}

// link records j's links given the prompt's engine tokens.
func (pc *precise) link(k tree.Keyer, seed tree.Seed, toks []uint32, j *linkJob) *tree.Chain {
	if j.units <= 0 || len(toks) == 0 {
		return nil
	}
	ch := &tree.Chain{}
	k.Tokens(ch, seed, toks, nil)
	ch.Learn = ch.Learn[:0] // the linked blocks only (appended below)
	eb := pc.cfg.EngineBlockTokens
	for i, d := range j.depths {
		at := int(int64(d) * int64(j.upb) * int64(len(toks)) / int64(j.units)) // the message end, in tokens
		blocks := min(at/eb, len(ch.Keys)/int(pc.ratio))                       // whole engine blocks before it
		if blocks == 0 {
			continue
		}
		// The index's key at that engine block's end: the key the engine's
		// events name the block by (kvevents.Mapper).
		depth := int32(blocks) * pc.ratio
		pc.links.add(linkKey{j.backend, ch.Keys[depth-1]}, j.claims[i], j.at, pc.cfg.MaxEvictionLinks)
		if n := len(ch.Learn); n == 0 || ch.Learn[n-1] < depth {
			ch.Learn = append(ch.Learn, depth)
		}
	}
	return ch
}

// claimEnder ends claims: LocalLearner, a mesh node.
type claimEnder interface {
	End(keys []tree.Key, backend tree.BackendID)
}

// evictionSink is the kvevents.Sink of eviction-link backends' streams.
type evictionSink struct {
	rt    *Router
	owner claimEnder // nil: no mesh
}

// EvictionSink returns the sink for the KV-event streams of
// PreciseConfig.EvictionBackends (router/kvevents.Deps.Sink): their
// removals end the byte-keyed claims linked to the removed blocks
// (EndLinked), through the router's Learner, which must be able to end
// claims (LocalLearner, a mesh node). nil without eviction-link backends.
// The events make no claims of their own; an engine's cleared cache or its
// restart invalidates the backend (Emptied), a lost stream ends nothing.
//
// owner, for a router in a mesh, is its node: each engine's stream is read
// by one node, which cannot see the other nodes' links. Every node then
// also claims, in the engines' keys, the blocks it linked (a few per
// answered prompt, replicated like any claim); the owner's removals end
// those claims, and their tombstones reach every node, where
// mesh.Node.OnEnded hands them to EndLinked. nil: the node reads every
// stream itself.
func (rt *Router) EvictionSink(owner claimEnder) kvevents.Sink {
	if rt.precise == nil || rt.precise.links == nil {
		return nil
	}
	if _, ok := rt.learner.(claimEnder); !ok {
		return nil
	}
	if owner != nil {
		rt.precise.claimLinks.Store(true)
	}
	return &evictionSink{rt: rt, owner: owner}
}

// Learn keeps nothing: requests to these backends are keyed by bytes.
func (s *evictionSink) Learn(*tree.Chain, tree.BackendID, time.Duration) {}

// End ends the linked blocks' claims through the owner, if any, and the
// byte claims linked to them.
func (s *evictionSink) End(blocks []tree.Key, backend tree.BackendID) {
	if s.owner != nil {
		s.owner.End(blocks, backend)
	}
	s.rt.EndLinked(blocks, backend)
}

// Invalidate ends nothing: a gap or a new stream loses track of the
// engine's cache, it does not empty it (see Emptied).
func (s *evictionSink) Invalidate(string, bool) {}

// Emptied invalidates the backend through the router's Learner (on a
// mesh, the stream's owner's node: every node then drops its claims): the
// engine cleared its cache or restarted, and none of the byte claims
// answers left there holds any more. Its links stay until the ring drops
// them: a block the engine stores again is linked again, and ending a
// claim of the new generation for an old link to the same block is what
// that block's eviction means anyway.
func (s *evictionSink) Emptied(backend string) {
	s.rt.learner.Invalidate(backend, false)
	if b := s.rt.backendByName(backend); b != nil {
		b.order.clear() // evictorder.go
	}
}

// EndLinked ends the byte-keyed claims this router linked to backend's
// engine blocks (blocks: their keys, as the engine's events name them),
// through its Learner. A mesh node calls it with the tombstones its peers
// sent (mesh.Node.OnEnded); keys it never linked cost a map lookup each.
func (rt *Router) EndLinked(blocks []tree.Key, backend tree.BackendID) {
	pc := rt.precise
	if pc == nil || pc.links == nil {
		return
	}
	e, ok := rt.learner.(claimEnder)
	if !ok {
		return
	}
	pc.links.endMu.Lock()
	defer pc.links.endMu.Unlock()
	buf, newest := pc.links.take(backend, blocks, pc.links.endBuf[:0])
	pc.links.endBuf = buf
	b := rt.backendByID(backend)
	if newest > 0 && b != nil {
		rt.noteEvicted(b, newest) // evictedge.go
	}
	if b != nil && rt.orderKept(b) {
		b.order.drop(buf) // evictorder.go
		if newest > 0 {
			b.order.trim(newest - pc.cfg.EvictionOrderSlack.Milliseconds())
		}
	}
	if len(buf) > 0 {
		if b != nil {
			rt.restateBookings(b, buf) // restate.go
		}
		e.End(buf, backend)
		pc.lm.ended.Add(float64(len(buf)))
	}
}
