package main

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/rs/zerolog"

	"github.com/kvmesh/kvmesh/crdt"
	"github.com/kvmesh/kvmesh/router"
	"github.com/kvmesh/kvmesh/tree"
)

func stateIndex(t *testing.T) *tree.Index {
	t.Helper()
	cfg := tree.DefaultConfig()
	cfg.Capacity = 1 << 12
	ix, err := tree.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return ix
}

// learnSome learns a few chains on backend "b" and returns one of them.
func learnSome(t *testing.T, ix *tree.Index) *tree.Chain {
	t.Helper()
	l := router.NewLocalLearner(ix, "n1")
	id, err := ix.EnsureBackend("b")
	if err != nil {
		t.Fatal(err)
	}
	var ch tree.Chain
	for i := 0; i < 5; i++ {
		units := make([]byte, 4096)
		for j := range units {
			units[j] = byte(i*7 + j%251)
		}
		ix.Keyer().Bytes(&ch, tree.NewSeed("m", "", ""), units, []int{len(units)})
		l.Learn(&ch, id, time.Hour)
	}
	return &ch
}

// savedStore is a store in a new directory over an index with some claims,
// saved once.
func savedStore(t *testing.T) (dir string, ix *tree.Index, s *stateStore) {
	t.Helper()
	dir = t.TempDir()
	ix = stateIndex(t)
	learnSome(t, ix)
	s, err := newStateStore(dir, time.Minute, 2*time.Hour, ix, zerolog.Nop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.save(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.close)
	return dir, ix, s
}

func depth(ix *tree.Index, ch *tree.Chain) int32 {
	id, ok := ix.BackendByName("b")
	if !ok {
		return 0
	}
	var res tree.Result
	ix.Lookup(ch, time.Now().UnixMilli(), &res)
	return res.Depth(id)
}

// What one store writes, another loads: the restarted index matches the
// learned prompt at full depth, and the metrics say what happened.
func TestStateStoreRoundTrip(t *testing.T) {
	dir := t.TempDir()
	ix := stateIndex(t)
	ch := learnSome(t, ix)
	reg := prometheus.NewRegistry()
	s, err := newStateStore(dir, time.Minute, 2*time.Hour, ix, zerolog.Nop(), reg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.save(); err != nil {
		t.Fatal(err)
	}
	if got := metricValue(s.claims); got != float64(ix.Len()) || got == 0 {
		t.Fatalf("snapshot claims gauge %v, index holds %d", got, ix.Len())
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "*.tmp-*")); len(left) != 0 {
		t.Fatalf("temporary files left: %v", left)
	}

	s.close() // the directory's lock: one store at a time
	fresh := stateIndex(t)
	s2, err := newStateStore(dir, time.Minute, 2*time.Hour, fresh, zerolog.Nop(), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	s2.restore()
	if d, want := depth(fresh, ch), int32(ch.Blocks()); d != want || d == 0 {
		t.Fatalf("restored index matches the prompt at depth %d, want %d", d, want)
	}
	if got := metricValue(s2.restored); got != float64(ix.Len()) {
		t.Fatalf("restored claims %v, want %d", got, ix.Len())
	}
}

// A truncated or corrupted snapshot is counted and ignored: the index stays
// empty and nothing panics; a missing one is simply a cold start.
func TestStateStoreIgnoresDamage(t *testing.T) {
	dir, _, s := savedStore(t)
	s.close()
	path := filepath.Join(dir, stateFile)
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	flipped := append([]byte(nil), good...)
	flipped[len(flipped)/2] ^= 1
	for name, data := range map[string][]byte{
		"truncated": good[:len(good)/2], "flipped": flipped, "empty": {}, "garbage": []byte("not a snapshot at all, not at all"),
	} {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		fresh := stateIndex(t)
		s2, err := newStateStore(dir, time.Minute, 2*time.Hour, fresh, zerolog.Nop(), nil)
		if err != nil {
			t.Fatal(err)
		}
		s2.restore()
		s2.close()
		if fresh.Len() != 0 || metricValue(s2.loadErrs) != 1 {
			t.Fatalf("%s snapshot: %d claims loaded, %v load errors; want 0 and 1", name, fresh.Len(), metricValue(s2.loadErrs))
		}
	}
	os.Remove(path)
	fresh := stateIndex(t)
	s3, _ := newStateStore(dir, time.Minute, 2*time.Hour, fresh, zerolog.Nop(), nil)
	s3.restore()
	s3.close()
	if metricValue(s3.loadErrs) != 0 || fresh.Len() != 0 {
		t.Fatal("a missing snapshot is not an error")
	}
	// A directory where the snapshot goes is refused by name (every write
	// would fail too), not read as a missing snapshot.
	if err := os.Mkdir(path, 0o700); err != nil {
		t.Fatal(err)
	}
	var logs strings.Builder
	s4, _ := newStateStore(dir, time.Minute, 2*time.Hour, stateIndex(t), zerolog.New(&logs), nil)
	s4.restore()
	if metricValue(s4.loadErrs) != 1 || !strings.Contains(logs.String(), "not a regular file") {
		t.Fatalf("a directory at the snapshot's path: %v load errors, log %s", metricValue(s4.loadErrs), logs.String())
	}
}

// A snapshot taken before index.block_tokens changed is not loaded: its
// keys can never match (and would go to the peers). The node starts cold,
// says why, and counts it as a load error.
func TestStateStoreRefusesAnotherKeyScheme(t *testing.T) {
	dir, _, s := savedStore(t)
	s.close()
	cfg := tree.DefaultConfig()
	cfg.Capacity, cfg.BlockTokens = 1<<12, 32
	other, err := tree.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var logs strings.Builder
	s2, err := newStateStore(dir, time.Minute, 2*time.Hour, other, zerolog.New(&logs), nil)
	if err != nil {
		t.Fatal(err)
	}
	s2.restore()
	s2.close()
	if other.Len() != 0 || metricValue(s2.loadErrs) != 1 ||
		!strings.Contains(logs.String(), "index.block_tokens or index.checkpoint_tokens changed") || !strings.Contains(logs.String(), `"level":"warn"`) {
		t.Fatalf("block size 16's snapshot under 32: %d claims loaded, %v load errors, log %s", other.Len(), metricValue(s2.loadErrs), logs.String())
	}
	// The same directory, the same scheme: it loads.
	same := stateIndex(t)
	s3, _ := newStateStore(dir, time.Minute, 2*time.Hour, same, zerolog.Nop(), nil)
	s3.restore()
	s3.close()
	if same.Len() == 0 || metricValue(s3.loadErrs) != 0 {
		t.Fatalf("under its own scheme: %d claims, %v load errors", same.Len(), metricValue(s3.loadErrs))
	}
}

// A state directory that cannot hold a file fails the start with a clear
// error instead of failing every write later.
func TestStateStoreNeedsAWritableDir(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root writes into read-only directories")
	}
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o500); err != nil {
		t.Fatal(err)
	}
	defer os.Chmod(dir, 0o700)
	if _, err := newStateStore(dir, time.Minute, time.Hour, stateIndex(t), zerolog.Nop(), nil); err == nil {
		t.Fatal("a read-only state directory was accepted")
	}
}

