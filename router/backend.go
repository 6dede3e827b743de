package router

import (
	"math"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvmesh/kvmesh/tree"
)

// backend is one configured server and everything the router knows about
// it. Fields read on the request path are atomics; health transitions take
// mu.
type backend struct {
	slot int    // stable per name for the router's life (backends.go), < tree MaxBackends
	name string // BackendConfig.Name (or URL)
	base string // URL without a trailing slash
	// url is base parsed: proxied requests copy it and append the client's
	// path, so no request parses a URL.
	url    url.URL
	id     tree.BackendID // id in the shared Index (registered by name)
	hash   uint64         // stable hash of name: rendezvous and hash rings agree across nodes
	weight float64
	static []string // configured models; nil = discovered
	// capConfigured: the KV capacity is configured, not read from metrics.
	capConfigured bool

	inFlight atomic.Int64
	// pendingUnits and pendingRequests are the prefill this router has
	// queued at the backend: the estimated uncached prompt units (and the
	// number) of its requests sent there whose first answer byte has not
	// arrived yet (see pendingPrefill).
	pendingUnits    atomic.Int64
	pendingRequests atomic.Int64
	// queue follows the same requests in the order they were sent, to
	// notice one whose prefill outlasts its booking (overdue.go).
	queue prefillQueue
	// bound counts the requests this router sent here for a prefix the
	// backend held (blocking.go).
	bound arrivalRate
	// written counts every uncached prompt unit this router has sent the
	// backend (the pending units it ever booked, each dispatch's at most a
	// capacity: addPending): what it wrote into the backend's cache. The
	// counter is shared with the backend's later objects of the same name
	// (backend_carry.go): a request still in flight on an object that was
	// rebuilt or removed counts on the same total.
	written *atomic.Int64
	// gone is set when the backend's name leaves the router (sweepRemoved;
	// shared with its rebuilt objects, as written): a request still in
	// flight then learns nothing more for it, for its registry id may be
	// given to another name (tree.Index.ForgetRemoved) before it ends.
	gone *atomic.Bool
	// booked, if set, is told every change of the pending counts (the
	// mesh's load channel ships them at once: PeerLoad.BookingsChanged).
	booked func()
	// freed, if set, is told each booking that ends (hold.go wakes the
	// requests it holds).
	freed func()

	// healthy is false while the backend is ejected.
	healthy atomic.Bool
	// draining: out of rotation (drained by an operator, or no longer
	// listed and being removed) while its requests in flight finish;
	// removing: the latter (backends.go).
	draining, removing atomic.Bool
	mu                 sync.Mutex // guards the health fields below
	health             healthState

	// orca is the last in-band report (endpoint-load-metrics), scrape the
	// last scraped /metrics page.
	orca, scrape signal
	// discovered is the model list from the backend's GET /v1/models.
	discovered atomic.Pointer[[]modelEntry]

	// edge is what its engine's evictions say of its LRU, on an
	// eviction-link backend (evictedge.go).
	edge evictionEdge
	// order is its engine's LRU as this router sees it, on an
	// eviction-link backend with PreciseConfig.EvictionOrder
	// (evictorder.go).
	order *evictOrder

	// belief models the backend's cache turnover (belief.go).
	belief cacheBelief

	cachedTokens prometheus.Counter
	promptTokens prometheus.Counter
	// prefixRoutes counts prefix routes refuted [0] and confirmed [1] by
	// the answer (routing precision), and routes on doubted claims refuted
	// [2] and confirmed [3].
	prefixRoutes [4]prometheus.Counter
	ejections    prometheus.Counter
	invalidated  prometheus.Counter
}

// modelEntry is one model a backend serves, with the backend's own JSON
// object for it (from GET /v1/models), if it was discovered.
type modelEntry struct {
	ID  string
	Raw []byte // the backend's object for the model; nil when configured
}

func newBackend(slot int, bc BackendConfig, ix *tree.Index, m *metrics) (*backend, error) {
	u, err := url.Parse(bc.URL)
	if err != nil {
		return nil, err
	}
	name := bc.effectiveName()
	id, err := ix.EnsureBackend(name)
	if err != nil {
		return nil, err
	}
	b := &backend{
		slot:    slot,
		name:    name,
		base:    strings.TrimRight(u.Scheme+"://"+u.Host+u.Path, "/"),
		url:     url.URL{Scheme: u.Scheme, Host: u.Host, Path: strings.TrimRight(u.Path, "/")},
		id:      id,
		hash:    stableHash(name),
		weight:  bc.effectiveWeight(),
		written: new(atomic.Int64),
		gone:    new(atomic.Bool),
		order:   newEvictOrder(),
	}
	if len(bc.Models) > 0 {
		b.static = append([]string(nil), bc.Models...)
	}
	b.healthy.Store(true) // optimistic until a probe or a request says otherwise
	b.belief.init()
	b.belief.capTokens.Store(bc.KVCapacityTokens)
	b.capConfigured = bc.KVCapacityTokens > 0
	b.cachedTokens = m.cachedTokens.WithLabelValues(name)
	b.promptTokens = m.promptTokens.WithLabelValues(name)
	b.prefixRoutes = [4]prometheus.Counter{m.prefixRoutes.WithLabelValues(name, "refuted"), m.prefixRoutes.WithLabelValues(name, "confirmed"),
		m.prefixRoutes.WithLabelValues(name, "doubt-refuted"), m.prefixRoutes.WithLabelValues(name, "doubt-confirmed")}
	b.ejections = m.ejections.WithLabelValues(name)
	b.invalidated = m.invalidations.WithLabelValues(name)
	return b, nil
}

