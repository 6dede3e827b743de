package bench

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// sampleReport is a small report with known figures: three arms, two
// repeats each.
func sampleReport() *Report {
	arms := []Arm{{Name: "round_robin", Policy: "round_robin", Nodes: 1}, {Name: "kvmesh", Policy: "kvmesh", Nodes: 1},
		{Name: "oracle", Policy: PolicyOracle, Nodes: 1}}
	hit := map[string][2]float64{"round_robin": {0.10, 0.12}, "kvmesh": {0.30, 0.34}, "oracle": {0.33, 0.35}}
	ttft := map[string][2]float64{"round_robin": {1.0, 1.2}, "kvmesh": {0.4, 0.5}, "oracle": {0.38, 0.42}}
	r := &Report{
		Title:    "test report",
		Command:  "kvmesh-bench run -workload mooncake",
		Workload: WorkloadInfo{Name: "mooncake(test)", Requests: 100, PromptTokens: 123456, Bound: 0.374, BoundBlockTokens: 16, WorkingSetBlocks: 4000, FleetBlocks: 1000, CapacityRatio: 0.25},
		Setup:    Setup{Backends: 8, CacheBlocks: 125, BlockTokens: 16, TimeScale: 10, Mode: OpenLoop, Concurrency: 64, Repeats: 2},
	}
	for rep := range 2 {
		for pos, a := range rotation(arms, rep) {
			r.Runs = append(r.Runs, RunResult{
				Arm: a.Name, Repeat: rep, Position: pos, Requests: 100, OK: 100,
				HitRate:   hit[a.Name][rep],
				TTFT:      LatencySummary{P50: ttft[a.Name][rep], P90: 2 * ttft[a.Name][rep], P99: 3 * ttft[a.Name][rep], N: 100},
				E2E:       LatencySummary{P50: 5, P99: 9, N: 100},
				Decisions: map[string]float64{"prefix": 60, "miss": 40},
			})
		}
	}
	r.Arms = Summarize(arms, r.Runs)
	return r
}

func TestSummarizeMedianAndSpread(t *testing.T) {
	r := sampleReport()
	km := r.Find("kvmesh")
	if km == nil || km.HitRate.N != 2 || !near(km.HitRate.Median, 0.32) || km.HitRate.Min != 0.30 || km.HitRate.Max != 0.34 {
		t.Fatalf("kvmesh summary %+v", km)
	}
	if !near(km.TTFTP99.Median, 1.35) {
		t.Errorf("kvmesh TTFT p99 median %v, want 1.35", km.TTFTP99.Median)
	}
	if r.Find("nope") != nil {
		t.Error("Find found an arm that is not there")
	}
}

func TestWriteMarkdown(t *testing.T) {
	var b bytes.Buffer
	if err := WriteMarkdown(&b, sampleReport()); err != nil {
		t.Fatal(err)
	}
	md := b.String()
	for _, want := range []string{
		"# test report",
		"Infinite-cache bound: 37.4%",
		"capacity ratio 0.250: the fleet cannot hold the working set",
		"| kvmesh | 32.0% (30.0–34.0) | 85.6% | – | – | 0.450 (0.400–0.500) |",
		"| round_robin | 11.0% (10.0–12.0) |",
		"hit rate vs round_robin: want >= 2 x round_robin, got 2.909 x — **met**",
		"hit rate vs oracle: want >= 0.95 x oracle, got 0.941 x — **MISSED**",
		"| prefix |",
		"kvmesh-bench run -workload mooncake",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("Markdown lacks %q:\n%s", want, md)
		}
	}
	// One summary row per arm, one row per run; the paired table leads
	// with kvmesh against each other arm.
	if n := strings.Count(md, "\n| kvmesh |"); n != 4 { // summary, decisions, paired with round_robin and oracle
		t.Errorf("kvmesh appears in %d table rows, want 4", n)
	}
	if !strings.Contains(md, "\n| kvmesh | round_robin | 2 |") || !strings.Contains(md, "\n| kvmesh | oracle | 2 |") {
		t.Errorf("no paired rows for kvmesh:\n%s", md)
	}
	if !strings.Contains(md, "| kvmesh | 30.0% |") || !strings.Contains(md, "| kvmesh | 34.0% |") {
		t.Errorf("no per-run rows for kvmesh:\n%s", md)
	}
}

func TestWriteJSONHasEveryRun(t *testing.T) {
	var b bytes.Buffer
	in := sampleReport()
	if err := WriteJSON(&b, in); err != nil {
		t.Fatal(err)
	}
	var out Report
	if err := json.Unmarshal(b.Bytes(), &out); err != nil {
		t.Fatal(err)
	}
	if len(out.Runs) != 6 || len(out.Arms) != 3 || out.Runs[3].Arm != in.Runs[3].Arm || out.Runs[3].HitRate != in.Runs[3].HitRate {
		t.Errorf("JSON round trip lost runs: %d runs, %d arms", len(out.Runs), len(out.Arms))
	}
	if out.Workload.Bound != 0.374 || out.Arms[1].HitRate.Max != 0.34 {
		t.Errorf("JSON round trip lost figures: %+v", out.Workload)
	}
}

