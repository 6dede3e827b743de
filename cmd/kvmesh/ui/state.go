package ui

import (
	"math"
	"strconv"
	"time"

	"github.com/kvmesh/kvmesh/mesh"
	"github.com/kvmesh/kvmesh/router"
	"github.com/kvmesh/kvmesh/tree"
)

// State is the document GET /ui/state serves. Counters are cumulative
// since the node started: the page derives rates and windowed hit rates
// from the differences between two polls. It never holds prompt text.
type State struct {
	Node         string    `json:"node"`
	Version      string    `json:"version"`
	Policy       string    `json:"policy"`
	TenantHeader string    `json:"tenant_header"`
	NowMs        int64     `json:"now_ms"`
	UptimeMs     int64     `json:"uptime_ms"`
	Routed       uint64    `json:"routed"`
	Decisions    []Count   `json:"decisions"`
	Matched      Histogram `json:"matched"`
	Backends     []Backend `json:"backends"`
	Index        Index     `json:"index"`
	Mesh         *Mesh     `json:"mesh"` // null on a node without a mesh

	// StartedMs is when this process's handler started (Unix ms): it tells
	// the page a restart apart from an uptime that merely passed the last
	// one seen (a tab hidden during the restart).
	StartedMs int64 `json:"started_ms"`
	// SignalMaxAgeMs is the router's signal_max_age: a load signal older
	// than that counts for nothing, so the page marks it.
	SignalMaxAgeMs int64 `json:"signal_max_age_ms"`
}

// Count is one decision reason's cumulative count.
type Count struct {
	Reason string `json:"reason"`
	Count  uint64 `json:"count"`
}

// Histogram is the matched-prefix ratio histogram: Cumulative[i]
// decisions matched at most Le[i] of their prompt.
type Histogram struct {
	Le         []float64 `json:"le"`
	Cumulative []uint64  `json:"cumulative"`
	Count      uint64    `json:"count"`
	Sum        float64   `json:"sum"`
}

// Backend is one backend's row.
type Backend struct {
	Name         string `json:"name"`
	Healthy      bool   `json:"healthy"`
	EjectedForMs int64  `json:"ejected_for_ms"`
	// RegistryRemoved: a peer removed it from the mesh's registry; this
	// node lists it still and makes it active again in ReactivateInMs.
	RegistryRemoved bool     `json:"registry_removed"`
	ReactivateInMs  int64    `json:"reactivate_in_ms"`
	Generation      uint16   `json:"generation"`
	Models          []string `json:"models"`
	InFlight        int      `json:"in_flight"`
	PendingUnits    float64  `json:"pending_units"`
	// PeerPendingUnits and PeerInFlight are the other nodes' bookings
	// (their load channel, weighted by freshness).
	PeerPendingUnits float64  `json:"peer_pending_units"`
	PeerInFlight     float64  `json:"peer_in_flight"`
	Waiting          *float64 `json:"waiting"` // null when no signal reported it
	Running          *float64 `json:"running"`
	KVUsage          *float64 `json:"kv_usage"`
	SignalAgeMs      *int64   `json:"signal_age_ms"` // null: no signal ever
	// CachedTokens / PromptTokens is the hit rate the backend reports.
	CachedTokens float64 `json:"cached_tokens"`
	PromptTokens float64 `json:"prompt_tokens"`
}

// Index is the claim index's size and churn (tree.Stats).
type Index struct {
	Claims      int    `json:"claims"`
	Capacity    int    `json:"capacity"`
	TableBytes  int    `json:"table_bytes"` // the claim table's memory: it grows with the claims held
	Backends    int    `json:"backends"`
	Inserted    uint64 `json:"inserted"`
	Evicted     uint64 `json:"evicted"`
	Swept       uint64 `json:"swept"`
	Rejected    uint64 `json:"rejected"`
	FloorRaises uint64 `json:"floor_raises"`
	// FloorMs is the eviction floor (claims expiring at or before it are
	// gone; 0 while nothing was evicted), as Unix milliseconds.
	FloorMs int64 `json:"floor_ms"`
}