// models returns the models the backend serves: the configured list, or
// the last discovered one.
func (b *backend) models() []modelEntry {
	if b.static != nil {
		out := make([]modelEntry, len(b.static))
		for i, m := range b.static {
			out[i] = modelEntry{ID: m}
		}
		return out
	}
	if p := b.discovered.Load(); p != nil {
		return *p
	}
	return nil
}

// loadView is the backend's load as policies see it at now: this node's
// bookings, its peers' (nil without a mesh) and the backend's own signals.
func (b *backend) loadView(now time.Time, cfg *Config, peers PeerLoad) LoadView {
	lv := LoadView{InFlight: int(b.inFlight.Load()), PendingPrefill: float64(b.pendingUnits.Load()),
		PendingRequests: int(b.pendingRequests.Load())}
	lv.HeadBooked, lv.HeadPrompt, lv.HeadProgress = b.queue.head(now)
	lv.BoundRate, lv.PrefillRate = b.boundView(now, &cfg.KVMesh)
	if peers != nil {
		lv.PeerPendingPrefill, lv.PeerPendingRequests, lv.PeerInFlight = peers.PeerLoad(b.id)
	}
	freshest(now, &b.orca, &b.scrape, cfg, &lv)
	return lv
}

// stableHash is FNV-1a 64 of s, finished with a mixer: the same on every
// node, so hash-based placements agree without coordination.
func stableHash[T string | []byte](s T) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return mix64(h)
}

// pendingPrefill is one attempt's share of its backend's pending prefill:
// added at dispatch, released exactly once, when the first answer byte
// arrives (the prefill is done) or when the attempt ends without one. It
// belongs to the goroutine serving the request.
type pendingPrefill struct {
	b     *backend
	units int64
	at    time.Time // when it was booked
	seq   uint64    // its place in b.queue
	ahead float64   // the units booked ahead of its first byte then, its own included
}

// addPending counts units of uncached prompt (of a prompt of prompt
// units) as queued at b from now, for a request whose first answer byte
// ends its prefill.
func (b *backend) addPending(units, prompt int, now time.Time) pendingPrefill {
	return b.addPendingAs(units, prompt, false, now)
}

// addPendingAs is addPending for a request that is silent or not: a
// silent one's first byte comes only after its generation (prefillQueue).
func (b *backend) addPendingAs(units, prompt int, silent bool, now time.Time) pendingPrefill {
	u := int64(max(units, 0))
	b.pendingUnits.Add(u)
	b.pendingRequests.Add(1)
	b.written.Add(b.writable(u))
	seq, ahead := b.queue.bookAs(float64(u), float64(max(prompt, units, 0)), silent, now)
	if b.booked != nil {
		b.booked()
	}
	return pendingPrefill{b: b, units: u, at: now, seq: seq, ahead: ahead}
}

// writable is what a dispatch of u uncached units adds to b.written: u, at
// most the backend's capacity when it is known. The count is written before
// the backend has looked at the prompt and, shared with the mesh, never
// goes back, so a prompt the backend rejects (one past the model's context
// length answers 400 in milliseconds) still ages every claim on it: by up
// to one capacity, the doubt edge at the default belief.doubt_beyond (a 30
// MB prompt added eight before the cap). No prompt that is computed writes
// more than the whole cache. Adding the part past an eighth of a capacity
// only at a 2xx answer's first byte fixed the rejected case and cost the
// benchmarks (docs/claims.md, "A rejected prompt's writes").
func (b *backend) writable(u int64) int64 {
	if k := math.Float64frombits(b.belief.kappa.Load()); k > 0 && k < float64(u) {
		return int64(k)
	}
	return u
}

// release takes the attempt's units off its backend at now; firstByte says
// its answer's first byte came (its prefill is done). Later calls do
// nothing.
func (p *pendingPrefill) release(now time.Time, firstByte bool) {
	if p.b == nil {
		return
	}
	restated := p.b.queue.settle(p.seq, p.ahead, p.at, now, firstByte)
	p.b.pendingUnits.Add(-p.units - int64(restated))
	p.b.pendingRequests.Add(-1)
	if p.b.booked != nil {
		p.b.booked()
	}
	if p.b.freed != nil {
		p.b.freed()
	}
	p.b = nil
}

// mix64 is splitmix64's finalizer: a bijection that spreads every input bit.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
