package main

import (
	"io"
	"os"
	"path/filepath"
	"testing"
)

// kvmesh certs creates its directory, which holds the CA key, readable by
// its owner only, and leaves an existing directory's mode alone.
func TestCertsDirMode(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "new", "certs")
	if code := run([]string{"certs", "--dir", dir, "--nodes", "n1"}, io.Discard, io.Discard); code != 0 {
		t.Fatalf("exit %d", code)
	}
	if st, err := os.Stat(dir); err != nil || st.Mode().Perm() != 0o700 {
		t.Errorf("new directory: %v, %v; want 0700", st.Mode().Perm(), err)
	}
	existing := filepath.Join(t.TempDir(), "existing")
	if err := os.Mkdir(existing, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(existing, 0o750); err != nil {
		t.Fatal(err)
	}
	if code := run([]string{"certs", "--dir", existing, "--nodes", "n1"}, io.Discard, io.Discard); code != 0 {
		t.Fatalf("exit %d", code)
	}
	if st, _ := os.Stat(existing); st.Mode().Perm() != 0o750 {
		t.Errorf("existing directory changed to %v", st.Mode().Perm())
	}
}