// Mesh is the node's mesh view.
type Mesh struct {
	Topology    string   `json:"topology"`
	Incarnation string   `json:"incarnation"` // hex: a random uint64 as a JSON number loses bits in JavaScript
	Members     []Member `json:"members"`
	Peers       []Peer   `json:"peers"`
	// Sharing: this node sends its bookings on the load channel; Share is
	// its share of the mesh's routing.
	Sharing         bool    `json:"sharing"`
	Share           float64 `json:"share"`
	RoutedPerSecond float64 `json:"routed_per_second"`
	// ApplyLagCount and ApplyLagSum (seconds) are the apply lag's running
	// totals: claims received in deltas and their summed lag.
	ApplyLagCount  uint64  `json:"apply_lag_count"`
	ApplyLagSum    float64 `json:"apply_lag_sum"`
	ClaimsSent     uint64  `json:"claims_sent"`
	ClaimsReceived uint64  `json:"claims_received"`
	ClaimsApplied  uint64  `json:"claims_applied"`
	FullSyncs      uint64  `json:"full_syncs"`
}

// Member is one serf member.
type Member struct {
	Name   string `json:"name"`
	Addr   string `json:"addr"`
	Status string `json:"status"`
	Self   bool   `json:"self"`
	Peer   bool   `json:"peer"`
	// NotPeer says why the node cannot replicate claims with the member
	// (mesh.Member.NotPeer): another protocol or key scheme.
	NotPeer string `json:"not_peer,omitempty"`
	// Warning says what of a peer's settings degrades the mesh
	// (mesh.Member.Warning): another index.capacity.
	Warning string `json:"warning,omitempty"`
}

// Peer is one replication peer: the claim protocol's state and, when the
// peer was heard on it, the load channel's.
type Peer struct {
	Name string `json:"name"`
	// Backlog is how many of our changes the peer has not acknowledged.
	Backlog    uint64 `json:"backlog"`
	InFullSync bool   `json:"in_full_sync"`
	Converged  bool   `json:"converged"`
	// LastMatchAgeMs: when the last digest exchange found no difference;
	// LastHeardAgeMs: when the peer last sent a claim-protocol message.
	LastMatchAgeMs *int64 `json:"last_match_age_ms"`
	LastHeardAgeMs *int64 `json:"last_heard_age_ms"`
	// LoadAgeMs is how long ago the peer's bookings arrived (null: never);
	// LoadWeight how much they count now (1 fresh, 0 silent).
	LoadAgeMs       *int64  `json:"load_age_ms"`
	LoadWeight      float64 `json:"load_weight"`
	RoutedPerSecond float64 `json:"routed_per_second"`
}

