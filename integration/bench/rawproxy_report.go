package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// Files RawProxyReport.WriteDir writes.
const (
	RawProxyJSON       = "rawproxy.json"
	RawProxyRPSSVG     = "rawproxy_rps.svg"
	RawProxyLatencySVG = "rawproxy_latency.svg"
)

// WriteMarkdown writes the comparison table: median and (min–max) over the
// repeats.
func (r *RawProxyReport) WriteMarkdown(w io.Writer) error {
	ew := &errWriter{w: w}
	p := ew.printf
	p("Setup: %s. Latency is wall-clock time for a whole streamed answer; added = the proxy's minus direct's in the same repeat. Median (min–max) over repeats.\n\n", r.Setup)
	p("| proxy | req/s | p50 ms | p99 ms | added p50 ms | added p99 ms | proxy CPU ms / 1k req | errors |\n")
	p("|---|---|---|---|---|---|---|---|\n")
	for _, s := range r.Summary {
		p("| %s | %s | %s | %s | %s | %s | %s | %s |\n", s.Proxy, spreadNum(s.RPS, 0), spreadNum(s.P50, 3), spreadNum(s.P99, 3),
			spreadNum(s.AddedP50, 3), spreadNum(s.AddedP99, 3), spreadNum(s.CPUPer1k, 0), spreadNum(s.Errors, 0))
	}
	for _, name := range sortedKeys(r.Skipped) {
		p("\n%s was skipped: %s\n", name, r.Skipped[name])
	}
	p("\n| repeat | position | proxy | requests | req/s | p50 ms | p99 ms | added p50 ms |\n|---|---|---|---|---|---|---|---|\n")
	for _, run := range r.Runs {
		p("| %d | %d | %s | %d | %.0f | %.3f | %.3f | %.3f |\n", run.Repeat+1, run.Position+1, run.Proxy, run.Requests, run.RPS, run.P50, run.P99, run.AddedP50)
	}
	if r.Command != "" {
		p("\nCommand:\n\n```\n%s\n```\n", r.Command)
	}
	return ew.err
}

// WriteDir writes rawproxy.md, rawproxy.json and the two charts into dir
// (beside a benchmark's README.md, whose names they do not collide with).
func (r *RawProxyReport) WriteDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	files := []struct {
		name  string
		write func(io.Writer) error
	}{
		{"rawproxy.md", func(w io.Writer) error {
			if err := r.WriteMarkdown(w); err != nil {
				return err
			}
			_, err := fmt.Fprintf(w, "\n![requests per second](%s)\n\n![added latency](%s)\n\nRaw results: [%s](%s).\n",
				RawProxyRPSSVG, RawProxyLatencySVG, RawProxyJSON, RawProxyJSON)
			return err
		}},
		{RawProxyJSON, func(w io.Writer) error {
			enc := json.NewEncoder(w)
			enc.SetIndent("", "  ")
			return enc.Encode(r)
		}},
		{RawProxyRPSSVG, r.writeRPSChart},
		{RawProxyLatencySVG, r.writeLatencyChart},
	}
	for _, f := range files {
		if err := writeFile(filepath.Join(dir, f.name), f.write); err != nil {
			return err
		}
	}
	return nil
}

func (r *RawProxyReport) writeRPSChart(w io.Writer) error {
	c := &chart{title: "Raw proxy throughput (same clients, same backends)", yLabel: "requests per second",
		format: func(v float64) string { return fmt.Sprintf("%.0f", v) }}
	for _, s := range r.Summary {
		c.groups = append(c.groups, chartGroup{label: s.Proxy, bars: []chartBar{spreadBar(s.RPS)}})
	}
	return c.write(w)
}

func (r *RawProxyReport) writeLatencyChart(w io.Writer) error {
	c := &chart{title: "Latency added over going direct (ms, wall clock)", yLabel: "added latency (ms)",
		series: []string{"p50", "p99"}, format: trimFloat}
	for _, s := range r.Summary {
		if s.Proxy == ProxyDirect {
			continue
		}
		c.groups = append(c.groups, chartGroup{label: s.Proxy, bars: []chartBar{spreadBar(s.AddedP50), spreadBar(s.AddedP99)}})
	}
	return c.write(w)
}
