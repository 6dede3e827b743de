package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// mountFullTmpfs mounts a 256 KiB tmpfs on a fresh directory and fills it,
// so that files can still be created there (tmpfs has inodes to spare) but
// not written. It skips where mounting is not permitted (not root).
func mountFullTmpfs(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=256k,mode=0700"); err != nil {
		t.Skipf("cannot mount a tmpfs to fill (%v): needs root", err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	f, err := os.Create(filepath.Join(dir, "filler"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 4096)
	for {
		if _, err := f.Write(chunk); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("filling the tmpfs: %v", err)
			}
			return dir
		}
	}
}

// A state directory on a full disk fails the start with an error that says
// so. Creating an empty file works there, so the probe must write: before
// it did, the node started and every snapshot failed, minutes later.
func TestStateStoreRefusesAFullDisk(t *testing.T) {
	dir := mountFullTmpfs(t)
	if f, err := os.CreateTemp(dir, "empty-*"); err != nil {
		t.Fatalf("an empty file on the full tmpfs: %v (the test's premise)", err)
	} else {
		f.Close()
		os.Remove(f.Name())
	}
	_, err := newStateStore(dir, time.Minute, time.Hour, stateIndex(t), zerolog.Nop(), nil)
	if err == nil {
		t.Fatal("a state directory on a full disk was accepted")
	}
	if msg := err.Error(); !strings.Contains(msg, "cannot hold a snapshot") || !strings.Contains(msg, "no space left") {
		t.Fatalf("error does not say the disk is full: %v", err)
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), stateTempPrefix) {
			t.Errorf("the probe's temporary file %s was left behind", e.Name())
		}
	}

	// Room made, the same directory is taken.
	if err := os.Remove(filepath.Join(dir, "filler")); err != nil {
		t.Fatal(err)
	}
	s, err := newStateStore(dir, time.Minute, time.Hour, stateIndex(t), zerolog.Nop(), nil)
	if err != nil {
		t.Fatalf("with room again: %v", err)
	}
	s.close()
}
