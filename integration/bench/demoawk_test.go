package bench

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The demo (integration/demo/demo.sh) reads this package's reports with two awk programs, which find the columns
// they need by name: they must still find them in what WriteMarkdown writes. demoAWK writes r with WriteMarkdown to
// a file called name in a temporary directory and returns a runner of the demo's program prog (a file of
// integration/demo) on it.
func demoAWK(t *testing.T, r *Report, name, prog string) func(args ...string) (string, error) {
	t.Helper()
	awk, err := exec.LookPath("awk")
	if err != nil {
		t.Fatalf("the demo needs awk: %v", err)
	}
	var b bytes.Buffer
	if err := WriteMarkdown(&b, r); err != nil {
		t.Fatal(err)
	}
	report := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(report, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return func(args ...string) (string, error) {
		args = append(args, "-f", filepath.Join("..", "demo", prog), report)
		out, err := exec.Command(awk, args...).CombinedOutput()
		return string(out), err
	}
}

// armcells.awk: one arm's hit rate, TTFT p50 and p99 from the arms table.
func TestDemoArmCells(t *testing.T) {
	run := demoAWK(t, sampleReport(), "report.md", "armcells.awk")
	cells := func(arm string) (string, error) { return run("-v", "arm="+arm) }
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

// caveats.awk: the runs the table of every run (or of discarded runs) marks as not trusted.
func TestDemoCaveats(t *testing.T) {
	r := sampleReport()
	if out, err := demoAWK(t, r, "clean.md", "caveats.awk")(); err != nil || out != "" {
		t.Fatalf("every run trusted: %q (%v), want no output", out, err)
	}
	r.Runs[1].Invalid = "engine b3 fell 250 ms behind"
	r.Discarded = []RunResult{r.Runs[0]}
	r.Discarded[0].Invalid = "the load generator fell 120 ms behind"
	out, err := demoAWK(t, r, "lagged.md", "caveats.awk")()
	want := "NOT TRUSTED: " + r.Runs[1].Arm + " (lagged.md): engine b3 fell 250 ms behind\n" +
		"run again: " + r.Runs[0].Arm + " (lagged.md): the load generator fell 120 ms behind\n"
	if err != nil || out != want {
		t.Errorf("got %q (%v), want %q", out, err, want)
	}
}
