package bench

import (
	"bytes"
	"math"
	"strings"
	"testing"
	"time"
)

// A run's late binding figures come from the requests' holds: the share
// held, the hold's median and p90 in simulated time, and the share of the
// held that waited the whole hold_max (within held_ms's millisecond).
func TestHeldSummary(t *testing.T) {
	ms := time.Millisecond
	samples := []Sample{{}, {}, {}, {}, {}, {}, // 6 not held
		{Held: 10 * ms}, {Held: 20 * ms}, {Held: 30 * ms}, {Held: 299 * ms}, {Held: 300 * ms}, {Held: 310 * ms}}
	got := heldSummary(samples, 10, 300*ms)
	if got.N != 6 || got.Share != 0.5 || math.Abs(got.P50-1.645) > 1e-9 || math.Abs(got.P90-3.05) > 1e-9 || got.RanOut != 0.5 {
		t.Fatalf("heldSummary = %+v; want 6 held, share 0.5, p50 1.645 s, p90 3.05 s, ran out 0.5", got)
	}
	if got := heldSummary(samples, 10, 0); got.RanOut != 0 || got.N != 6 {
		t.Errorf("without a hold_max: %+v, want nothing counted as run out", got)
	}
	if got := heldSummary(samples[:6], 10, 300*ms); got != (HeldSummary{}) {
		t.Errorf("a run that held nothing: %+v, want zero", got)
	}
}

// The report has a late binding table with a row for each arm that held
// requests, and none when no arm did.
func TestWriteMarkdownHeld(t *testing.T) {
	r := sampleReport()
	var b bytes.Buffer
	if err := WriteMarkdown(&b, r); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "Late binding:") {
		t.Error("a report in which nothing was held has the late binding table")
	}
	for i := range r.Runs {
		if r.Runs[i].Arm == "kvmesh" {
			f := float64(r.Runs[i].Repeat)
			r.Runs[i].Held = HeldSummary{N: 20, Share: 0.2 + 0.1*f, P50: 0.5, P90: 2 + f, RanOut: 0.1 * f}
		}
	}
	r.Arms = Summarize(sampleArms(r), r.Runs)
	b.Reset()
	if err := WriteMarkdown(&b, r); err != nil {
		t.Fatal(err)
	}
	md := b.String()
	if !strings.Contains(md, "| kvmesh | 25.0% (20.0–30.0) | 0.500 (0.500–0.500) | 2.500 (2.000–3.000) | 5.0% (0.0–10.0) |") {
		t.Errorf("no late binding row for kvmesh:\n%s", md)
	}
	if strings.Contains(md, "| round_robin | 0.0%") {
		t.Errorf("an arm that held nothing has a row:\n%s", md)
	}
}
