package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/rs/zerolog"

	"github.com/kvmesh/kvmesh/mesh"
	"github.com/kvmesh/kvmesh/router"
	"github.com/kvmesh/kvmesh/tree"
)

// SharedState builds the learners of n router nodes that share claims (the
// mesh), each writing into its node's index. close stops whatever it
// started. InMemoryMesh is kvmesh's.
type SharedState func(ctx context.Context, indexes []*tree.Index, opts MeshOptions, log zerolog.Logger) (learners []router.Learner, close func() error, err error)

// MeshOptions are a mesh arm's settings.
type MeshOptions struct {
	// ShareLoad: the nodes also share their bookings (a learner that does
	// is a router.PeerLoad and takes its router through SetLoadSource).
	ShareLoad bool
	// TimeScale divides the mesh's own intervals (claim flushes, load
	// sends) when Config.ScaleRouterTimes is set, so that replication is
	// as fast against the simulated backends as it is against real ones:
	// 10 ms between flushes is 100 ms of simulated time at scale 10.
	TimeScale float64
}

// loadSharer is a learner that shares its router's bookings (mesh.Node).
type loadSharer interface {
	router.PeerLoad
	SetLoadSource(mesh.LoadSource)
	LoadSent() (messages, bytes uint64)
}

// deployment is one arm's router nodes in front of one fleet.
type deployment struct {
	fronts  []string // node base URLs
	nodes   []*routerNode
	indexes []*tree.Index // per node
	oracles []*Oracle     // per node: the oracle arm's, kvmesh+truth's
	closeFn func() error  // shared state (mesh)
	// shadow decides every request as one router seeing all the traffic
	// would (multi-node arms).
	shadow *shadowRouter
	// sharers are the nodes' load channels (mesh arms sharing load).
	sharers []loadSharer
	// preciseClose stops the KV-event consumers of a precise arm.
	preciseClose func()
}

type routerNode struct {
	rt   *router.Router
	reg  *prometheus.Registry
	srv  *http.Server
	done chan struct{}
}

// RouterConfig is cfg.Router for a policy over the backends at urls, with its
// time settings on the simulated clock.
func RouterConfig(cfg *Config, policy string, urls []string) router.Config {
	rc := cfg.Router
	rc.Policy = policy
	if policy == PolicyOracle {
		rc.Policy = router.PolicyKVMesh // placeholder: Deps.Policy overrides it
	}
	rc.Backends = make([]router.BackendConfig, len(urls))
	for i, u := range urls {
		rc.Backends[i] = router.BackendConfig{Name: BackendName(i), URL: u, Models: cfg.Models}
	}
	if cfg.ScaleRouterTimes && cfg.TimeScale > 1 { // as TreeConfig, the mesh's and precise mode's times
		scaleRouterTimes(&rc, cfg.TimeScale)
	}
	return rc
}

// TreeConfig is cfg.Tree with its time setting (how stale a claim's
// timestamp may get) on the simulated clock, like the router's.
func TreeConfig(cfg *Config) tree.Config {
	tc := cfg.Tree
	if cfg.ScaleRouterTimes && cfg.TimeScale > 1 && tc.RefreshMaxMillis > 0 {
		tc.RefreshMaxMillis = max(int64(float64(tc.RefreshMaxMillis)/cfg.TimeScale), 1)
	}
	return tc
}

// scaleRouterTimes divides the router's durations that are about the
// backends' behaviour (how long a cache keeps a prefix, how fast queues
// change) by the time scale, so the router sees the simulated backends as
// it would see real ones. Timeouts about the machine itself (dial, header,
// probe) are left alone.
func scaleRouterTimes(rc *router.Config, scale float64) {
	sc := func(d *time.Duration, floor time.Duration) {
		*d = max(time.Duration(float64(*d)/scale), floor)
	}
	sc(&rc.ProvisionalTTL, time.Millisecond)
	sc(&rc.ConfirmedTTL, time.Millisecond)
	sc(&rc.ScrapeInterval, 20*time.Millisecond) // a floor: scraping faster only burns CPU
	sc(&rc.SignalFresh, 0)
	sc(&rc.SignalMaxAge, 2*rc.ScrapeInterval)
	if rc.SignalFresh >= rc.SignalMaxAge {
		rc.SignalFresh = rc.SignalMaxAge / 2
	}
	sc(&rc.KVMesh.HotWindow, time.Millisecond)
	sc(&rc.KVMesh.BlockWindow, time.Millisecond)
	sc(&rc.KVMesh.HoldMax, time.Millisecond)
	if rc.Belief.LostTTL > 0 {
		sc(&rc.Belief.LostTTL, time.Millisecond)
	}
	sc(&rc.SGLang.TreeTTL, time.Second)
}

