package bench

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/rs/zerolog"

	"github.com/kvmesh/kvmesh/mesh"
	"github.com/kvmesh/kvmesh/mesh/meshtest"
	"github.com/kvmesh/kvmesh/router"
	"github.com/kvmesh/kvmesh/transport"
	"github.com/kvmesh/kvmesh/tree"
)

// InMemoryMesh is the SharedState of mesh arms: the router nodes join one
// kvmesh mesh inside this process, replicating claims (and with ShareLoad
// their bookings) over an in-memory network (transport.MemNetwork: no
// loss, no delay) with serf gossip over meshtest.MemberNetwork at
// mesh.LocalTimings, and mesh defaults for everything else, the flush and
// load intervals divided by the time scale (scaleMeshTimes). It returns
// once every node replicates with every other.
func InMemoryMesh() SharedState {
	return func(ctx context.Context, indexes []*tree.Index, opts MeshOptions, log zerolog.Logger) ([]router.Learner, func() error, error) {
		net := transport.NewMemNetwork(1)
		mnet := meshtest.NewMemberNetwork(7946)
		names := make([]string, len(indexes))
		for i := range names {
			names[i] = fmt.Sprintf("node-%d", i)
		}
		var nodes []*mesh.Node
		closeAll := func() error {
			var errs []error
			for _, n := range nodes {
				errs = append(errs, n.Close())
			}
			errs = append(errs, net.Close())
			return errors.Join(errs...)
		}
		for i, ix := range indexes {
			ep, err := net.Endpoint(names[i])
			if err != nil {
				closeAll()
				return nil, nil, err
			}
			mt, err := mnet.Transport(names[i])
			if err != nil {
				closeAll()
				return nil, nil, err
			}
			cfg := mesh.DefaultConfig()
			cfg.Name = names[i]
			cfg.DevMode = true // in-process: nothing to encrypt against
			cfg.ShareLoad = opts.ShareLoad
			scaleMeshTimes(&cfg, opts.TimeScale)
			cfg.Membership = mesh.LocalTimings()
			cfg.JoinBackoffMin, cfg.JoinBackoffMax = 50*time.Millisecond, 500*time.Millisecond
			cfg.Seeds = []string{mnet.Addr(names[0])}
			n, err := mesh.New(cfg, mesh.Deps{Index: ix, Transport: ep, MemberTransport: mt, Logger: log.With().Str("mesh", names[i]).Logger()})
			if err != nil {
				closeAll()
				return nil, nil, err
			}
			nodes = append(nodes, n)
			if err := n.Start(ctx); err != nil {
				closeAll()
				return nil, nil, err
			}
		}
		if err := waitMeshed(ctx, nodes, 30*time.Second); err != nil {
			closeAll()
			return nil, nil, err
		}
		learners := make([]router.Learner, len(nodes))
		for i, n := range nodes {
			learners[i] = n
		}
		return learners, closeAll, nil
	}
}

// waitMeshed waits until every node has every other as a replication peer.
func waitMeshed(ctx context.Context, nodes []*mesh.Node, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		ok := true
		for _, n := range nodes {
			if len(n.Admin().Peers) != len(nodes)-1 {
				ok = false
				break
			}
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("bench: the mesh of %d nodes did not form within %v", len(nodes), timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// adminHandlerOf returns a learner's /admin/mesh handler, if it has one.
func adminHandlerOf(l router.Learner) http.Handler {
	if a, ok := l.(interface{ AdminHandler() http.Handler }); ok {
		return a.AdminHandler()
	}
	return nil
}

// meshTimeScale is MeshOptions.TimeScale for cfg's mesh arms: the mesh's
// intervals follow the simulated clock when the router's do.
func meshTimeScale(cfg *Config) float64 {
	if cfg.ScaleRouterTimes {
		return max(cfg.TimeScale, 1)
	}
	return 1
}

// MeshTimes is mesh.DefaultConfig() with the intervals InMemoryMesh puts
// on cfg's simulated clock (scaleMeshTimes) so scaled: what a mesh node
// outside the harness needs to replicate as fast as the in-process mesh
// arms do (kvmesh-bench serve-config).
func MeshTimes(cfg *Config) mesh.Config {
	mc := mesh.DefaultConfig()
	scaleMeshTimes(&mc, meshTimeScale(cfg))
	return mc
}

// scaleMeshTimes divides the intervals that decide how soon a peer hears of
// a claim or a booking by the time scale, with floors that keep an idle
// mesh cheap. Membership and anti-entropy stay: they are about the
// machine, not the backends.
func scaleMeshTimes(cfg *mesh.Config, scale float64) {
	if scale <= 1 {
		return
	}
	sc := func(d *time.Duration, floor time.Duration) { *d = max(time.Duration(float64(*d)/scale), floor) }
	sc(&cfg.FlushInterval, time.Millisecond)
	sc(&cfg.LoadInterval, time.Millisecond)
	sc(&cfg.LoadMinGap, 100*time.Microsecond)
	sc(&cfg.LoadLazyDelay, time.Millisecond)
}
