package bench

import (
	"bytes"
	"hash/maphash"
	"io"
	"math"
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/kvmesh/kvmesh/integration/sim"
	"github.com/kvmesh/kvmesh/router"
)

// The oracle arm: an upper reference for routing. It chooses with the
// kvmesh policy's cost model and weights (router.KVMeshConfig), but where
// kvmesh estimates — claims learnt from its own decisions, load from its
// own bookkeeping and scraped signals a scrape old — the oracle knows:
//
//   - what each backend really holds: Instance.CachedPrefix, the tokens the
//     engine would count as hits if it scheduled the request now (kvmesh:
//     claims);
//   - the prefill really queued ahead of a new request: the uncached
//     tokens, as the engines counted them at dispatch, of every request the
//     oracle sent to a backend that has not produced its first byte yet
//     (kvmesh: its estimate in prompt units from claims);
//   - each engine's current running sequences and KV usage (Instance.Load;
//     kvmesh: scraped).
//
// The gap between kvmesh and the oracle is the price of kvmesh's
// knowledge; the gap between the oracle and the infinite-cache bound is the
// price of the fleet's size and of the cost model itself.
//
// A router.Policy sees the request's canonical rendering, not its body, and
// CachedPrefix needs the body. So the oracle's router sits behind Handler,
// which registers each body under a hash of its rendering before the router
// sees it; the policy finds the body by the same hash. Handler also sees
// each answer's first byte, which ends that request's queued prefill.

// OracleBackend is what the oracle needs of one backend.
// *sim.Instance implements it.
type OracleBackend interface {
	CachedPrefix(body []byte, endpoint string) (cachedTokens, promptTokens int, err error)
	Load() sim.Load
}

// Oracle is the oracle policy. Build it with NewOracle, serve its router
// through Handler.
type Oracle struct {
	cfg      router.KVMeshConfig
	backends map[string]*oracleBackend // by router backend name
	seed     maphash.Seed

	mu      sync.Mutex
	pending map[uint64][]*oracleReq // registered requests by rendering hash

	avgPrompt atomic.Uint64 // float64 bits: moving average of prompt tokens
	misses    atomic.Uint64 // decisions made without a registered body

	// ScrapedLoad makes the oracle price the running count and KV usage the
	// router scraped (Candidate.Load, as kvmesh sees them) instead of the
	// engines' live ones: the arm "oracle+scraped", which measures what the
	// live signals are worth. Set it before the first decision.
	ScrapedLoad bool
	// Hold makes the oracle hold long prompts as kvmesh's late binding
	// does (router.KVMeshConfig.LateBinds and HoldFree, with the engines'
	// true queues): the arm "oracle+hold", the reference for kvmesh once
	// it holds. Set it before the first decision.
	Hold bool
	// Truth, when set, decides instead of the oracle's own cost: the
	// candidates' matches are the engines' true cache contents and Truth
	// (the kvmesh policy, for the arm "kvmesh+truth") chooses with them
	// (truth.go). Nothing is booked on the oracle's queues then: the
	// router books as usual. Set it before the first decision.
	Truth router.Policy
	// Peers, with Truth, are the other router nodes of a mesh arm whose
	// bookings replace the peer load in each candidate, read at the moment
	// of the decision (truth.go; the arm "kvmesh+truth+load").
	Peers []LocalLoader
}

type oracleBackend struct {
	b OracleBackend
	// queued is the prefill (uncached tokens) of the requests sent here
	// that have not produced their first byte yet.
	queued atomic.Int64
}

// oracleReq is one request between Handler and Choose.
type oracleReq struct {
	body []byte
	// path is the engines' endpoint for body (sim.ChatPath or
	// sim.CompletionPath; set by register): a completions prompt read as
	// a chat body would match nothing anywhere. "" for an endpoint the
	// engines do not generate on: no backend holds any of it.
	path string
	// Guarded by Oracle.mu: where its prefill is booked, and how much.
	at      *oracleBackend
	charged int64
	settled bool
}

// match is the question the oracle asks the engines of r's body (none
// for a nil r: an unregistered request matches nothing).
func (r *oracleReq) match() promptMatch {
	if r == nil {
		return promptMatch{}
	}
	return newPromptMatch(r.body, r.path)
}

