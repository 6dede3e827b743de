package sim

import (
	"bytes"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// The /metrics page, written by hand. Every router node of a benchmark arm
// scrapes every backend (eight nodes and the shadow at a tenth of a second
// each, at time scale 10) in the same process as the backends, and
// promhttp's Gather and encoder cost ~100 µs a page: 9% of an 8-node agent
// run's CPU. This writer appends the same page body (byte for byte: the
// test compares it with promhttp's; the Content-Type lacks promhttp's
// escaping parameter) into a pooled buffer. The registry stays the
// source of the histograms and serves Registry() for in-process readers.

// pageMetric is one series of the page, in the registry's order.
type pageMetric struct {
	head   []byte // "# HELP ...\n# TYPE ...\n" when it opens a family, else nil
	series []byte // `name{labels}` (a histogram: `labels`, the name's parts added per line)
	name   string
	read   func(in *Instance) float64 // nil for a histogram
	hist   prometheus.Histogram
}

// metricsPage is an instance's page layout, built once.
type metricsPage struct {
	metrics []pageMetric
	pool    sync.Pool // *[]byte
	dto     sync.Pool // *dto.Metric
}

// labelPair is one label of a series.
type labelPair struct{ name, value string }

func newMetricsPage(c *collector, hists []pageHistogram) *metricsPage {
	var ms []pageMetric
	for _, k := range c.kinds {
		ms = append(ms, pageMetric{name: k.name, series: seriesText(k.name, k.labels), read: k.read, head: familyHead(k.name, k.help, typeName(k.typ))})
	}
	for _, h := range hists {
		ms = append(ms, pageMetric{name: h.name, series: labelsText(h.labels), hist: h.h, head: familyHead(h.name, h.help, "histogram")})
	}
	// The registry sorts families by name and a family's series by their
	// label values in label-name order, which is the order of their label
	// text (the same labels, sorted by name).
	slices.SortStableFunc(ms, func(a, b pageMetric) int {
		if c := strings.Compare(a.name, b.name); c != 0 {
			return c
		}
		return bytes.Compare(a.series, b.series)
	})
	for i := 1; i < len(ms); i++ {
		if ms[i].name == ms[i-1].name {
			ms[i].head = nil
		}
	}
	p := &metricsPage{metrics: ms}
	p.pool.New = func() any { b := make([]byte, 0, 8<<10); return &b }
	p.dto.New = func() any { return new(dto.Metric) }
	return p
}

// typeName is a value type's name on a # TYPE line.
func typeName(t prometheus.ValueType) string {
	if t == prometheus.CounterValue {
		return "counter"
	}
	return "gauge"
}

// pageHistogram is a histogram of the page with its family's text.
type pageHistogram struct {
	name, help string
	labels     []labelPair
	h          prometheus.Histogram
}

func familyHead(name, help, typ string) []byte {
	b := []byte("# HELP " + name + " ")
	for _, c := range []byte(help) {
		switch c {
		case '\\':
			b = append(b, `\\`...)
		case '\n':
			b = append(b, `\n`...)
		default:
			b = append(b, c)
		}
	}
	return append(b, "\n# TYPE "+name+" "+typ+"\n"...)
}

// labelsText is `a="x",b="y"` sorted by name, values escaped.
func labelsText(labels []labelPair) []byte {
	ls := slices.Clone(labels)
	slices.SortFunc(ls, func(a, b labelPair) int { return strings.Compare(a.name, b.name) })
	var b []byte
	for i, l := range ls {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, l.name+`="`...)
		for _, c := range []byte(l.value) {
			switch c {
			case '\\':
				b = append(b, `\\`...)
			case '"':
				b = append(b, `\"`...)
			case '\n':
				b = append(b, `\n`...)
			default:
				b = append(b, c)
			}
		}
		b = append(b, '"')
	}
	return b
}

func seriesText(name string, labels []labelPair) []byte {
	b := []byte(name)
	if len(labels) > 0 {
		b = append(append(append(b, '{'), labelsText(labels)...), '}')
	}
	return b
}

// append appends in's page to b.
func (p *metricsPage) append(b []byte, in *Instance) []byte {
	for i := range p.metrics {
		m := &p.metrics[i]
		b = append(b, m.head...)
		if m.read != nil {
			b = append(append(b, m.series...), ' ')
			b = append(strconv.AppendFloat(b, m.read(in), 'g', -1, 64), '\n')
			continue
		}
		d := p.dto.Get().(*dto.Metric)
		d.Reset()
		if err := m.hist.Write(d); err == nil && d.Histogram != nil {
			b = p.appendHistogram(b, m, d.Histogram)
		}
		p.dto.Put(d)
	}
	return b
}

func (p *metricsPage) appendHistogram(b []byte, m *pageMetric, h *dto.Histogram) []byte {
	line := func(b []byte, suffix string, le []byte, v float64) []byte {
		b = append(append(b, m.name...), suffix...)
		if len(m.series) > 0 || le != nil {
			b = append(append(b, '{'), m.series...)
			if le != nil {
				if len(m.series) > 0 {
					b = append(b, ',')
				}
				b = append(append(append(b, `le="`...), le...), '"')
			}
			b = append(b, '}')
		}
		b = append(b, ' ')
		return append(strconv.AppendFloat(b, v, 'g', -1, 64), '\n')
	}
	var num [32]byte
	for _, bk := range h.Bucket {
		b = line(b, "_bucket", strconv.AppendFloat(num[:0], bk.GetUpperBound(), 'g', -1, 64), float64(bk.GetCumulativeCount()))
	}
	b = line(b, "_bucket", []byte("+Inf"), float64(h.GetSampleCount()))
	b = line(b, "_sum", nil, h.GetSampleSum())
	return line(b, "_count", nil, float64(h.GetSampleCount()))
}

// handleMetrics serves GET /metrics.
func (in *Instance) handleMetrics(w http.ResponseWriter, _ *http.Request) {
	bp := in.page.pool.Get().(*[]byte)
	*bp = in.page.append((*bp)[:0], in)
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	_, _ = w.Write(*bp)
	in.page.pool.Put(bp)
}