// deploy starts arm's router nodes in front of fleet.
func deploy(ctx context.Context, cfg *Config, arm Arm, fleet Fleet) (_ *deployment, err error) {
	urls := fleet.URLs()
	rc := RouterConfig(cfg, arm.Policy, urls)
	d := &deployment{}
	defer func() {
		if err != nil {
			d.Close()
		}
	}()

	indexes := make([]*tree.Index, arm.Nodes)
	for i := range indexes {
		if indexes[i], err = tree.New(TreeConfig(cfg)); err != nil {
			return nil, err
		}
	}
	d.indexes = indexes
	learners := make([]router.Learner, arm.Nodes)
	switch {
	case arm.meshed():
		if cfg.Mesh == nil {
			return nil, errors.New("bench: mesh arms need Config.Mesh (package mesh is not wired in)")
		}
		opts := MeshOptions{ShareLoad: arm.State == StateMesh, TimeScale: meshTimeScale(cfg)}
		if learners, d.closeFn, err = cfg.Mesh(ctx, indexes, opts, cfg.Logger); err != nil {
			return nil, fmt.Errorf("bench: starting the mesh: %w", err)
		}
	default:
		for i := range learners {
			learners[i] = router.NewLocalLearner(indexes[i], fmt.Sprintf("node-%d", i))
		}
	}
	if arm.Nodes > 1 {
		if d.shadow, err = newShadowRouter(rc, TreeConfig(cfg), arm.Tokens, cfg.Replay.Path); err != nil {
			return nil, err
		}
	}

	// The oracle's view of the engines, for the oracle arm and for
	// kvmesh+truth: each node gets an Oracle of its own (its policy's
	// state, its registered bodies), all asking the same engines.
	var engines map[string]OracleBackend
	if arm.Policy == PolicyOracle || arm.Truth {
		view := fleet.Oracle()
		if view == nil {
			return nil, errors.New("bench: this fleet cannot answer the oracle")
		}
		engines = make(map[string]OracleBackend, len(view.Backends))
		for i, b := range view.Backends {
			engines[BackendName(i)] = b
		}
	}

	for i := range arm.Nodes {
		var policy router.Policy
		var oracle *Oracle
		if engines != nil {
			oracle = NewOracle(rc.KVMesh, engines)
			oracle.ScrapedLoad, oracle.Hold = arm.ScrapedLoad, arm.Hold
			if arm.Truth {
				if oracle.Truth, err = router.NewPolicy(arm.Policy, rc, indexes[i]); err != nil {
					return nil, err
				}
			}
			d.oracles = append(d.oracles, oracle)
			policy = oracle
		}
		reg := prometheus.NewRegistry()
		deps := router.Deps{
			Index:      indexes[i],
			Learner:    learners[i],
			Logger:     cfg.Logger.With().Int("node", i).Logger(),
			Registerer: reg,
			Policy:     policy,
		}
		if arm.Tokens {
			deps.Tokenizer = router.WordTokenizer{}
		}
		if arm.Precise || arm.Evictions {
			scale := 1.0
			if cfg.ScaleRouterTimes {
				scale = cfg.TimeScale
			}
			deps.Precise = preciseRouterConfig(&rc, TreeConfig(cfg), arm.Evictions, cfg.EvictionOrder, scale)
		}
		ls, sharing := learners[i].(loadSharer)
		if sharing {
			deps.Peers = ls
			d.sharers = append(d.sharers, ls)
		}
		if d.shadow != nil {
			deps.Learner = &teeLearner{Learner: learners[i], nodeIx: indexes[i], shadow: d.shadow}
		}
		rt, err := router.New(rc, deps)
		if err != nil {
			return nil, err
		}
		if sharing {
			ls.SetLoadSource(rt)
		}
		n := &routerNode{rt: rt, reg: reg, done: make(chan struct{})}
		d.nodes = append(d.nodes, n)
		if err := rt.Start(ctx); err != nil {
			return nil, err
		}
		var api http.Handler = rt
		if oracle != nil {
			api = oracle.Handler(rt)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		h := NodeMux(api, rt.AdminHandler(), reg)
		if mh := adminHandlerOf(learners[i]); mh != nil {
			m := http.NewServeMux()
			m.Handle("/admin/mesh", mh)
			m.Handle("/", h)
			h = m
		}
		n.srv = &http.Server{Handler: h, ReadHeaderTimeout: rc.ReadHeaderTimeout}
		go func() {
			defer close(n.done)
			_ = n.srv.Serve(ln)
		}()
		d.fronts = append(d.fronts, "http://"+ln.Addr().String())
	}
	if arm.TrueLoad {
		d.linkTrueLoad()
	}
	if arm.Precise || arm.Evictions {
		if err := d.startPrecise(ctx, cfg, TreeConfig(cfg), arm, fleet, learners); err != nil {
			return nil, err
		}
	}
	if d.shadow != nil {
		rts := make([]*router.Router, len(d.nodes))
		for i, n := range d.nodes {
			rts[i] = n.rt
		}
		if err := d.shadow.watch(ctx, rts, indexes); err != nil {
			return nil, err
		}
	}
	return d, nil
}

// loadBytesPerRequestPeer is what the load channel cost: bytes the nodes
// sent over it per request they routed, per peer; 0 without one.
func (d *deployment) loadBytesPerRequestPeer() float64 {
	if len(d.sharers) < 2 {
		return 0
	}
	var bytes, routed float64
	for i, s := range d.sharers {
		_, b := s.LoadSent()
		bytes += float64(b)
		routed += float64(d.nodes[i].rt.Routed())
	}
	if routed == 0 {
		return 0
	}
	return bytes / routed / float64(len(d.sharers)-1)
}

// NodeMux serves a router node on one listener: the API, the admin
// endpoints (/admin/, /debug/, /healthz, /readyz) and /metrics from reg.
func NodeMux(api, admin http.Handler, reg *prometheus.Registry) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/", api)
	for _, p := range []string{"/admin/", "/debug/", "/healthz", "/readyz"} {
		mux.Handle(p, admin)
	}
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	return mux
}

