package mesh

import (
	dto "github.com/prometheus/client_model/go"
)

// Status is the node's state for a live status page (cmd/kvmesh/ui),
// polled several times a second: the AdminView without its StateDigest
// (a digest walks every claim, too dear to compute that often; the peers'
// Converged flags say what the last digest exchanges found), plus the
// running totals of the apply lag.
type Status struct {
	AdminView
	// ApplyLag is kvmesh_mesh_apply_lag_seconds' count and sum: the time
	// from a claim's origin timestamp to its application here, for claims
	// received in deltas. The difference between two readings gives the
	// mean lag in between.
	ApplyLagCount uint64
	ApplyLagSum   float64
}

// Status returns the node's current status (see Status). It is safe for
// concurrent use.
func (n *Node) Status() Status {
	s := Status{AdminView: n.adminView()}
	if n.m != nil && n.m.applyLag != nil {
		var m dto.Metric
		if n.m.applyLag.Write(&m) == nil && m.GetHistogram() != nil {
			s.ApplyLagCount, s.ApplyLagSum = m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
		}
	}
	return s
}
