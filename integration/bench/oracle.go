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
// in-flight counts and scraped queues a scrape old — the oracle knows what
// each backend really holds (Instance.CachedPrefix: the tokens the engine
// would count as hits if it scheduled the request now) and how loaded it
// really is (Instance.Load: running and waiting sequences, KV usage, at the
// last engine step). The gap between kvmesh and the oracle is the price of
// kvmesh's knowledge; the gap between the oracle and the infinite-cache
// bound is the price of the fleet's size and of the cost model itself.
//
// A router.Policy sees the request's canonical rendering, not its body, and
// CachedPrefix needs the body. So the oracle's router sits behind Handler,
// which registers each body under a hash of its rendering before the router
// sees it; the policy finds the body by the same hash.

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
	backends map[string]OracleBackend // by router backend name
	seed     maphash.Seed

	mu      sync.Mutex
	pending map[uint64][]*oracleReq // registered bodies by rendering hash

	avgPrompt atomic.Uint64 // float64 bits: moving average of prompt tokens
	misses    atomic.Uint64 // decisions made without a registered body
}

// oracleReq is one request between Handler and Choose.
type oracleReq struct{ body []byte }

// NewOracle returns an oracle policy over backends (keyed by the names the
// router's configuration gives them) with kvmesh's weights cfg.
func NewOracle(cfg router.KVMeshConfig, backends map[string]OracleBackend) *Oracle {
	o := &Oracle{cfg: cfg, backends: backends, seed: maphash.MakeSeed(), pending: make(map[uint64][]*oracleReq)}
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
//	cost_i = PrefillWeight * (prompt - cached_i)
//	       + avg * (LoadWeight * active_i + QueueWeight * waiting_i) / weight_i
//	       + avg * KVUsageWeight * max(0, kv_i - KVUsageThreshold) / (1 - KVUsageThreshold)
//
// with cached_i, waiting_i and kv_i the backend's real values, active_i the
// larger of its real running+waiting and the requests the router has in
// flight there (those include requests still on their way), and avg the
// moving average of prompt lengths. The lowest cost wins; ties go to the
// backend with the fewest active requests.
func (o *Oracle) Choose(req *router.Request, cands []router.Candidate, scores []float64) router.Decision {
	r := o.claim(req)
	if r == nil {
		o.misses.Add(1)
	}
	cfg := &o.cfg
	avg := math.Float64frombits(o.avgPrompt.Load())
	best, bestActive, prompt := -1, 0, 0
	for i := range cands {
		c := &cands[i]
		b := o.backends[c.Name]
		if b == nil {
			scores[i] = math.Inf(1)
			continue
		}
		cached := 0
		if r != nil {
			if ct, pt, err := b.CachedPrefix(r.body, sim.ChatPath); err == nil {
				cached, prompt = ct, pt
			}
		}
		l := b.Load()
		active := max(c.Load.InFlight, l.Running+l.Waiting)
		cost := cfg.PrefillWeight * float64(prompt-cached)
		cost += avg * (cfg.LoadWeight*float64(active) + cfg.QueueWeight*float64(l.Waiting)) / c.Weight
		if l.KVCacheUsage > cfg.KVUsageThreshold {
			cost += avg * cfg.KVUsageWeight * (l.KVCacheUsage - cfg.KVUsageThreshold) / (1 - cfg.KVUsageThreshold)
		}
		scores[i] = cost
		if best < 0 || cost < scores[best] || (cost == scores[best] && active < bestActive) {
			best, bestActive = i, active
		}
	}
	if best < 0 {
		best = 0
	}
	if !req.Explain && req.Attempt == 0 && prompt > 0 {
		o.avgPrompt.Store(math.Float64bits(avg + (float64(prompt)-avg)/64))
	}
	return router.Decision{Index: best, Reason: router.ReasonCost, Learn: false}
}

// claim returns a registered request with req's rendering, nil if none.
// Requests with the same rendering have the same prompt, so any of them
// answers CachedPrefix alike.
func (o *Oracle) claim(req *router.Request) *oracleReq {
	if req.Prompt == nil {
		return nil
	}
	k := maphash.Bytes(o.seed, req.Prompt.Units)
	o.mu.Lock()
	defer o.mu.Unlock()
	if list := o.pending[k]; len(list) > 0 {
		return list[0]
	}
	return nil
}

// register makes r findable by its body's rendering until unregister.
func (o *Oracle) register(ep router.Endpoint, r *oracleReq) (unregister func()) {
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
// registers it for the policy and hands the request on with the body
// restored. The body stays registered until the router has answered.
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
		unregister := o.register(ep, &oracleReq{body: body})
		defer unregister()
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.ContentLength = int64(len(body))
		next.ServeHTTP(w, r)
	})
}
