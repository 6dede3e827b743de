package router

import (
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Status is a compact snapshot of the router for a live status page
// (cmd/kvmesh/ui): every figure is read from the router's own atomics and
// metric instruments in process, never by rendering and parsing /metrics.
// It holds no prompt text. ReadStatus fills one in place, reusing its
// slices, so a poller that keeps one allocates little.
type Status struct {
	Policy string
	// Routed counts the requests routed by prompt (first attempts).
	Routed uint64
	// Decisions are the cumulative decisions of the configured policy by
	// reason (kvmesh_router_decisions_total), reasons never taken left out,
	// in Reason order.
	Decisions []ReasonCount
	// Matched is kvmesh_router_matched_prefix_ratio: the share of each
	// routed prompt the chosen backend's claims matched.
	Matched RatioHistogram
	// Backends are in configuration order.
	Backends []BackendSnapshot
}

// ReasonCount is one reason's cumulative decision count.
type ReasonCount struct {
	Reason string
	Count  uint64
}

// RatioHistogram is a cumulative histogram: Cumulative[i] observations
// were <= UpperBounds[i]; Count were made in all, summing to Sum.
type RatioHistogram struct {
	UpperBounds []float64
	Cumulative  []uint64
	Count       uint64
	Sum         float64
}

// BackendSnapshot is one backend's state in a Status.
type BackendSnapshot struct {
	Name         string
	Healthy      bool
	EjectedForMs int64 // 0 while in rotation
	// RegistryRemoved: a peer removed the backend from the mesh's shared
	// registry while this node still lists it, so no node matches its
	// claims; this node makes it active again in ReactivateInMs
	// (/admin/backends' registry_removed and reactivate_in_ms).
	RegistryRemoved bool
	ReactivateInMs  int64
	Generation      uint16
	Models          []string
	// Load is what the policy sees now: this node's bookings, its peers'
	// and the freshest load signal (Load.Has says which fields it had).
	Load LoadView
	// CachedTokens and PromptTokens are the backend's own usage reports
	// (kvmesh_router_backend_cached_tokens_total and
	// backend_prompt_tokens_total): their ratio is the hit rate the
	// backend itself measured.
	CachedTokens, PromptTokens float64
}

// ReadStatus fills s with the router's current state.
func (rt *Router) ReadStatus(s *Status) {
	var m dto.Metric
	now := rt.now()
	s.Policy = rt.policy.Name()
	s.Routed = rt.routed.Load()
	s.Decisions = s.Decisions[:0]
	for r := Reason(1); r < numReasons; r++ {
		if c := rt.metrics.decisionByWhy[r]; c != nil {
			if v := counterValue(c, &m); v > 0 {
				s.Decisions = append(s.Decisions, ReasonCount{Reason: r.String(), Count: uint64(v)})
			}
		}
	}
	readHistogram(rt.metrics.matchedRatio, &m, &s.Matched)

	all := rt.backends()
	if cap(s.Backends) < len(all) {
		s.Backends = make([]BackendSnapshot, len(all))
	}
	s.Backends = s.Backends[:len(all)]
	for i, b := range all {
		bs := &s.Backends[i]
		bs.Name, bs.Healthy = b.name, b.healthy.Load()
		bs.Generation, _ = rt.ix.Generation(b.id)
		bs.Models = bs.Models[:0]
		for _, me := range b.models() {
			bs.Models = append(bs.Models, me.ID)
		}
		bs.Load = b.loadView(now, &rt.cfg, rt.peers)
		b.mu.Lock()
		ejectedAt := b.health.ejectedAt
		b.mu.Unlock()
		bs.EjectedForMs = 0
		if !ejectedAt.IsZero() {
			bs.EjectedForMs = max(now.Sub(ejectedAt).Milliseconds(), 1)
		}
		bs.ReactivateInMs, bs.RegistryRemoved = rt.reactivateIn(b, now)
		bs.CachedTokens = counterValue(b.cachedTokens, &m)
		bs.PromptTokens = counterValue(b.promptTokens, &m)
	}
}

// counterValue reads a counter in process (0 if it cannot be read).
func counterValue(c prometheus.Counter, m *dto.Metric) float64 {
	m.Reset()
	if c == nil || c.Write(m) != nil {
		return 0
	}
	return m.GetCounter().GetValue()
}

// readHistogram copies h's buckets into dst, reusing its slices.
func readHistogram(h prometheus.Histogram, m *dto.Metric, dst *RatioHistogram) {
	dst.UpperBounds, dst.Cumulative = dst.UpperBounds[:0], dst.Cumulative[:0]
	dst.Count, dst.Sum = 0, 0
	m.Reset()
	if h == nil || h.Write(m) != nil || m.GetHistogram() == nil {
		return
	}
	hist := m.GetHistogram()
	for _, b := range hist.GetBucket() {
		dst.UpperBounds = append(dst.UpperBounds, b.GetUpperBound())
		dst.Cumulative = append(dst.Cumulative, b.GetCumulativeCount())
	}
	dst.Count, dst.Sum = hist.GetSampleCount(), hist.GetSampleSum()
}
