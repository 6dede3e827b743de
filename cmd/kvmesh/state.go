package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/kvmesh/kvmesh/crdt"
	"github.com/kvmesh/kvmesh/tree"
)

// stateFile is the snapshot's name in --state-dir; its temporary files
// are named stateTempPrefix followed by a random suffix.
const (
	stateFile       = "claims.snap"
	stateTempPrefix = stateFile + ".tmp-"
)

// stateStore keeps the node's claim state on disk (--state-dir), so that a
// node, or a whole mesh, restarted at once starts warm: it writes a
// checksummed snapshot (crdt.AppendSnapshot) every StateInterval and once
// more at shutdown, each time to a temporary file that is synced and then
// renamed over the last one, so a crash never leaves half a snapshot in its
// place; at start it loads the snapshot before the node joins the mesh or
// serves. A truncated, corrupted or unreadable snapshot is reported and
// ignored: the node starts cold, as without a state directory. Temporary
// files a crash left behind are removed when the store opens.
type stateStore struct {
	dir      string
	ix       *tree.Index
	log      zerolog.Logger
	interval time.Duration
	maxTTL   int64 // ms: no claim lives longer (expiries are capped on load)
	now      func() time.Time

	writes   *prometheus.CounterVec // by result
	bytes    prometheus.Gauge
	claims   prometheus.Gauge
	restored prometheus.Gauge
	loadErrs prometheus.Counter

	mu  sync.Mutex // one write at a time: the periodic and the final one share buf
	buf []byte

	lock *os.File // held while the store is open (statelock_unix.go)
}

func newStateStore(dir string, interval time.Duration, maxTTL time.Duration, ix *tree.Index, log zerolog.Logger, reg prometheus.Registerer) (*stateStore, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("state directory: %w", err)
	}
	lock, err := lockStateDir(dir)
	if err != nil {
		return nil, err
	}
	s, err := openStateStore(dir, interval, maxTTL, ix, log, reg)
	if err != nil {
		unlockStateDir(lock)
		return nil, err
	}
	s.lock = lock
	return s, nil
}

// close releases the directory's lock: after the final save.
func (s *stateStore) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	unlockStateDir(s.lock)
	s.lock = nil
}

func openStateStore(dir string, interval time.Duration, maxTTL time.Duration, ix *tree.Index, log zerolog.Logger, reg prometheus.Registerer) (*stateStore, error) {
	s := &stateStore{dir: dir, ix: ix, log: log, interval: interval, maxTTL: maxTTL.Milliseconds(), now: time.Now,
		writes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvmesh_state_snapshot_writes_total",
			Help: "Snapshots of the claim state written to --state-dir, by result (ok, error)."}, []string{"result"}),
		bytes: prometheus.NewGauge(prometheus.GaugeOpts{Name: "kvmesh_state_snapshot_size_bytes",
			Help: "Size of the last snapshot written."}),
		claims: prometheus.NewGauge(prometheus.GaugeOpts{Name: "kvmesh_state_snapshot_claims",
			Help: "Claims in the last snapshot written."}),
		restored: prometheus.NewGauge(prometheus.GaugeOpts{Name: "kvmesh_state_restored_claims",
			Help: "Claims loaded from the snapshot at start (0 when none was loaded)."}),
		loadErrs: prometheus.NewCounter(prometheus.CounterOpts{Name: "kvmesh_state_load_errors_total",
			Help: "Snapshots found at start that could not be read, were damaged, or were taken under another key scheme (index.block_tokens or checkpoint_tokens changed) (ignored: the node started cold)."}),
	}
	s.writes.WithLabelValues("ok")
	s.writes.WithLabelValues("error")
	if reg != nil {
		for _, c := range []prometheus.Collector{s.writes, s.bytes, s.claims, s.restored, s.loadErrs} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	s.removeStaleTemps()
	if err := probeStateDir(dir); err != nil {
		return nil, err
	}
	return s, nil
}

// stateProbeBytes is what the start writes and syncs to a temporary file in
// --state-dir: an empty file is created even on a full disk (it takes an
// inode, no data block), so only written and synced bytes find out that
// no snapshot would fit. 64 KiB: a small mesh's snapshot, cheap to write
// once.
const stateProbeBytes = 64 << 10

// probeStateDir fails the start, not the first periodic write minutes
// later, when dir cannot take a file or has no room for one (a full disk,
// a quota, a read-only mount).
func probeStateDir(dir string) error {
	probe, err := os.CreateTemp(dir, stateTempPrefix+"*")
	if err != nil {
		return fmt.Errorf("state directory %s is not writable: %w", dir, err)
	}
	defer os.Remove(probe.Name())
	_, err = probe.Write(make([]byte, stateProbeBytes))
	if err == nil {
		err = probe.Sync()
	}
	if cerr := probe.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("state directory %s cannot hold a snapshot (a %d KiB test write failed: %w): free space on its volume, or give --state-dir another directory",
			dir, stateProbeBytes>>10, err)
	}
	return nil
}

// removeStaleTemps removes the temporary files of this store (its own
// name pattern, in its directory, nothing else) that a process killed in
// the middle of a write left behind: nothing else removes them, and they
// would pile up on the volume, one per such restart.
func (s *stateStore) removeStaleTemps() {
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return // the probe below reports an unusable directory
	}
	for _, e := range entries {
		if !e.Type().IsRegular() || !strings.HasPrefix(e.Name(), stateTempPrefix) {
			continue
		}
		path := filepath.Join(s.dir, e.Name())
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			s.log.Warn().Err(err).Str("path", path).Msg("state: a temporary file left by an interrupted write could not be removed")
			continue
		}
		s.log.Info().Str("path", path).Msg("state: removed a temporary file left by an interrupted write")
	}
}

