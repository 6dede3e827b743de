package router

import "github.com/kvmesh/kvmesh/tree"

// PeerLoad is what the other router nodes of a mesh have booked at each
// backend, as their load channel last reported it (mesh.Node implements
// it). A router alone sees only the prefill it queued itself; with N
// routers in front of the same engines every queue would look about N
// times shorter than it is.
type PeerLoad interface {
	// PeerLoad returns the other nodes' pending prefill units, pending
	// requests (no first byte yet) and requests in flight at backend id,
	// each node's weighted by the freshness of what it reported.
	PeerLoad(id tree.BackendID) (units, requests, inFlight float64)
	// PeerWritten is every prompt unit the other nodes, present and
	// departed, have sent backend id to compute: with this node's own count,
	// how much the backend's cache has turned over (see cacheBelief). It
	// never decreases.
	PeerWritten(id tree.BackendID) float64
	// MeshShare is this node's share of the requests the mesh routes, in
	// (0, 1]; 1 alone.
	MeshShare() float64
	// BookingsChanged says this node's pending bookings just changed (a
	// request was dispatched or got its first byte), so that the peers hear
	// of it at once rather than at the next poll. It must not block.
	BookingsChanged()
}

// LocalLoad calls fn with this router's own bookings at every backend:
// pending prefill units and requests (sent, no first answer byte yet),
// requests in flight, and every prompt unit it has sent the backend to
// compute since it started. The mesh's load channel reads it to tell the
// peers.
func (rt *Router) LocalLoad(fn func(id tree.BackendID, units, requests, inFlight, written int64)) {
	for _, b := range rt.backends() {
		fn(b.id, b.pendingUnits.Load(), b.pendingRequests.Load(), b.inFlight.Load(), b.written.Load())
	}
}

// meshWritten is every prompt unit the mesh has sent b to compute.
func (rt *Router) meshWritten(b *backend) float64 {
	w := float64(b.written.Load())
	if rt.peers != nil {
		w += rt.peers.PeerWritten(b.id)
	}
	return w
}

// Routed counts the requests this router has routed by prompt (first
// attempts), for the mesh's estimate of each node's share of the traffic.
func (rt *Router) Routed() uint64 { return rt.routed.Load() }

// meshPending is how many requests the whole mesh has pending (sent, no
// first byte yet) at b, as far as this node knows: its own plus its peers'.
func (rt *Router) meshPending(b *backend) float64 {
	own := float64(b.pendingRequests.Load())
	if rt.peers == nil {
		return own
	}
	_, reqs, _ := rt.peers.PeerLoad(b.id)
	return own + reqs
}

// meshShare is this node's share of the mesh's routing (1 alone).
func (rt *Router) meshShare() float64 {
	if rt.peers == nil {
		return 1
	}
	if s := rt.peers.MeshShare(); s > 0 && s <= 1 {
		return s
	}
	return 1
}