// Close stops the nodes' servers and routers and the shared state.
func (d *deployment) Close() {
	if d.preciseClose != nil {
		d.preciseClose()
	}
	for _, n := range d.nodes {
		if n.srv != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			if n.srv.Shutdown(ctx) != nil {
				n.srv.Close()
			}
			cancel()
			<-n.done
		}
		n.rt.Close()
	}
	if d.shadow != nil {
		d.shadow.Close()
	}
	if d.closeFn != nil {
		_ = d.closeFn()
	}
}

// decisions sums kvmesh_router_decisions_total by reason over the nodes.
func (d *deployment) decisions() map[string]float64 {
	out := map[string]float64{}
	for _, n := range d.nodes {
		mfs, err := n.reg.Gather()
		if err != nil {
			continue
		}
		for _, mf := range mfs {
			if mf.GetName() != "kvmesh_router_decisions_total" {
				continue
			}
			for _, m := range mf.GetMetric() {
				out[labelValue(m, "reason")] += m.GetCounter().GetValue()
			}
		}
	}
	return out
}

// counters sums every counter and gauge of the router nodes' registries
// over the nodes, keyed by name and labels in the exposition format
// (`kvmesh_router_decisions_total{reason="prefix"}`): the run's router-side
// story (eviction links made and fired, KV events the mappers could not
// place, ...) for RunResult.Counters. Histograms and summaries are left out.
func (d *deployment) counters() map[string]float64 {
	out := map[string]float64{}
	var key strings.Builder
	for _, n := range d.nodes {
		mfs, err := n.reg.Gather()
		if err != nil {
			continue
		}
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				var v float64
				switch {
				case m.Counter != nil:
					v = m.GetCounter().GetValue()
				case m.Gauge != nil:
					v = m.GetGauge().GetValue()
				default:
					continue
				}
				key.Reset()
				key.WriteString(mf.GetName())
				for i, l := range m.GetLabel() {
					if i == 0 {
						key.WriteByte('{')
					} else {
						key.WriteByte(',')
					}
					fmt.Fprintf(&key, "%s=%q", l.GetName(), l.GetValue())
				}
				if len(m.GetLabel()) > 0 {
					key.WriteByte('}')
				}
				out[key.String()] += v
			}
		}
	}
	return out
}

// BackendBelief is one router node's cache model of one backend.
type BackendBelief struct {
	Backend string            `json:"backend"`
	Belief  router.BeliefJSON `json:"belief"`
}

// beliefs is the first node's cache model of each backend (nil when the
// arm has no router node or its belief is off).
func (d *deployment) beliefs() []BackendBelief {
	if len(d.nodes) == 0 || !d.nodes[0].rt.Config().Belief.Enabled {
		return nil
	}
	var out []BackendBelief
	for _, b := range d.nodes[0].rt.Backends() {
		out = append(out, BackendBelief{Backend: b.Name, Belief: b.Belief})
	}
	return out
}

func labelValue(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// linkTrueLoad gives each node's Oracle the other nodes' routers (the arm
// "kvmesh+truth+load"), once every node exists and before any request.
func (d *deployment) linkTrueLoad() {
	for i, o := range d.oracles {
		for j, n := range d.nodes {
			if j != i {
				o.Peers = append(o.Peers, n.rt)
			}
		}
	}
}
