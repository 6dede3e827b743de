package main

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// -cpuprofile, -blockprofile and -mutexprofile write pprof files
// (gzip-compressed) and -exectrace an execution trace when the run stops,
// say which flag failed when a file cannot be made, and do nothing
// without a path.
func TestStartProfiles(t *testing.T) {
	dir := t.TempDir()
	p := profilePaths{cpu: filepath.Join(dir, "cpu.pprof"), block: filepath.Join(dir, "block.pprof"), mutex: filepath.Join(dir, "mutex.pprof"),
		exec: filepath.Join(dir, "exec.trace")}
	stop, err := startProfiles(p)
	if err != nil && (strings.Contains(err.Error(), "already in use") || strings.Contains(err.Error(), "already enabled")) {
		t.Skip("the test binary itself is being profiled or traced (go test -cpuprofile, -trace)")
	}
	if err != nil {
		t.Fatal(err)
	}
	x := 0
	for i := range 1_000_000 { // something to sample
		x += i % 7
	}
	_ = x
	// Something to block on, and a lock to contend for.
	var mu sync.Mutex
	var wg sync.WaitGroup
	mu.Lock()
	wg.Add(1)
	go func() {
		defer wg.Done()
		mu.Lock()
		mu.Unlock() //nolint:staticcheck // an empty critical section: the wait is the point
	}()
	time.Sleep(5 * time.Millisecond)
	mu.Unlock()
	wg.Wait()
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{p.cpu, p.block, p.mutex} {
		b, err := os.ReadFile(path)
		if err != nil || len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b {
			t.Errorf("%s: %d bytes, err %v; want a gzip stream", filepath.Base(path), len(b), err)
		}
	}

	// An execution trace starts with its header ("go 1.N trace").
	if b, err := os.ReadFile(p.exec); err != nil || !strings.HasPrefix(string(b), "go 1.") || !strings.Contains(string(b[:min(len(b), 16)]), " trace") {
		t.Errorf("exec.trace: %d bytes, err %v; want an execution trace", len(b), err)
	}

	bad := filepath.Join(t.TempDir(), "no", "such", "dir", "x.pprof")
	for flag, paths := range map[string]profilePaths{
		"-cpuprofile":   {cpu: bad},
		"-blockprofile": {cpu: filepath.Join(dir, "cpu2.pprof"), block: bad},
		"-mutexprofile": {mutex: bad},
		"-exectrace":    {cpu: filepath.Join(dir, "cpu4.pprof"), exec: bad},
	} {
		if _, err := startProfiles(paths); err == nil || !strings.Contains(err.Error(), flag) {
			t.Errorf("unwritable %s path: err %v, want one naming it", flag, err)
		}
	}
	// A failed start leaves no CPU profile running: a new one starts.
	stop, err = startProfiles(profilePaths{cpu: filepath.Join(dir, "cpu3.pprof")})
	if err != nil {
		t.Fatalf("after a failed start: %v", err)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	stop, err = startProfiles(profilePaths{})
	if err != nil || stop() != nil {
		t.Fatalf("no path: %v", err)
	}
}
