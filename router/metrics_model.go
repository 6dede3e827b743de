package router

import (
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// otherModel is the model label of requests naming no model a backend
// serves (or none at all): the label's values are bounded by the models
// actually served, whatever clients send.
const otherModel = "other"

var codeLabelNames = [6]string{"5xx", "1xx", "2xx", "3xx", "4xx", "5xx"}

// modelMetrics is one model's children of the request metrics, each
// resolved the first time it is used (a model's series appear only for the
// endpoints and status classes it sees), then read with one atomic load.
type modelMetrics struct {
	name     string
	m        *metrics
	reqs     [numEndpointLabels][6]atomic.Pointer[prometheus.Counter]
	duration [numEndpointLabels]atomic.Pointer[prometheus.Observer]
	ttfb     [numEndpointLabels]atomic.Pointer[prometheus.Observer]
}

func (mm *modelMetrics) requests(ep endpointLabel, class int) prometheus.Counter {
	if p := mm.reqs[ep][class].Load(); p != nil {
		return *p
	}
	c := mm.m.requests.WithLabelValues(endpointLabelNames[ep], codeLabelNames[class], mm.name)
	mm.reqs[ep][class].Store(&c) // a racing store stores the same child
	return c
}

func (mm *modelMetrics) durations(ep endpointLabel) prometheus.Observer {
	return observer(&mm.duration[ep], mm.m.duration, ep, mm.name)
}

func (mm *modelMetrics) firstBytes(ep endpointLabel) prometheus.Observer {
	return observer(&mm.ttfb[ep], mm.m.ttfb, ep, mm.name)
}

func observer(p *atomic.Pointer[prometheus.Observer], vec *prometheus.HistogramVec, ep endpointLabel, model string) prometheus.Observer {
	if o := p.Load(); o != nil {
		return *o
	}
	o := vec.WithLabelValues(endpointLabelNames[ep], model)
	p.Store(&o)
	return o
}

// modelLabels maps the models served (the router's model table) to their
// metrics. It follows the table: when the models served change, the next
// request rebuilds it, and the series of a model no longer served are
// deleted.
type modelLabels struct {
	m     *metrics
	other *modelMetrics
	cur   atomic.Pointer[modelLabelTable]
	mu    sync.Mutex // serializes rebuilds
	// skippedVec counts the entries of backends' GET /v1/models skipped by
	// the limits that bound the model label's values (Config.
	// MaxModelsPerBackend, MaxModelBytes), by reason; skipped holds its
	// children.
	skippedVec *prometheus.CounterVec
	skipped    [numModelSkips]prometheus.Counter
}

// modelSkip is why a discovered model was skipped.
type modelSkip uint8

const (
	skipTooMany modelSkip = iota // past Config.MaxModelsPerBackend
	skipIDBytes                  // an id longer than Config.MaxModelBytes
	numModelSkips
)

var modelSkipNames = [numModelSkips]string{"too_many", "id_too_long"}

type modelLabelTable struct {
	table  *modelTable // the model table it was built from
	byName map[string]*modelMetrics
}

func (l *modelLabels) init(m *metrics) {
	l.m = m
	l.other = &modelMetrics{name: otherModel, m: m}
	l.skippedVec = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "kvmesh", Subsystem: "router",
		Name: "discovered_models_skipped_total",
		Help: "Entries of backends' GET /v1/models skipped at each discovery, so that a backend cannot make the model label take any number of values: past max_models_per_backend (too_many) or with an id longer than max_model_bytes (id_too_long)."},
		[]string{"reason"})
	for r := range numModelSkips {
		l.skipped[r] = l.skippedVec.WithLabelValues(modelSkipNames[r])
	}
}

// collectors are the metrics of modelLabels to register besides the
// request metrics' vectors.
func (l *modelLabels) collectors() []prometheus.Collector {
	return []prometheus.Collector{l.skippedVec}
}

// forModel returns the metrics of model as the router's model table t
// knows it ("other" when no backend serves it).
func (l *modelLabels) forModel(t *modelTable, model string) *modelMetrics {
	c := l.cur.Load()
	if c == nil || c.table != t {
		c = l.rebuild(t)
	}
	if mm := c.byName[model]; mm != nil {
		return mm
	}
	return l.other
}

func (l *modelLabels) rebuild(t *modelTable) *modelLabelTable {
	l.mu.Lock()
	defer l.mu.Unlock()
	old := l.cur.Load()
	if old != nil && old.table == t {
		return old
	}
	c := &modelLabelTable{table: t, byName: make(map[string]*modelMetrics, len(t.ids))}
	for _, id := range t.ids {
		if id == otherModel {
			c.byName[id] = l.other
			continue
		}
		mm := (*modelMetrics)(nil)
		if old != nil {
			mm = old.byName[id]
		}
		if mm == nil {
			mm = &modelMetrics{name: id, m: l.m}
		}
		c.byName[id] = mm
	}
	if old != nil {
		for id := range old.byName {
			if _, kept := c.byName[id]; !kept && id != otherModel {
				gone := prometheus.Labels{"model": id}
				l.m.requests.DeletePartialMatch(gone)
				l.m.duration.DeletePartialMatch(gone)
				l.m.ttfb.DeletePartialMatch(gone)
			}
		}
	}
	l.cur.Store(c)
	return c
}

// modelMetricsFor is the request metrics' children for model.
func (rt *Router) modelMetricsFor(model string) *modelMetrics {
	return rt.metrics.models.forModel(rt.models.cur.Load(), model)
}
