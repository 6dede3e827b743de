package bench

import (
	"errors"
	"fmt"
	"time"

	"github.com/rs/zerolog"

	"github.com/kvmesh/kvmesh/router"
	"github.com/kvmesh/kvmesh/tree"
)

// Config describes one experiment: which arms, how often, against which
// fleet, replayed how.
type Config struct {
	// Fleet starts a fresh fleet for every run (required). SimFleet gives
	// in-process simulated backends.
	Fleet FleetFactory
	// PreciseFleet starts the fleet of precise arms: Fleet's, with KV
	// events published (PreciseSimFleet). Default nil: precise arms are
	// refused.
	PreciseFleet FleetFactory

	// Models are the model names the backends serve, given to the routers
	// so they need no discovery. Default ["kvmesh-sim"], the simulator's and
	// the workload generators' default.
	Models []string

	// TimeScale is the fleet's simulated seconds per real second: arrival
	// times are divided by it and latencies multiplied, so every figure is
	// in simulated time. It must equal the fleet's. Default 1.
	TimeScale float64

	// Router is the routers' base configuration; Backends and Policy are
	// set per arm. Default router.DefaultConfig(), what a user gets.
	Router router.Config
	// ScaleRouterTimes divides the router's backend-related durations
	// (claim TTLs, scrape interval, signal ages, the kvmesh policy's hot
	// and block windows, the belief's lost TTL, SGLang's tree TTL: see
	// scaleRouterTimes), the index's claim refresh slack (TreeConfig) and
	// the mesh's flush and load intervals (MeshTimes) by TimeScale, so the
	// router sees the simulated backends as it would real ones. Default
	// true.
	ScaleRouterTimes bool
	// Tree configures every router node's claim index. Default
	// tree.DefaultConfig().
	Tree tree.Config
	// MeasureAvailable asks the simulated fleet, before each request, how
	// much of it the best-placed backend holds (RunResult.Reach and
	// RegretTokens). It reads every backend's cache per request: a few
	// hundred microseconds of the load generator's CPU. Default true.
	MeasureAvailable bool
	// ExplainHolders asks the router node, before each request, what it
	// thinks of the backend that holds the most of the prompt
	// (Sample.Holder: its claims there, their doubt, its cost against the
	// chosen backend's), to find why a request recomputed what was held.
	// Needs MeasureAvailable; costs the node one routing decision per
	// request, so latencies measured with it are not comparable. Default
	// false.
	ExplainHolders bool
	// Mesh builds the shared state of multi-node mesh arms; nil refuses
	// such arms. Default InMemoryMesh().
	Mesh SharedState

	// Fronts, when set, are router nodes someone else runs (the demo's
	// processes): nothing is deployed, requests go to these URLs, and each
	// arm's name only labels its runs. There must then be one run (one
	// arm, Repeats 1): the harness empties the backends' caches before each
	// run but cannot reset those routers, which would route a second run
	// on the first one's claims. Default none.
	Fronts []string

	// Arms are measured in this order in the first repeat, and in the
	// rows of a Williams design after it (rotation: each arm in every
	// position and after every other equally often). Default DefaultArms().
	Arms []Arm
	// Repeats is how often every arm runs. Default 3: the least that gives
	// a median and a spread.
	Repeats int
	// Replay paces the requests. Default DefaultReplayConfig().
	Replay ReplayConfig

	// MaxLag is how far behind the machine may fall before a run is not
	// trusted: the largest engine lag, and the 99th percentile of how late
	// the load generator sent requests it was not holding back on purpose
	// (wall clock). Latencies are wall time x TimeScale, so a starved CPU
	// inflates them; such a run is discarded and run again (Retries).
	// Default 100 ms: at time scale 10 that is a second of simulated time.
	MaxLag time.Duration
	// Retries is how often an untrusted run is run again (fresh fleet, same
	// position) before it is kept anyway, marked invalid. Default 2.
	Retries int

	// LagSampleEvery is how often the backends' engine lag is sampled (0 =
	// never). Default 1 s: cheap, and a lag lasts longer than that.
	LagSampleEvery time.Duration
	// EvictionOrder has the eviction-link arms (kvmesh+evict) keep the
	// router's copy of each engine's LRU queue and doubt by it
	// (router.PreciseConfig.EvictionOrder). Default the router's default
	// (on).
	EvictionOrder bool
	// KeepSamples stores every request's Sample in the results (the JSON
	// grows by ~150 bytes per request), and the router nodes' counters and
	// gauges at the end of each run (RunResult.Counters). Default false.
	KeepSamples bool

	// Progress shows progress (nil = none). Logger receives the routers'
	// logs and the harness's (one line per run at info).
	Progress *Progress
	Logger   zerolog.Logger
}

// DefaultConfig returns the defaults documented on Config, without a Fleet.
func DefaultConfig() Config {
	return Config{
		Models:           []string{"kvmesh-sim"},
		TimeScale:        1,
		Router:           router.DefaultConfig(),
		ScaleRouterTimes: true,
		MeasureAvailable: true,
		Tree:             tree.DefaultConfig(),
		Mesh:             InMemoryMesh(),
		Arms:             DefaultArms(),
		Repeats:          3,
		Replay:           DefaultReplayConfig(),
		LagSampleEvery:   time.Second,
		EvictionOrder:    router.DefaultPreciseConfig().EvictionOrder,
		MaxLag:           100 * time.Millisecond,
		Retries:          2,
		Logger:           zerolog.Nop(),
	}
}

// Validate reports every setting that cannot work.
func (c *Config) Validate() error {
	var errs []error
	if c.Fleet == nil {
		errs = append(errs, errors.New("bench: Config.Fleet is required"))
	}
	if len(c.Models) == 0 {
		errs = append(errs, errors.New("bench: Config.Models must name the served model"))
	}
	if !(c.TimeScale > 0) {
		errs = append(errs, fmt.Errorf("bench: TimeScale must be positive, got %v", c.TimeScale))
	}
	if len(c.Arms) == 0 {
		errs = append(errs, errors.New("bench: no arms"))
	}
	names := map[string]bool{}
	for _, a := range c.Arms {
		if names[a.Name] {
			errs = append(errs, fmt.Errorf("bench: arm %q appears twice", a.Name))
		}
		names[a.Name] = true
		if a.Nodes < 1 {
			errs = append(errs, fmt.Errorf("bench: arm %q has %d nodes", a.Name, a.Nodes))
		}
		if a.meshed() && c.Mesh == nil {
			errs = append(errs, fmt.Errorf("bench: arm %q needs a mesh, and Config.Mesh is nil", a.Name))
		}
		if _, err := c.fleetFor(a); err != nil && len(c.Fronts) == 0 {
			errs = append(errs, err)
		}
	}
	if c.Repeats < 1 {
		errs = append(errs, fmt.Errorf("bench: Repeats must be at least 1, got %d", c.Repeats))
	}
	if len(c.Fronts) > 0 && (c.Repeats > 1 || len(c.Arms) > 1) {
		errs = append(errs, fmt.Errorf("bench: %d arms x %d repeats with Fronts: the external routers would keep one run's claims into the next while the backends restart empty; make one run (one arm, one repeat) per start of the routers", len(c.Arms), c.Repeats))
	}
	rp := c.Replay
	rp.TimeScale = max(c.TimeScale, 1e-9)
	if err := rp.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := c.Tree.Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
