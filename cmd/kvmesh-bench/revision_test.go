package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
)

// Without a VCS stamp in the binary, the revision comes from the checkout:
// its HEAD, marked dirty when a tracked file changed.
func TestCheckoutRevision(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not installed")
	}
	dir := t.TempDir()
	git := func(args ...string) {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-C", dir, "-c", "user.name=t", "-c", "user.email=t@example.com"}, args...)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	if got := checkoutRevision(dir); got != "" {
		t.Fatalf("a directory that is not a checkout has revision %q", got)
	}
	git("init", "-q")
	f := filepath.Join(dir, "a.txt")
	if err := os.WriteFile(f, []byte("a"), 0o644); err != nil {
		t.Fatal(err)
	}
	git("add", "a.txt")
	git("commit", "-q", "-m", "a")
	clean := checkoutRevision(dir)
	if !regexp.MustCompile(`^[0-9a-f]{40}$`).MatchString(clean) {
		t.Fatalf("clean checkout: revision %q", clean)
	}
	// Published results (docs/) are no change to the code measured.
	docs := filepath.Join(dir, "docs", "bench", "x")
	if err := os.MkdirAll(docs, 0o755); err != nil {
		t.Fatal(err)
	}
	readme := filepath.Join(docs, "README.md")
	if err := os.WriteFile(readme, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	git("add", readme)
	git("commit", "-q", "-m", "results")
	clean = checkoutRevision(dir)
	if err := os.WriteFile(readme, []byte("new"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := checkoutRevision(dir); got != clean {
		t.Fatalf("after re-publishing under docs/: %q, want %q", got, clean)
	}
	if err := os.WriteFile(f, []byte("b"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := checkoutRevision(dir); got != clean+"+dirty" {
		t.Fatalf("after editing a tracked file: %q, want %q", got, clean+"+dirty")
	}
	if checkoutRevision("") != "" {
		t.Fatal("no directory, yet a revision")
	}
}