// restore loads the snapshot, if there is one, into the index. It never
// fails the start: a damaged snapshot, or one taken under another key
// scheme (index.block_tokens or checkpoint_tokens changed), is logged,
// counted and ignored.
func (s *stateStore) restore() {
	path := filepath.Join(s.dir, stateFile)
	data, err := readSnapshotFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		s.log.Info().Str("path", path).Msg("state: no snapshot yet; starting cold")
		return
	}
	if err == nil {
		var snap *crdt.Snapshot
		if snap, err = crdt.ParseSnapshot(data); err == nil {
			if err = snap.Fits(s.ix); err != nil {
				// Not damage: the index settings changed on purpose, most likely.
				s.loadErrs.Inc()
				s.log.Warn().Str("path", path).Err(err).Msg("state: the snapshot was taken under other index settings and was not loaded; starting cold (it is replaced at the next write)")
				return
			}
			now := s.now()
			res := snap.Apply(s.ix, now.UnixMilli(), s.maxTTL)
			s.restored.Set(float64(res.Claims))
			s.log.Info().Str("path", path).Int("claims", res.Claims).Int("expired_or_rejected", res.Rejected).
				Int("backends", res.Backends).Stringer("age", now.Sub(time.UnixMilli(snap.Info.Created))).
				Msg("state: snapshot loaded")
			return
		}
	}
	s.loadErrs.Inc()
	s.log.Error().Str("path", path).Err(err).Msg("state: the snapshot is unusable and was ignored; starting cold (it is replaced at the next write)")
}

// readSnapshotFile reads the snapshot at path, refusing what is not a
// regular file (a directory there would fail every write, which the log
// would not say) or is larger than crdt.MaxSnapshotBytes (checked before
// it is read into memory).
func readSnapshotFile(path string) ([]byte, error) {
	fi, err := os.Lstat(path)
	switch {
	case err != nil:
		return nil, err
	case !fi.Mode().IsRegular():
		return nil, fmt.Errorf("%s is not a regular file (%v): move it away, or no snapshot can be written either", path, fi.Mode().Type())
	case fi.Size() > crdt.MaxSnapshotBytes:
		return nil, fmt.Errorf("%s is %d bytes, more than a snapshot can be (%d)", path, fi.Size(), crdt.MaxSnapshotBytes)
	}
	return os.ReadFile(path)
}

// save writes a snapshot atomically: temporary file, fsync, rename, fsync
// of the directory. Calls are serialised: safe from any goroutine.
func (s *stateStore) save() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	err := s.relock()
	if err == nil {
		err = s.write()
	}
	if err != nil {
		s.writes.WithLabelValues("error").Inc()
		s.log.Warn().Err(err).Str("dir", s.dir).Msg("state: snapshot not written")
		return err
	}
	s.writes.WithLabelValues("ok").Inc()
	return nil
}

// relock takes the directory's lock again when it was lost: the directory
// (or its lock file) was deleted or replaced while the node ran, so the
// lock it holds is on a file no other process would find. The directory
// is made again and locked; when another process locked it meanwhile, no
// snapshot is written over that process's (the error says which). Caller
// holds mu; a store opened without a lock (tests) is left alone.
func (s *stateStore) relock() error {
	if s.lock == nil || lockStillHeld(s.dir, s.lock) {
		return nil
	}
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return fmt.Errorf("state directory %s was removed and cannot be made again: %w", s.dir, err)
	}
	lock, err := lockStateDir(s.dir)
	if err != nil {
		return fmt.Errorf("the lock on the state directory was lost (the directory was removed or replaced while this node ran): %w", err)
	}
	unlockStateDir(s.lock)
	s.lock = lock
	s.log.Warn().Str("dir", s.dir).Msg("state: the state directory's lock file was removed while this node ran; it was made and locked again")
	return nil
}

func (s *stateStore) write() error {
	data, info, err := crdt.AppendSnapshot(s.buf[:0], s.ix, s.now().UnixMilli())
	if err != nil {
		return err
	}
	if cap(data) <= 64<<20 {
		s.buf = data[:0]
	}
	tmp, err := os.CreateTemp(s.dir, stateTempPrefix+"*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // after a successful rename there is nothing left to remove
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), filepath.Join(s.dir, stateFile)); err != nil {
		return err
	}
	if d, err := os.Open(s.dir); err == nil {
		_ = d.Sync() // make the rename durable; not all filesystems support it
		d.Close()
	}
	s.bytes.Set(float64(info.Bytes))
	s.claims.Set(float64(info.Claims))
	s.log.Debug().Int("claims", info.Claims).Int("bytes", info.Bytes).Msg("state: snapshot written")
	return nil
}

// start writes a snapshot every interval until ctx is done or the
// function it returns is called; that function returns once the loop has
// stopped, so no periodic write runs after it (the final write at
// shutdown comes after it). It may be called more than once.
func (s *stateStore) start(ctx context.Context) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.run(ctx)
	}()
	return func() {
		cancel()
		<-done
	}
}

// run writes a snapshot every interval until ctx is done.
func (s *stateStore) run(ctx context.Context) {
	t := time.NewTicker(s.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			_ = s.save()
		}
	}
}
