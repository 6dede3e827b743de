package router

import (
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
	slot   int    // index in Router.backends, stable for the router's life
	name   string // BackendConfig.Name (or URL)
	base   string // URL without a trailing slash
	host   string // for the outgoing Host header
	scheme string
	id     tree.BackendID // id in the shared Index (registered by name)
	hash   uint64         // stable hash of name: rendezvous and hash rings agree across nodes
	weight float64
	static []string // configured models; nil = discovered

	inFlight atomic.Int64

	// healthy is false while the backend is ejected.
	healthy atomic.Bool
	mu      sync.Mutex // guards the health fields below
	health  healthState

	// orca is the last in-band report (endpoint-load-metrics), scrape the
	// last scraped /metrics page.
	orca, scrape signal
	// discovered is the model list from the backend's GET /v1/models.
	discovered atomic.Pointer[[]modelEntry]

	cachedTokens prometheus.Counter
	promptTokens prometheus.Counter
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
		slot:   slot,
		name:   name,
		base:   strings.TrimRight(u.Scheme+"://"+u.Host+u.Path, "/"),
		host:   u.Host,
		scheme: u.Scheme,
		id:     id,
		hash:   stableHash(name),
		weight: bc.effectiveWeight(),
	}
	if len(bc.Models) > 0 {
		b.static = append([]string(nil), bc.Models...)
	}
	b.healthy.Store(true) // optimistic until a probe or a request says otherwise
	b.cachedTokens = m.cachedTokens.WithLabelValues(name)
	b.promptTokens = m.promptTokens.WithLabelValues(name)
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

// loadView is the backend's load as policies see it at now.
func (b *backend) loadView(now time.Time, cfg *Config) LoadView {
	lv := LoadView{InFlight: int(b.inFlight.Load())}
	freshest(now, &b.orca, &b.scrape, cfg, &lv)
	return lv
}

// stableHash is FNV-1a 64 of s, finished with a mixer: the same on every
// node, so hash-based placements agree without coordination.
func stableHash(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return mix64(h)
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
