//go:build unix

package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// stateLockFile is the lock a process holds on its --state-dir while it
// runs: two processes given one directory (a copied manifest, a second
// node started by hand next to a running one) would each overwrite the
// other's snapshot every interval, and whichever wrote last would decide
// the claims both restart with.
const stateLockFile = "LOCK"

// lockStateDir takes an exclusive advisory lock (flock) on dir's lock
// file, writing this process's id into it so that the error a second
// process gets names the holder. The kernel drops the lock when the
// process dies, so a crash never leaves the directory locked; the file
// itself stays.
func lockStateDir(dir string) (*os.File, error) {
	path := filepath.Join(dir, stateLockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("state directory %s: lock file: %w", dir, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		holder := readLockHolder(f)
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("state directory %s is in use by another kvmesh process%s: give each node its own --state-dir", dir, holder)
		}
		return nil, fmt.Errorf("state directory %s: lock %s: %w", dir, path, err)
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return f, nil
}

// readLockHolder is " (pid N)" as the holder wrote it, or "" when the
// file says nothing readable.
func readLockHolder(f *os.File) string {
	buf := make([]byte, 16)
	n, _ := f.ReadAt(buf, 0)
	pid, err := strconv.Atoi(strings.TrimSpace(string(buf[:n])))
	if err != nil || pid <= 0 {
		return ""
	}
	return fmt.Sprintf(" (pid %d)", pid)
}

// lockStillHeld reports whether f, the lock taken on dir, is still the
// file at dir's lock path: a directory deleted or replaced while the
// process runs leaves the process holding a lock on a file no other
// process can find, and a second process could lock the new one.
func lockStillHeld(dir string, f *os.File) bool {
	if f == nil {
		return true
	}
	held, err := f.Stat()
	if err != nil {
		return false
	}
	there, err := os.Stat(filepath.Join(dir, stateLockFile))
	return err == nil && os.SameFile(held, there)
}

// unlockStateDir releases the lock (closing the file drops it).
func unlockStateDir(f *os.File) {
	if f != nil {
		f.Close()
	}
}
