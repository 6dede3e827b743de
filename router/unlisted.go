package router

import (
	"time"

	"github.com/kvmesh/kvmesh/tree"
)

// unlistedSweep removes from the mesh's registry, once, the backends the
// claim index held as active when the router started that this node has
// not listed since (DiscoveryConfig.UnlistedGrace).
//
// Such an entry comes from a --state-dir snapshot (or a peer's): a backend
// that left while every router was down (pods replaced during a full
// restart, a lone node restarted after its backends rolled) was never
// drained by anyone, since only a node that listed it and then stopped
// listing it removes it. Nothing else would ever remove it: its name would
// hold an id in the registry (4,096 names; a full registry refuses new
// backends) and be saved again in every snapshot, restart after restart.
//
// Every node lists the same backends, so one this node has not listed for
// the grace is gone. The sweep still leaves alone a backend whose entry
// changed since the start (removed, or made active again at a new
// generation: someone lists it) and one the peers report load at or have
// sent work to; and it waits for this node's first backend list, so that a
// discovery source still failing when the grace ends does not empty the
// registry. If it removes a backend a peer does list (a configuration that
// differs), that peer makes it active again after two discovery intervals,
// as after any removal it disagrees with; the sweep does not run again.
type unlistedSweep struct {
	due   time.Time         // zero: off, or done
	names map[string]uint16 // active at the start: name -> generation
}

// startUnlistedSweep records the registry's active entries, before the
// router lists its own backends.
func (rt *Router) startUnlistedSweep(ix *tree.Index, grace time.Duration) {
	if grace <= 0 {
		return
	}
	s := unlistedSweep{due: rt.now().Add(grace), names: map[string]uint16{}}
	for _, e := range ix.Backends(nil) {
		if e.State == tree.BackendActive {
			s.names[e.Name] = e.Gen
		}
	}
	if len(s.names) > 0 {
		rt.unlisted = s
	}
}

// sweepUnlisted runs the sweep once it is due and this node lists at least
// one backend; it returns how many backends it removed. It runs on the
// maintain loop, under setMu.
func (rt *Router) sweepUnlisted(now time.Time) int {
	rt.setMu.Lock()
	defer rt.setMu.Unlock() // as sweepRemoved: a SetBackends naming one of them waits
	s := &rt.unlisted
	if s.due.IsZero() || now.Before(s.due) {
		return 0
	}
	if len(rt.members) == 0 {
		return 0 // no list yet (discovery failing): not now
	}
	names := s.names
	*s = unlistedSweep{}
	removed := 0
	for name, gen := range names {
		if _, listed := rt.members[name]; listed {
			continue
		}
		id, ok := rt.ix.BackendByName(name)
		if !ok {
			continue // forgotten meanwhile
		}
		if g, active := rt.ix.Generation(id); !active || g != gen {
			continue // removed, or active again at a new generation: someone else handles it
		}
		if rt.peers != nil {
			if u, r, f := rt.peers.PeerLoad(id); u+r+f > 0 || rt.peers.PeerWritten(id) > 0 {
				continue // a peer routes to it: listed there
			}
		}
		rt.learner.Invalidate(name, true)
		removed++
		rt.log.Info().Str("backend", name).Stringer("grace", rt.cfg.Discovery.UnlistedGrace).
			Msg("backend active in the claim state since the start but listed by no node: removed from the registry")
	}
	rt.disc.unlisted.Add(float64(removed))
	return removed
}