// fill builds the state from rs (router), is (index) and ms (mesh, nil
// without one) at now, reusing st's slices.
func (st *State) fill(rs *router.Status, is tree.Stats, ms *mesh.Status, now time.Time) {
	st.Policy, st.Routed, st.NowMs = rs.Policy, rs.Routed, now.UnixMilli()
	st.Decisions = st.Decisions[:0]
	for _, d := range rs.Decisions {
		st.Decisions = append(st.Decisions, Count(d))
	}
	st.Matched = Histogram{Le: rs.Matched.UpperBounds, Cumulative: rs.Matched.Cumulative,
		Count: rs.Matched.Count, Sum: finite(rs.Matched.Sum)}
	st.Backends = st.Backends[:0]
	for i := range rs.Backends {
		b := &rs.Backends[i]
		l := &b.Load
		if b.Models == nil {
			b.Models = []string{}
		}
		row := Backend{Name: b.Name, Healthy: b.Healthy, EjectedForMs: b.EjectedForMs, Generation: b.Generation,
			RegistryRemoved: b.RegistryRemoved, ReactivateInMs: b.ReactivateInMs,
			Models: b.Models, InFlight: l.InFlight, PendingUnits: finite(l.PendingPrefill),
			PeerPendingUnits: finite(l.PeerPendingPrefill), PeerInFlight: finite(l.PeerInFlight),
			CachedTokens: finite(b.CachedTokens), PromptTokens: finite(b.PromptTokens)}
		if l.Has&router.HasWaiting != 0 {
			row.Waiting = ptr(finite(l.Waiting))
		}
		if l.Has&router.HasRunning != 0 {
			row.Running = ptr(finite(l.Running))
		}
		if l.Has&router.HasKVCacheUsage != 0 {
			row.KVUsage = ptr(finite(l.KVUsage))
		}
		if l.Has != 0 {
			row.SignalAgeMs = ptr(l.SignalAge.Milliseconds())
		}
		st.Backends = append(st.Backends, row)
	}
	st.Index = Index{Claims: is.Claims, Capacity: is.Capacity, TableBytes: is.TableBytes, Backends: is.Backends, Inserted: is.Inserted,
		Evicted: is.Evicted, Swept: is.Swept, Rejected: is.Rejected, FloorRaises: is.FloorRaises, FloorMs: max(is.Floor, 0)}
	st.Mesh = nil
	if ms != nil {
		st.Mesh = meshState(ms, now)
	}
}

func meshState(ms *mesh.Status, now time.Time) *Mesh {
	m := &Mesh{Topology: ms.Topology, Incarnation: strconv.FormatUint(ms.Incarnation, 16), Members: make([]Member, 0, len(ms.Members)),
		Peers: make([]Peer, 0, len(ms.Peers)), Sharing: ms.Load.Sharing, Share: finite(ms.Load.Share),
		RoutedPerSecond: finite(ms.Load.RoutedPerSecond), ApplyLagCount: ms.ApplyLagCount, ApplyLagSum: finite(ms.ApplyLagSum),
		ClaimsSent: ms.Replica.ClaimsSent, ClaimsReceived: ms.Replica.ClaimsReceived,
		ClaimsApplied: ms.Replica.ClaimsApplied, FullSyncs: ms.Replica.FullSyncsReceived}
	for _, mb := range ms.Members {
		m.Members = append(m.Members, Member{Name: mb.Name, Addr: mb.Addr, Status: mb.Status, Self: mb.Self, Peer: mb.Peer, NotPeer: mb.NotPeer, Warning: mb.Warning})
	}
	age := func(t time.Time) *int64 {
		if t.IsZero() {
			return nil
		}
		return ptr(max(now.Sub(t).Milliseconds(), 0))
	}
	seen := make(map[string]int, len(ms.Peers))
	for _, p := range ms.Peers {
		seen[p.Name] = len(m.Peers)
		m.Peers = append(m.Peers, Peer{Name: p.Name, Backlog: p.Backlog, InFullSync: p.InFullSync,
			Converged: p.Converged, LastMatchAgeMs: age(p.LastMatch), LastHeardAgeMs: age(p.LastHeard)})
	}
	// The load channel reaches every alive member, relayed or not: a member
	// heard only there gets a row of its own.
	for _, lp := range ms.Load.Peers {
		i, ok := seen[lp.Peer]
		if !ok {
			i = len(m.Peers)
			m.Peers = append(m.Peers, Peer{Name: lp.Peer})
		}
		p := &m.Peers[i]
		p.LoadAgeMs, p.LoadWeight, p.RoutedPerSecond = ptr(max(lp.AgeMs, 0)), finite(lp.Weight), finite(lp.RoutedPerSecond)
	}
	return m
}

func ptr[T any](v T) *T { return &v }

// finite is f, or 0 for NaN and infinities (which JSON cannot carry).
func finite(f float64) float64 {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return 0
	}
	return f
}
