package mesh

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvmesh/kvmesh/tree"
)

// NewIndexCollector exports a tree.Index's figures as kvmesh_index_*
// metrics, read at scrape time. A Node registers one for its index; a
// router running without a mesh can register one itself.
func NewIndexCollector(ix *tree.Index) prometheus.Collector { return &indexCollector{ix: ix} }

type indexCollector struct{ ix *tree.Index }

var (
	descIndexClaims    = prometheus.NewDesc("kvmesh_index_claims", "Occupied claim slots, including dead claims not swept yet.", nil, nil)
	descIndexCapacity  = prometheus.NewDesc("kvmesh_index_capacity_claims", "Configured claim capacity.", nil, nil)
	descIndexBackends  = prometheus.NewDesc("kvmesh_index_backends", "Backend names holding a registry id (of index.max 4,096): listed ones, and removed ones until index.forget_removed has passed.", nil, nil)
	descIndexForgotten = prometheus.NewDesc("kvmesh_index_backends_forgotten", "Removed backend names kept without an id after index.forget_removed (so late copies of their entries are refused).", nil, nil)
	descIndexTable     = prometheus.NewDesc("kvmesh_index_table_bytes", "Memory of the claim table: it starts at 2 MiB and doubles as claims arrive, up to 32 bytes times the power of two at or above twice index.capacity (64 MiB at the default 1,000,000).", nil, nil)
	descIndexFloor     = prometheus.NewDesc("kvmesh_index_floor_timestamp_seconds", "Eviction floor: claims expiring at or before it are gone (Unix seconds).", nil, nil)
)

var indexCounters = []struct {
	desc *prometheus.Desc
	get  func(*tree.Stats) uint64
}{
	{prometheus.NewDesc("kvmesh_index_inserted_claims_total", "Claims inserted.", nil, nil), func(s *tree.Stats) uint64 { return s.Inserted }},
	{prometheus.NewDesc("kvmesh_index_replaced_claims_total", "Claims replaced by a dominating value.", nil, nil), func(s *tree.Stats) uint64 { return s.Replaced }},
	{prometheus.NewDesc("kvmesh_index_coalesced_claims_total", "Refreshes skipped because they changed too little.", nil, nil), func(s *tree.Stats) uint64 { return s.Coalesced }},
	{prometheus.NewDesc("kvmesh_index_rejected_claims_total", "Claims rejected (expired, evicted, stale, invalid).", nil, nil), func(s *tree.Stats) uint64 { return s.Rejected }},
	{prometheus.NewDesc("kvmesh_index_swept_claims_total", "Dead claims reclaimed.", nil, nil), func(s *tree.Stats) uint64 { return s.Swept }},
	{prometheus.NewDesc("kvmesh_index_evicted_claims_total", "Claims evicted because the index was full.", nil, nil), func(s *tree.Stats) uint64 { return s.Evicted }},
	{prometheus.NewDesc("kvmesh_index_floor_raises_total", "Times the eviction floor rose.", nil, nil), func(s *tree.Stats) uint64 { return s.FloorRaises }},
	{prometheus.NewDesc("kvmesh_index_table_grows_total", "Times the claim table doubled (each copies the live claims under the writers' lock; lookups do not wait).", nil, nil), func(s *tree.Stats) uint64 { return s.Grown }},
	{prometheus.NewDesc("kvmesh_index_forgotten_backends_total", "Removed backends whose registry id was freed for new names (index.forget_removed after their removal).", nil, nil), func(s *tree.Stats) uint64 { return s.ForgotTotal }},
}

func (c *indexCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descIndexClaims, descIndexCapacity, descIndexBackends, descIndexForgotten, descIndexTable, descIndexFloor} {
		ch <- d
	}
	for _, ic := range indexCounters {
		ch <- ic.desc
	}
}

func (c *indexCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.ix.Stats()
	ch <- prometheus.MustNewConstMetric(descIndexClaims, prometheus.GaugeValue, float64(s.Claims))
	ch <- prometheus.MustNewConstMetric(descIndexCapacity, prometheus.GaugeValue, float64(s.Capacity))
	ch <- prometheus.MustNewConstMetric(descIndexBackends, prometheus.GaugeValue, float64(s.Backends))
	ch <- prometheus.MustNewConstMetric(descIndexForgotten, prometheus.GaugeValue, float64(s.Forgotten))
	ch <- prometheus.MustNewConstMetric(descIndexTable, prometheus.GaugeValue, float64(s.TableBytes))
	ch <- prometheus.MustNewConstMetric(descIndexFloor, prometheus.GaugeValue, float64(s.Floor)/1000) // 0: no eviction yet
	for _, ic := range indexCounters {
		ch <- prometheus.MustNewConstMetric(ic.desc, prometheus.CounterValue, float64(ic.get(&s)))
	}
}
