package bench

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/kvmesh/kvmesh/integration/sim"
	"github.com/kvmesh/kvmesh/mesh"
	"github.com/kvmesh/kvmesh/router"
	"github.com/kvmesh/kvmesh/router/kvevents"
	"github.com/kvmesh/kvmesh/tree"
)

// Precise arms ("kvmesh-precise", "kvmesh-precise:8:mesh") run kvmesh in
// precise mode (docs/precise.md) against a fleet whose backends publish
// their KV-cache events (Config.PreciseFleet): every backend is a precise
// backend; the routers key requests by the backends' own tokens (their
// POST /tokenize) and the events' claims are written through each node's
// learner: alone, into its own index; in a mesh, each engine's stream is
// consumed by its rendezvous owner among the alive members and
// replicated.

// PolicyPrecise names the precise arm in arm specs; its policy is kvmesh.
const PolicyPrecise = "kvmesh-precise"

// KVEventsFleet is a fleet whose backends publish KV events.
type KVEventsFleet interface {
	// KVEventEndpoints are each backend's event publisher and replay
	// socket, in URLs order ("" for a backend without).
	KVEventEndpoints() (pub, replay []string)
}

// PreciseSimFleet starts in-process simulated fleets of n backends with
// cfg whose engines publish KV events on loopback (each its own port,
// with a replay socket), for precise arms.
func PreciseSimFleet(n int, cfg sim.Config) FleetFactory {
	cfg.KVEvents = sim.KVEventsConfig{Endpoint: "tcp://127.0.0.1:0", ReplayEndpoint: "tcp://127.0.0.1:0"}
	return SimFleet(n, cfg)
}

func (s *simFleet) KVEventEndpoints() (pub, replay []string) {
	for _, in := range s.f.Instances() {
		pub = append(pub, in.KVEventsEndpoint())
		replay = append(replay, in.KVEventsReplayEndpoint())
	}
	return pub, replay
}

// fleetFor is the fleet factory of arm's runs.
func (c *Config) fleetFor(a Arm) (FleetFactory, error) {
	if !a.Precise && !a.Evictions {
		return c.Fleet, nil
	}
	if c.PreciseFleet == nil {
		return nil, fmt.Errorf("bench: arm %q needs a fleet publishing KV events (Config.PreciseFleet)", a.Name)
	}
	return c.PreciseFleet, nil
}

// preciseRouterConfig is the routers' precise mode for every backend, or
// with evictions eviction-link mode (kvmesh+evict, keeping the eviction
// order with order), with engine blocks of the index's size; its eviction
// lag, about the engines' steps, divided by scale (the time scale, when the
// router's times are scaled).
func preciseRouterConfig(rc *router.Config, tc tree.Config, evictions, order bool, scale float64) *router.PreciseConfig {
	pc := router.DefaultPreciseConfig()
	for _, b := range rc.Backends {
		if evictions {
			pc.EvictionBackends = append(pc.EvictionBackends, b.Name)
		} else {
			pc.Backends = append(pc.Backends, b.Name)
		}
	}
	pc.EngineBlockTokens = tc.BlockTokens
	pc.EvictionOrder = evictions && order
	if scale > 1 && pc.EvictionLag > 0 { // about the engines' steps, like scaleRouterTimes' settings
		pc.EvictionLag = max(time.Duration(float64(pc.EvictionLag)/scale), time.Millisecond)
	}
	if scale > 1 { // about the engines' steps too
		pc.EvictionOrderSlack = time.Duration(float64(pc.EvictionOrderSlack) / scale)
	}
	return &pc
}

// preciseEventsConfig is the ingestion's configuration, its lease on the
// simulated clock like the router's claim TTLs.
func preciseEventsConfig(cfg *Config, tc tree.Config) kvevents.Config {
	kc := kvevents.DefaultConfig()
	kc.BlockTokens = tc.BlockTokens
	if cfg.ScaleRouterTimes && cfg.TimeScale > 1 {
		kc.LeaseTTL = max(time.Duration(float64(kc.LeaseTTL)/cfg.TimeScale), 4*time.Second)
		kc.RenewBefore = kc.LeaseTTL / 4
		kc.RenewEvery = kc.LeaseTTL / 40
	}
	return kc
}

// startPrecise starts one event consumer per router node, writing into
// the node's learner (learners[i]: a LocalLearner, or a mesh.Node whose
// stream ownership follows its alive members). In eviction-link mode
// (kvmesh+evict) the events go through the router's EvictionSink, which
// ends the byte claims linked to evicted blocks.
func (d *deployment) startPrecise(ctx context.Context, cfg *Config, tc tree.Config, arm Arm, fleet Fleet, learners []router.Learner) error {
	kf, ok := fleet.(KVEventsFleet)
	if !ok {
		return errors.New("bench: the precise arm's fleet publishes no KV events")
	}
	pubs, replays := kf.KVEventEndpoints()
	var streams []kvevents.StreamConfig
	for i, p := range pubs {
		if p == "" {
			return fmt.Errorf("bench: backend %s publishes no KV events", BackendName(i))
		}
		streams = append(streams, kvevents.StreamConfig{Backend: BackendName(i), Endpoint: p, ReplayEndpoint: replays[i], Model: cfg.Models[0]})
	}
	kc := preciseEventsConfig(cfg, tc)
	ctx, cancel := context.WithCancel(ctx)
	var managers []*kvevents.Manager
	d.preciseClose = func() {
		cancel()
		for _, m := range managers {
			m.Close()
		}
	}
	for i, l := range learners {
		sink, ok := l.(kvevents.Sink)
		n, meshed := l.(*mesh.Node)
		meshed = meshed && arm.meshed()
		if arm.Evictions {
			// On a mesh each stream's owner ends the claims the nodes made
			// of the blocks they linked, whose tombstones tell every node
			// to end the byte claims it linked (router.EvictionSink).
			rt := d.nodes[i].rt
			if meshed {
				n.OnEnded(rt.EndLinked)
				sink = rt.EvictionSink(n)
			} else {
				sink = rt.EvictionSink(nil)
			}
			ok = sink != nil
		}
		if !ok {
			return fmt.Errorf("bench: node %d's learner (%T) cannot take KV events", i, l)
		}
		m, err := kvevents.NewManager(kc, streams, kvevents.Deps{Index: d.indexes[i], Sink: sink, Registerer: d.nodes[i].reg,
			Logger: cfg.Logger.With().Int("node", i).Logger()})
		if err != nil {
			return err
		}
		managers = append(managers, m)
		if err := m.Start(ctx); err != nil {
			return err
		}
		if meshed {
			go m.FollowMembers(ctx, n.Name(), n.AliveMembers, 100*time.Millisecond)
		} else {
			m.SetOwned(m.Backends()) // alone (or with independent state): every stream
		}
	}
	return nil
}
