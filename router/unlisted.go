package router

import (
	"time"

	"github.com/kvmesh/kvmesh/tree"
)

// unlistedSweep removes from the mesh's registry, once, the backends the
// claim index held as active when the router started that this node has
// not listed since (DiscoveryConfig.UnlistedGrace).
//
// Such an entry comes from the node's --state-dir snapshot (the mesh joins
// after the router is made): a backend that left while every router was
// down (pods replaced during a full restart, a lone node restarted after
// its backends rolled) was never drained by anyone, since only a node that
// listed it and then stopped listing it removes it. Nothing else would
// ever remove it: its name would hold an id in the registry (4,096 names;
// a full registry refuses new backends) and be saved again in every
// snapshot, restart after restart.
//
// Every node lists the same backends, so one this node has not listed for
// the grace is gone. The sweep still leaves alone a backend whose entry
// changed since the start (removed, or made active again at a new
// generation: someone lists it) and one a peer's load messages name (a
// node names every backend it routes to) or report work at; it waits until
// every peer on the load channel has been heard, and until two discovery
// intervals after this node's first non-empty list, so that a discovery
// source failing at the end of the grace, or a first answer that is still
// partial, empties nothing. If it removes a backend some node does list (a
// configuration that differs), that node makes it active again after two
// discovery intervals, as after any removal it disagrees with; the sweep
// does not run again.
type unlistedSweep struct {
	due    time.Time         // zero: off, or done
	listed time.Time         // when this node first listed a backend (zero: not yet)
	names  map[string]uint16 // active at the start: name -> generation
}

// peerListing is what the sweep asks the mesh (mesh.Node): whether a peer
// routes to a backend, and whether every peer has been heard.
type peerListing interface {
	PeerListed(id tree.BackendID) (listed, complete bool)
}

// startUnlistedSweep records the registry's active entries, before the
// router lists its own backends.
func (rt *Router) startUnlistedSweep(ix *tree.Index, grace time.Duration) {
	if grace <= 0 {
		rt.unlistedDone.Store(true)
		return
	}
	s := unlistedSweep{due: rt.now().Add(grace), names: map[string]uint16{}}
	for _, e := range ix.Backends(nil) {
		if e.State == tree.BackendActive {
			s.names[e.Name] = e.Gen
		}
	}
	if len(s.names) == 0 {
		rt.unlistedDone.Store(true)
		return
	}
	rt.unlisted = s
}

// sweepUnlisted runs the sweep once it is due (see unlistedSweep); it
// returns how many backends it removed. It runs on the maintain loop.
func (rt *Router) sweepUnlisted(now time.Time) int {
	if rt.unlistedDone.Load() {
		return 0
	}
	rt.setMu.Lock()
	defer rt.setMu.Unlock() // as sweepRemoved: a SetBackends naming one of them waits
	s := &rt.unlisted
	if len(rt.members) == 0 {
		return 0 // no list yet (discovery failing): not now
	}
	if s.listed.IsZero() {
		s.listed = now
	}
	if now.Before(s.due) || now.Before(s.listed.Add(rt.reactivateAfter())) {
		return 0
	}
	var gone []string
	for name, gen := range s.names {
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
				continue // a peer routes to it
			}
			if pl, ok := rt.peers.(peerListing); ok {
				listed, complete := pl.PeerListed(id)
				if !complete {
					return 0 // a peer not heard yet: at a later tick
				}
				if listed {
					continue
				}
			}
		}
		gone = append(gone, name)
	}
	*s = unlistedSweep{}
	rt.unlistedDone.Store(true)
	for _, name := range gone {
		rt.learner.Invalidate(name, true)
		rt.log.Info().Str("backend", name).Stringer("grace", rt.cfg.Discovery.UnlistedGrace).
			Msg("backend active in the claim state since the start but not listed here, and no peer routes to it: removed from the registry")
	}
	rt.disc.unlisted.Add(float64(len(gone)))
	return len(gone)
}
