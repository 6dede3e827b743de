package bench

import (
	"fmt"
	"html"
	"io"
	"math"
)

// Charts are hand-written SVG: grouped bars (the median over repeats) with
// whiskers from the minimum to the maximum, an optional dashed reference
// line, axis ticks at round numbers, a legend. No dependency, and the files
// diff well.

// chartBar is one bar: a median and its spread.
type chartBar struct {
	value, lo, hi float64
}

// chartGroup is one arm's bars, one per series.
type chartGroup struct {
	label string
	bars  []chartBar
}

// chart is a grouped bar chart.
type chart struct {
	title, yLabel string
	series        []string
	groups        []chartGroup
	// ref draws a dashed horizontal line at refValue labelled refLabel
	// (refLabel "" = none).
	refValue float64
	refLabel string
	format   func(float64) string // value labels and ticks
}

var seriesColors = []string{"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f"}

const (
	chartHeight = 430 // room under the axis for rotated arm names
	plotTop     = 50
	plotBottom  = 300 // y of the x axis
	plotLeft    = 70
	groupGap    = 26
)

func (c *chart) write(w io.Writer) error {
	ew := &errWriter{w: w}
	p := ew.printf
	nSeries := max(len(c.series), 1)
	barWidth := 22
	if nSeries == 1 {
		barWidth = 34
	}
	groupWidth := nSeries*barWidth + groupGap
	// Room on the right for the last rotated name, and the legend.
	width := max(plotLeft+len(c.groups)*groupWidth+130, 420)

	top := c.refValue
	for _, g := range c.groups {
		for _, b := range g.bars {
			top = max(top, b.hi, b.value)
		}
	}
	step, ymax := niceScale(top)
	y := func(v float64) float64 {
		if ymax <= 0 {
			return plotBottom
		}
		return plotBottom - (plotBottom-plotTop)*v/ymax
	}

	p(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="11">`+"\n",
		width, chartHeight, width, chartHeight)
	p(`<rect width="%d" height="%d" fill="white"/>`+"\n", width, chartHeight)
	p(`<text x="%d" y="24" font-size="15" font-weight="bold">%s</text>`+"\n", plotLeft, esc(c.title))
	p(`<text transform="translate(16 %d) rotate(-90)" text-anchor="middle">%s</text>`+"\n", (plotTop+plotBottom)/2, esc(c.yLabel))

	// Grid and ticks.
	plotRight := plotLeft + len(c.groups)*groupWidth
	for v := 0.0; step > 0 && v <= ymax+step/2; v += step {
		p(`<line class="grid" x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", plotLeft, plotRight, y(v), y(v))
		p(`<text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n", plotLeft-6, y(v)+4, esc(c.format(v)))
	}
	p(`<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="black"/>`+"\n", plotLeft, plotRight, plotBottom, plotBottom)
	p(`<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="black"/>`+"\n", plotLeft, plotLeft, plotTop-10, plotBottom)

	// Bars, whiskers, labels.
	for gi, g := range c.groups {
		x0 := plotLeft + gi*groupWidth + groupGap/2
		for si, b := range g.bars {
			x := x0 + si*barWidth
			color := seriesColors[si%len(seriesColors)]
			h := plotBottom - y(b.value)
			p(`<rect class="bar" x="%d" y="%.1f" width="%d" height="%.1f" fill="%s"><title>%s %s: %s (%s–%s)</title></rect>`+"\n",
				x+1, y(b.value), barWidth-2, max(h, 0), color, esc(g.label), esc(seriesName(c.series, si)),
				esc(c.format(b.value)), esc(c.format(b.lo)), esc(c.format(b.hi)))
			if b.hi > b.lo {
				cx := float64(x) + float64(barWidth)/2
				p(`<g class="whisker" stroke="black"><line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f"/>`, cx, cx, y(b.lo), y(b.hi))
				p(`<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f"/><line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f"/></g>`+"\n",
					cx-4, cx+4, y(b.lo), y(b.lo), cx-4, cx+4, y(b.hi), y(b.hi))
			}
			if len(c.series) <= 1 {
				p(`<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", float64(x)+float64(barWidth)/2, min(y(b.hi), y(b.value))-5, esc(c.format(b.value)))
			}
		}
		cx := x0 + nSeries*barWidth/2
		p(`<text class="label" transform="translate(%d %d) rotate(30)">%s</text>`+"\n", cx-4, plotBottom+14, esc(g.label))
	}

	if c.refLabel != "" {
		p(`<line class="ref" x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#333" stroke-dasharray="6 4"/>`+"\n",
			plotLeft, plotRight, y(c.refValue), y(c.refValue))
		p(`<text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n", plotRight, y(c.refValue)-4, esc(c.refLabel))
	}
	if len(c.series) > 1 {
		for si, s := range c.series {
			ly := plotTop + si*18
			p(`<rect x="%d" y="%d" width="12" height="12" fill="%s"/><text x="%d" y="%d">%s</text>`+"\n",
				plotRight+16, ly, seriesColors[si%len(seriesColors)], plotRight+32, ly+10, esc(s))
		}
	}
	p(`<text x="%d" y="%d" fill="#555">bars: median over repeats; whiskers: min–max</text>`+"\n", plotLeft, chartHeight-8)
	p("</svg>\n")
	return ew.err
}

func seriesName(series []string, i int) string {
	if i < len(series) {
		return series[i]
	}
	return ""
}

func esc(s string) string { return html.EscapeString(s) }

// niceScale returns a round tick step and the axis top (a multiple of the
// step at or above top) for about five ticks.
func niceScale(top float64) (step, axisTop float64) {
	if !(top > 0) || math.IsInf(top, 0) {
		return 0.2, 1
	}
	raw := top / 5
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if step = m * mag; step >= raw {
			break
		}
	}
	// Within a step of the largest float64 (a results.json can say
	// anything) the axis top overflows to +Inf, and the tick loop, whose
	// counter then stops growing at +Inf, would never end.
	if axisTop = math.Ceil(top/step-1e-9) * step; math.IsInf(axisTop, 0) {
		return 0.2, 1
	}
	return step, axisTop
}

// WriteHitRateSVG charts each arm's token hit rate (backend counters) with
// the infinite-cache bound as the reference line.
func WriteHitRateSVG(w io.Writer, r *Report) error {
	c := &chart{
		title:  "Token prefix-cache hit rate (backend counters)",
		yLabel: "hit rate (% of prompt tokens)",
		format: func(v float64) string { return fmt.Sprintf("%.0f%%", 100*v) },
	}
	if r.Workload.Bound > 0 {
		c.refValue, c.refLabel = r.Workload.Bound, fmt.Sprintf("infinite-cache bound %.1f%%", 100*r.Workload.Bound)
	}
	for i := range r.Arms {
		a := &r.Arms[i]
		c.groups = append(c.groups, chartGroup{label: a.Arm.Name, bars: []chartBar{spreadBar(a.HitRate)}})
	}
	return c.write(w)
}

// WriteTTFTSVG charts each arm's TTFT p50, p90 and p99.
func WriteTTFTSVG(w io.Writer, r *Report) error {
	c := &chart{
		title:  "Time to first token (simulated seconds)",
		yLabel: "TTFT (s)",
		series: []string{"p50", "p90", "p99"},
		format: func(v float64) string { return trimFloat(v) },
	}
	for i := range r.Arms {
		a := &r.Arms[i]
		c.groups = append(c.groups, chartGroup{label: a.Arm.Name,
			bars: []chartBar{spreadBar(a.TTFTP50), spreadBar(a.TTFTP90), spreadBar(a.TTFTP99)}})
	}
	return c.write(w)
}

func spreadBar(s Spread) chartBar { return chartBar{value: s.Median, lo: s.Min, hi: s.Max} }

// trimFloat formats v with 3 significant digits.
func trimFloat(v float64) string { return fmt.Sprintf("%.3g", v) }