// The periodic and the final snapshot can be asked for at once: the writes
// (which share a buffer) take turns, each succeeds, and the file left is
// whole. Under -race, unserialised writes fail this test.
func TestStateStoreConcurrentSaves(t *testing.T) {
	dir, ix, s := savedStore(t) // its buffer the next writes share
	const writers = 8
	errs := make(chan error, writers)
	var wg sync.WaitGroup
	for range writers {
		wg.Go(func() { errs <- s.save() })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("concurrent save: %v", err)
		}
	}
	data, err := os.ReadFile(filepath.Join(dir, stateFile))
	if err != nil {
		t.Fatal(err)
	}
	snap, err := crdt.ParseSnapshot(data)
	if err != nil {
		t.Fatalf("the snapshot left by concurrent saves is damaged: %v", err)
	}
	if snap.Info.Claims != ix.Len() || metricValue(s.writes.WithLabelValues("ok")) != writers+1 {
		t.Fatalf("snapshot of %d claims (index %d), %v writes", snap.Info.Claims, ix.Len(), metricValue(s.writes.WithLabelValues("ok")))
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "*.tmp-*")); len(left) != 0 {
		t.Fatalf("temporary files left: %v", left)
	}
}

// A process killed in the middle of a write leaves its temporary file:
// the next store in the directory removes such files, its own only, and
// leaves the snapshot as it was.
func TestStateStoreRemovesStaleTemps(t *testing.T) {
	dir, ix, s := savedStore(t)
	s.close()
	snapshot, err := os.ReadFile(filepath.Join(dir, stateFile))
	if err != nil {
		t.Fatal(err)
	}
	write := func(name string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte("half a snapshot"), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	stale := []string{write(stateFile + ".tmp-1234567"), write(stateFile + ".tmp-89")}
	kept := []string{write("other.snap.tmp-1"), write("claims.snapshot"), write(stateFile + ".bak")}
	if err := os.Mkdir(filepath.Join(dir, stateFile+".tmp-dir"), 0o700); err != nil { // not a file it writes
		t.Fatal(err)
	}
	kept = append(kept, filepath.Join(dir, stateFile+".tmp-dir"))

	fresh := stateIndex(t)
	s2, err := newStateStore(dir, time.Minute, 2*time.Hour, fresh, zerolog.Nop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range stale {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s is still there (%v)", filepath.Base(p), err)
		}
	}
	for _, p := range kept {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("%s, not the store's, was removed: %v", filepath.Base(p), err)
		}
	}
	if now, err := os.ReadFile(filepath.Join(dir, stateFile)); err != nil || string(now) != string(snapshot) {
		t.Fatalf("the snapshot changed (%v)", err)
	}
	s2.restore()
	if fresh.Len() != ix.Len() || metricValue(s2.loadErrs) != 0 {
		t.Fatalf("restored %d claims of %d, %v load errors", fresh.Len(), ix.Len(), metricValue(s2.loadErrs))
	}
}