// svgDoc is the part of an SVG document the chart tests look at.
type svgDoc struct {
	XMLName xml.Name  `xml:"svg"`
	Rects   []svgRect `xml:"rect"`
	Lines   []svgLine `xml:"line"`
	Groups  []struct {
		Class string    `xml:"class,attr"`
		Lines []svgLine `xml:"line"`
	} `xml:"g"`
	Texts []string `xml:"text"`
}

type svgRect struct {
	Class  string  `xml:"class,attr"`
	Y      float64 `xml:"y,attr"`
	Height float64 `xml:"height,attr"`
	Title  string  `xml:"title"`
}

type svgLine struct {
	Class string `xml:"class,attr"`
}

func parseSVG(t *testing.T, write func(io.Writer, *Report) error, r *Report) svgDoc {
	t.Helper()
	var b bytes.Buffer
	if err := write(&b, r); err != nil {
		t.Fatal(err)
	}
	var doc svgDoc
	if err := xml.Unmarshal(b.Bytes(), &doc); err != nil {
		t.Fatalf("not well-formed SVG: %v\n%s", err, b.String())
	}
	return doc
}

func TestHitRateSVG(t *testing.T) {
	doc := parseSVG(t, WriteHitRateSVG, sampleReport())
	var bars []svgRect
	for _, r := range doc.Rects {
		if r.Class == "bar" {
			bars = append(bars, r)
		}
	}
	if len(bars) != 3 {
		t.Fatalf("%d bars, want one per arm", len(bars))
	}
	// Bars are as tall as their medians: kvmesh (32%) is taller than
	// round_robin (11%), and the heights are proportional.
	rr, km := bars[0].Height, bars[1].Height
	if !(km > rr) || math.Abs(km/rr-0.32/0.11) > 0.01 {
		t.Errorf("bar heights %v (round_robin), %v (kvmesh): want proportional to 11%% and 32%%", rr, km)
	}
	if !strings.Contains(bars[1].Title, "kvmesh") || !strings.Contains(bars[1].Title, "30%") {
		t.Errorf("kvmesh bar title %q lacks the arm or its spread", bars[1].Title)
	}
	whiskers, refs := 0, 0
	for _, g := range doc.Groups {
		if g.Class == "whisker" {
			whiskers++
		}
	}
	for _, l := range doc.Lines {
		if l.Class == "ref" {
			refs++
		}
	}
	if whiskers != 3 || refs != 1 {
		t.Errorf("%d whiskers, %d reference lines; want 3 and 1 (the bound)", whiskers, refs)
	}
	if !strings.Contains(strings.Join(doc.Texts, "|"), "infinite-cache bound 37.4%") {
		t.Error("the bound is not labelled")
	}
}

func TestTTFTSVG(t *testing.T) {
	doc := parseSVG(t, WriteTTFTSVG, sampleReport())
	bars := 0
	for _, r := range doc.Rects {
		if r.Class == "bar" {
			bars++
		}
	}
	if bars != 9 {
		t.Errorf("%d bars, want 3 percentiles x 3 arms", bars)
	}
	texts := strings.Join(doc.Texts, "|")
	for _, want := range []string{"p50", "p90", "p99", "oracle"} {
		if !strings.Contains(texts, want) {
			t.Errorf("the chart lacks %q", want)
		}
	}
}

func TestNiceScale(t *testing.T) {
	for _, c := range []struct{ top, step, axis float64 }{
		{0.374, 0.1, 0.4}, {1, 0.2, 1}, {7.3, 2, 8}, {0, 0.2, 1}, {120, 25, 125},
		// An axis top past the largest float64 would make the ticks
		// endless: no scale then, as for an infinite top.
		{math.Inf(1), 0.2, 1}, {math.MaxFloat64, 0.2, 1},
	} {
		step, axis := niceScale(c.top)
		if !near(step, c.step) || !near(axis, c.axis) {
			t.Errorf("niceScale(%v) = %v, %v; want %v, %v", c.top, step, axis, c.step, c.axis)
		}
	}
}

func TestWriteDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "out")
	if err := sampleReport().WriteDir(dir); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{MarkdownFile, JSONFile, HitRateSVG, TTFTSVG} {
		st, err := os.Stat(filepath.Join(dir, f))
		if err != nil || st.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
	readme, _ := os.ReadFile(filepath.Join(dir, MarkdownFile))
	if !bytes.Contains(readme, []byte("](hit_rate.svg)")) || !bytes.Contains(readme, []byte("](results.json)")) {
		t.Error("README.md does not link the chart and the raw results")
	}
}

func TestThousands(t *testing.T) {
	for n, want := range map[int64]string{0: "0", 999: "999", 1000: "1,000", 1234567: "1,234,567", -4500: "-4,500"} {
		if got := thousands(n); got != want {
			t.Errorf("thousands(%d) = %q, want %q", n, got, want)
		}
	}
}

// The setup line names the backends' stream interval when they gathered
// tokens, and says nothing of it for a report that streamed every token.
func TestWriteMarkdownStreamInterval(t *testing.T) {
	const line = "backends stream 8 tokens per event after the first"
	for _, si := range []int{0, 1, 8} {
		r := sampleReport()
		r.Setup.StreamInterval = si
		var b bytes.Buffer
		if err := WriteMarkdown(&b, r); err != nil {
			t.Fatal(err)
		}
		if got := strings.Contains(b.String(), line); got != (si == 8) {
			t.Errorf("stream interval %d: setup names it %v", si, got)
		}
	}
}