// NewOracle returns an oracle policy over backends (keyed by the names the
// router's configuration gives them) with kvmesh's weights cfg.
func NewOracle(cfg router.KVMeshConfig, backends map[string]OracleBackend) *Oracle {
	o := &Oracle{cfg: cfg, backends: make(map[string]*oracleBackend, len(backends)),
		seed: maphash.MakeSeed(), pending: make(map[uint64][]*oracleReq)}
	for name, b := range backends {
		o.backends[name] = &oracleBackend{b: b}
	}
	// kvmesh's starting average is in bytes, about four per token.
	o.avgPrompt.Store(math.Float64bits(cfg.InitialPromptUnits / 4))
	return o
}

// Name implements router.Policy.
func (o *Oracle) Name() string { return PolicyOracle }

// Misses counts decisions for which no body was registered (they see no
// cached prefix anywhere). Non-zero means the oracle was not served
// through Handler.
func (o *Oracle) Misses() uint64 { return o.misses.Load() }

// Choose implements router.Policy with kvmesh's cost, in tokens:
//
//	cost_i = (PrefillWeight + CacheWeight) * (prompt - cached_i)
//	       + PendingWeight * queued_i + avg * LoadWeight * running_i
//	       + prompt * KVUsageWeight * max(0, kv_i - KVUsageThreshold) / (1 - KVUsageThreshold)
//
// divided by the backend's weight where kvmesh divides, with cached_i,
// running_i and kv_i the engine's own values, queued_i the prefill really
// queued ahead (see Oracle) and avg the moving average of prompt lengths.
// With one router there is no other router's queue to price. The lowest
// cost wins; ties go to the backend with the least queued prefill. With
// Hold, a long prompt that finds every engine with prefill queued is held
// (Decision.Hold, nothing booked) and decided again when a queue frees.
func (o *Oracle) Choose(req *router.Request, cands []router.Candidate, scores []float64) router.Decision {
	r := o.find(req)
	if r == nil {
		o.misses.Add(1)
	}
	if o.Truth != nil {
		return o.chooseTruth(req, cands, scores, r)
	}
	cfg := &o.cfg
	avg := math.Float64frombits(o.avgPrompt.Load())
	best, prompt := -1, 0
	var bestUncached, bestQueued int64
	m := r.match()
	defer m.release()
	for i := range cands {
		c := &cands[i]
		b := o.backends[c.Name]
		if b == nil {
			scores[i] = math.Inf(1)
			continue
		}
		cached := 0
		if ct, pt, ok := m.held(b.b); ok {
			cached, prompt = ct, pt
		}
		running, kv := o.load(b, c)
		queued := b.queued.Load()
		load := (cfg.PendingWeight*float64(queued) + avg*cfg.LoadWeight*running) / c.Weight
		cost := (cfg.PrefillWeight+cfg.CacheWeight)*float64(prompt-cached) + load
		cost += cfg.KVPenalty(float64(prompt), kv)
		scores[i] = cost
		if best < 0 || cost < scores[best] || (cost == scores[best] && queued < bestQueued) {
			best, bestUncached, bestQueued = i, int64(prompt-cached), queued
		}
	}
	if best < 0 {
		best = 0
	}
	if !req.Explain && req.Attempt == 0 && req.Held == 0 && prompt > 0 { // a request counts once, held or not
		o.avgPrompt.Store(math.Float64bits(avg + (float64(prompt)-avg)/64))
	}
	if o.Hold && req.HoldOK && r != nil && cfg.LateBinds(req, float64(bestUncached), avg) && o.busy(cands, avg) {
		return router.Decision{Index: best, Reason: router.ReasonCost, Hold: true} // nothing booked: decided again later
	}
	if !req.Explain && r != nil {
		o.book(r, o.backends[cands[best].Name], bestUncached)
	}
	return router.Decision{Index: best, Reason: router.ReasonCost, Learn: false}
}

// busy says whether every engine has prefill queued by late binding's
// measure (router.KVMeshConfig.HoldFree), in tokens per unit of weight.
func (o *Oracle) busy(cands []router.Candidate, avg float64) bool {
	floor, spare := o.cfg.HoldFree(avg, len(cands))
	free := 0
	for i := range cands {
		if b := o.backends[cands[i].Name]; b == nil || float64(b.queued.Load())/cands[i].Weight <= floor {
			if free++; free > spare {
				return false
			}
		}
	}
	return true
}

