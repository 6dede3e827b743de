package bench

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The demo (integration/demo/demo.sh) quotes one arm's hit rate, TTFT p50 and TTFT p99 from this package's report
// with armcells.awk, which finds the columns by name: it must still find them in the table WriteMarkdown writes.
func TestDemoArmCells(t *testing.T) {
	awk, err := exec.LookPath("awk")
	if err != nil {
		t.Fatalf("the demo needs awk: %v", err)
	}
	var b bytes.Buffer
	if err := WriteMarkdown(&b, sampleReport()); err != nil {
		t.Fatal(err)
	}
	report := filepath.Join(t.TempDir(), "report.md")
	if err := os.WriteFile(report, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	cells := func(arm string) (string, error) {
		out, err := exec.Command(awk, "-v", "arm="+arm, "-f", "../demo/armcells.awk", report).CombinedOutput()
		return string(out), err
	}
	got, err := cells("kvmesh")
	if want := "hit rate 32.0% (30.0–34.0), TTFT p50 0.450 (0.400–0.500) s, p99 1.350 (1.200–1.500) s"; err != nil || got != want {
		t.Errorf("kvmesh: %q (%v), want %q", got, err, want)
	}
	if got, err := cells("round_robin"); err != nil || !strings.HasPrefix(got, "hit rate 11.0% (10.0–12.0), TTFT p50 1.100 ") {
		t.Errorf("round_robin: %q (%v)", got, err)
	}
	if got, err := cells("nope"); err == nil || !strings.Contains(got, "no row for arm nope") {
		t.Errorf("an arm the table lacks: %q (%v), want an error naming it", got, err)
	}
}
