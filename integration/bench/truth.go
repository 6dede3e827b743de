package bench

import (
	"math"

	"github.com/kvmesh/kvmesh/router"
	"github.com/kvmesh/kvmesh/tree"
)

// The truth arm ("kvmesh+truth"): the kvmesh policy, every term of its
// cost model as configured, deciding with the engines' true cache contents
// in place of its claims. It splits the gap between kvmesh and the oracle
// in two:
//
//   - kvmesh against kvmesh+truth is the price of kvmesh's knowledge: the
//     same cost model, with the belief's errors (claims the engine evicted,
//     prefixes it holds that no claim says) and the bookings made on them;
//   - kvmesh+truth against the oracle is the price of the cost model: the
//     terms the oracle does not have (spread, second copies, the waiting
//     signal, the load override) and the load kvmesh sees (its bookings,
//     scraped running counts) against the oracle's live view.
//
// Before the inner policy chooses, each candidate's match is set to what
// the engine would serve from its cache now (Oracle's CachedPrefix), in
// the request's prompt units, and every doubt is cleared: the match is
// known. The dispatch then books what the chosen backend really lacks, as
// the oracle does, and the claims the router learns are kept as usual (the
// policy does not read them).
//
// On several nodes ("kvmesh+truth:8:mesh") each node decides on the true
// caches with the load its mesh shares. "kvmesh+truth+load:8:mesh" also
// replaces the peers' bookings in each candidate with the other nodes'
// exact ones at the moment of the decision (Oracle.Peers): what is left
// of the mesh's gap to one node is then neither the claims nor the load
// channel's delay (README, the mesh section, has what was measured).

// peerBookings is one backend's bookings summed over the other nodes
// (peerLoad), as the mesh's load channel carries them (router.LoadView's
// Peer fields).
type peerBookings struct{ units, requests, inFlight float64 }

// LocalLoader is a router node's own bookings at each backend
// (*router.Router, which the mesh's load channel reads the same way).
type LocalLoader interface {
	LocalLoad(fn func(id tree.BackendID, units, requests, inFlight, written int64))
}

// peerLoad sums the bookings at each backend of every node in others at
// the moment of the call, indexed by backend id: the mesh's load channel
// with no delay.
func peerLoad(others []LocalLoader) []peerBookings {
	var out []peerBookings
	for _, rt := range others {
		rt.LocalLoad(func(id tree.BackendID, units, requests, inFlight, _ int64) {
			for int(id) >= len(out) {
				out = append(out, peerBookings{})
			}
			p := &out[id]
			p.units += float64(units)
			p.requests += float64(requests)
			p.inFlight += float64(inFlight)
		})
	}
	return out
}

// chooseTruth is Choose for an oracle with Truth set: the candidates'
// matches from the engines, then Truth decides. r is the registered body
// (nil: none, the matches are all 0).
func (o *Oracle) chooseTruth(req *router.Request, cands []router.Candidate, scores []float64, r *oracleReq) router.Decision {
	m := r.match()
	defer m.release()
	var deepest int32
	for i := range cands {
		c := &cands[i]
		cached, prompt := 0, 0
		if b := o.backends[c.Name]; b != nil {
			if ct, pt, ok := m.held(b.b); ok {
				cached, prompt = ct, pt
			}
		}
		c.Matched = truthBlocks(req, cached, prompt)
		c.Discount, c.Lost = 0, false
		c.Near, c.NearTrust, c.Doubted, c.DoubtTrust = 0, 0, 0, 0
		deepest = max(deepest, c.Matched)
	}
	req.Deepest = deepest
	if len(o.Peers) > 0 {
		loads := peerLoad(o.Peers)
		for i := range cands {
			l, id := &cands[i].Load, int(cands[i].ID)
			l.PeerPendingPrefill, l.PeerPendingRequests, l.PeerInFlight = 0, 0, 0
			if id < len(loads) {
				l.PeerPendingPrefill, l.PeerPendingRequests, l.PeerInFlight = loads[id].units, loads[id].requests, loads[id].inFlight
			}
		}
	}
	return o.Truth.Choose(req, cands, scores)
}

// truthBlocks converts cached of prompt tokens into the request's chain
// blocks: the same share of its units, whole blocks, at most the chain's.
func truthBlocks(req *router.Request, cached, prompt int) int32 {
	ch := req.Chain
	if ch == nil || ch.UnitsPerBlock <= 0 || cached <= 0 || prompt <= 0 {
		return 0
	}
	units := float64(ch.Units) * math.Min(float64(cached)/float64(prompt), 1)
	return int32(min(int(units)/ch.UnitsPerBlock, len(ch.Keys)))
}
