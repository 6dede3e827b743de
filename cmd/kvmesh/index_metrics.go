package main

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvmesh/kvmesh/tree"
)

// indexCollector exports the claim index's size and counters, read at
// scrape time from tree.Index.Stats.
type indexCollector struct {
	ix                                      *tree.Index
	claims, capacity, backends, floor       *prometheus.Desc
	inserted, replaced, coalesced, rejected *prometheus.Desc
	swept, evicted, floorRaises             *prometheus.Desc
}

func newIndexCollector(ix *tree.Index) *indexCollector {
	d := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc("kvmesh_index_"+name, help, nil, nil)
	}
	return &indexCollector{ix: ix,
		claims:      d("claims", "Claims held (including dead ones not yet swept)."),
		capacity:    d("capacity_claims", "Configured capacity in claims."),
		backends:    d("backends", "Backends in the registry."),
		floor:       d("floor_expiry_seconds", "Eviction floor: claims expiring at or before it (Unix seconds) are gone."),
		inserted:    d("claims_inserted_total", "Claims inserted."),
		replaced:    d("claims_replaced_total", "Claims replaced by a dominating value (refreshes)."),
		coalesced:   d("refreshes_coalesced_total", "Refreshes skipped because they would change too little."),
		rejected:    d("claims_rejected_total", "Claims rejected: expired, below the floor, stale generation or invalid."),
		swept:       d("claims_swept_total", "Dead claims reclaimed."),
		evicted:     d("claims_evicted_total", "Claims evicted because the index was full."),
		floorRaises: d("floor_raises_total", "Times the eviction floor rose."),
	}
}

func (c *indexCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.claims, c.capacity, c.backends, c.floor, c.inserted, c.replaced, c.coalesced, c.rejected, c.swept, c.evicted, c.floorRaises} {
		ch <- d
	}
}

func (c *indexCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.ix.Stats()
	g := func(d *prometheus.Desc, v float64) { ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v) }
	n := func(d *prometheus.Desc, v uint64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v))
	}
	g(c.claims, float64(s.Claims))
	g(c.capacity, float64(s.Capacity))
	g(c.backends, float64(s.Backends))
	g(c.floor, max(0, float64(s.Floor)/1000))
	n(c.inserted, s.Inserted)
	n(c.replaced, s.Replaced)
	n(c.coalesced, s.Coalesced)
	n(c.rejected, s.Rejected)
	n(c.swept, s.Swept)
	n(c.evicted, s.Evicted)
	n(c.floorRaises, s.FloorRaises)
}
