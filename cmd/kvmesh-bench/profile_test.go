package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// -cpuprofile writes a pprof file (gzip-compressed) when the run stops,
// says which flag failed when the file cannot be made, and does nothing
// without a path.
func TestStartCPUProfile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cpu.pprof")
	stop, err := startCPUProfile(path)
	if err != nil && strings.Contains(err.Error(), "already in use") {
		t.Skip("the test binary itself is being profiled (go test -cpuprofile)")
	}
	if err != nil {
		t.Fatal(err)
	}
	x := 0
	for i := range 1_000_000 { // something to sample
		x += i % 7
	}
	_ = x
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil || len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b {
		t.Fatalf("profile file: %d bytes, err %v; want a gzip stream", len(b), err)
	}
	if _, err := startCPUProfile(filepath.Join(t.TempDir(), "no", "such", "dir", "cpu.pprof")); err == nil || !strings.Contains(err.Error(), "-cpuprofile") {
		t.Fatalf("unwritable path: err %v, want one naming -cpuprofile", err)
	}
	stop, err = startCPUProfile("")
	if err != nil || stop() != nil {
		t.Fatalf("no path: %v", err)
	}
}