func metricValue(c prometheus.Metric) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		panic(err)
	}
	if m.Counter != nil {
		return m.Counter.GetValue()
	}
	return m.Gauge.GetValue()
}

// Two processes given one --state-dir would overwrite each other's
// snapshots: the second store is refused with an error naming the holder,
// and once the first closes, the directory can be opened again.
func TestStateStoreLocksItsDirectory(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no flock")
	}
	dir, _, s := savedStore(t)
	_, err := newStateStore(dir, time.Minute, 2*time.Hour, stateIndex(t), zerolog.Nop(), nil)
	if err == nil || !strings.Contains(err.Error(), "in use by another kvmesh process") ||
		!strings.Contains(err.Error(), fmt.Sprintf("pid %d", os.Getpid())) {
		t.Fatalf("a second store on a locked directory: %v", err)
	}
	// The refused store did not disturb the holder's snapshot or lock.
	if err := s.save(); err != nil {
		t.Fatal(err)
	}
	s.close()
	s2, err := newStateStore(dir, time.Minute, 2*time.Hour, stateIndex(t), zerolog.Nop(), nil)
	if err != nil {
		t.Fatalf("after the holder closed: %v", err)
	}
	s2.close()
}

// A state directory deleted while the node runs (a cleanup job, an
// operator's rm -r) is made and locked again at the next snapshot, so a
// second process given the directory is still refused; and when another
// process took the directory first, this node writes nothing over its
// snapshot and says why.
func TestStateStoreRelocksARemovedDir(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no flock")
	}
	dir, _, s := savedStore(t)
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := s.save(); err != nil {
		t.Fatalf("a snapshot after the directory was removed: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, stateFile)); err != nil {
		t.Fatalf("no snapshot written again: %v", err)
	}
	if _, err := newStateStore(dir, time.Minute, 2*time.Hour, stateIndex(t), zerolog.Nop(), nil); err == nil ||
		!strings.Contains(err.Error(), "in use by another kvmesh process") {
		t.Fatalf("a second store after the first re-locked: %v", err)
	}

	// Removed again, and this time another store takes the directory first.
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	other, err := newStateStore(dir, time.Minute, 2*time.Hour, stateIndex(t), zerolog.Nop(), nil)
	if err != nil {
		t.Fatalf("the other store: %v", err)
	}
	defer other.close()
	if err := other.save(); err != nil {
		t.Fatal(err)
	}
	theirs, err := os.ReadFile(filepath.Join(dir, stateFile))
	if err != nil {
		t.Fatal(err)
	}
	err = s.save()
	if err == nil || !strings.Contains(err.Error(), "lock on the state directory was lost") {
		t.Fatalf("a snapshot over another process's directory: %v", err)
	}
	if now, _ := os.ReadFile(filepath.Join(dir, stateFile)); string(now) != string(theirs) {
		t.Fatal("the other store's snapshot was overwritten")
	}
	if got := metricValue(s.writes.WithLabelValues("error")); got != 1 {
		t.Fatalf("errors counted: %v, want 1", got)
	}
}