// load is the running count and KV usage Choose prices for c: the
// engine's live values, or with ScrapedLoad the router's last scraped ones
// (the running count weighted by its freshness as kvmesh weighs it; the KV
// usage as scraped, where kvmesh weighs its penalty too: in the benchmark
// the scrape is always fresh, weight 1, and the two agree).
func (o *Oracle) load(b *oracleBackend, c *router.Candidate) (running, kvUsage float64) {
	if o.ScrapedLoad {
		return c.Load.SignalWeight * c.Load.Running, c.Load.KVUsage
	}
	l := b.b.Load()
	return float64(l.Running), l.KVCacheUsage
}

// find returns a registered, unsettled request with req's rendering (the
// first one not yet booked, else the last booked: a retry), nil if none.
// Requests with the same rendering have the same prompt, so any of them
// answers CachedPrefix alike.
func (o *Oracle) find(req *router.Request) *oracleReq {
	if req.Prompt == nil {
		return nil
	}
	k := maphash.Bytes(o.seed, req.Prompt.Units)
	o.mu.Lock()
	defer o.mu.Unlock()
	var booked *oracleReq
	for _, r := range o.pending[k] {
		switch {
		case r.settled:
		case r.at == nil:
			return r
		default:
			booked = r
		}
	}
	return booked
}

// book puts r's uncached tokens on b's queue (moving them from an earlier
// attempt's backend).
func (o *Oracle) book(r *oracleReq, b *oracleBackend, tokens int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if r.settled || b == nil {
		return
	}
	if r.at != nil {
		r.at.queued.Add(-r.charged)
	}
	r.at, r.charged = b, tokens
	b.queued.Add(tokens)
}

// settle takes r's tokens off its backend's queue: its first byte came, or
// it ended without one.
func (o *Oracle) settle(r *oracleReq) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if r.settled {
		return
	}
	r.settled = true
	if r.at != nil {
		r.at.queued.Add(-r.charged)
	}
}

// register makes r findable by its body's rendering until unregister.
func (o *Oracle) register(ep router.Endpoint, r *oracleReq) (unregister func()) {
	switch ep {
	case router.EndpointChat:
		r.path = sim.ChatPath
	case router.EndpointCompletions:
		r.path = sim.CompletionPath
	}
	p := promptPool.Get().(*router.Prompt)
	defer promptPool.Put(p)
	p.Reset()
	if err := router.Render(ep, r.body, p); err != nil {
		return func() {} // the router will reject it too
	}
	k := maphash.Bytes(o.seed, p.Units)
	o.mu.Lock()
	o.pending[k] = append(o.pending[k], r)
	o.mu.Unlock()
	return func() {
		o.mu.Lock()
		defer o.mu.Unlock()
		list := o.pending[k]
		for i, x := range list {
			if x == r {
				list = append(list[:i], list[i+1:]...)
				break
			}
		}
		if len(list) == 0 {
			delete(o.pending, k)
		} else {
			o.pending[k] = list
		}
	}
}

var promptPool = sync.Pool{New: func() any { return new(router.Prompt) }}

// Handler wraps the oracle's router: it reads each routed request's body,
// registers it for the policy, hands the request on with the body restored,
// and takes the request's prefill off the queue at the answer's first byte
// (a streamed answer's first token; a non-streamed answer's whole body,
// which overstates the queue until then).
func (o *Oracle) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ep, ok := router.EndpointForPath(r.URL.Path)
		if !ok || r.Method != http.MethodPost {
			next.ServeHTTP(w, r)
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 64<<20))
		if err != nil {
			http.Error(w, "oracle: reading body: "+err.Error(), http.StatusBadRequest)
			return
		}
		or := &oracleReq{body: body}
		unregister := o.register(ep, or)
		defer func() {
			o.settle(or)
			unregister()
		}()
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.ContentLength = int64(len(body))
		next.ServeHTTP(&firstByteWriter{ResponseWriter: w, first: func() { o.settle(or) }}, r)
	})
}

// firstByteWriter calls first at the first body byte written.
type firstByteWriter struct {
	http.ResponseWriter
	first func()
	seen  bool
}

func (f *firstByteWriter) Write(p []byte) (int, error) {
	if !f.seen && len(p) > 0 {
		f.seen = true
		f.first()
	}
	return f.ResponseWriter.Write(p)
}

// Flush passes a flush on (the router streams).
func (f *firstByteWriter) Flush() {
	if fl, ok := f.ResponseWriter.(http.Flusher); ok {
		fl.Flush()
	}
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (f *firstByteWriter) Unwrap() http.ResponseWriter { return f.ResponseWriter }
