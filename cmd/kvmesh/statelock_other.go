//go:build !unix

package main

import "os"

// lockStateDir does nothing where flock is not available: two processes
// sharing a --state-dir are not detected there.
func lockStateDir(dir string) (*os.File, error) { return nil, nil }

func unlockStateDir(f *os.File) {}

func lockStillHeld(dir string, f *os.File) bool { return true }
