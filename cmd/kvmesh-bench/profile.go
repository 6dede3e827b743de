package main

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
)

// profilePaths says where a run's profiles go ("": not taken). Where a
// run's time goes on a shared machine (eight router nodes in one process
// against one) is a question for a profile, not for guesses: the CPU
// profile says what runs, the block and mutex profiles what waits (a lock
// taken on a node's request path shows there, never in the CPU profile).
// The execution trace says when each goroutine waited for a CPU: `go tool
// trace -pprof=sched` turns it into a profile of that wait by stack, which
// is what the time outside the engines is made of on a busy machine.
type profilePaths struct {
	cpu, block, mutex, exec string
}

// blockProfileRate is the -blockprofile sampling rate: one event per
// 100 µs spent blocked, on average. Waits that matter to a request's TTFT
// are milliseconds; sampling every event would slow the run it measures.
const blockProfileRate = 100_000

// mutexProfileFraction is -mutexprofile's: one contention event in 10.
const mutexProfileFraction = 10

// startProfiles starts the profiles p names and returns what stops them
// and writes them. The block and mutex profiles are written when the run
// stops; a path that cannot be created fails the start, so a long run is
// not wasted on a profile that cannot be kept.
func startProfiles(p profilePaths) (stop func() error, err error) {
	var files []*os.File
	closeAll := func() {
		for _, f := range files {
			f.Close()
		}
	}
	open := func(flag, path string) (*os.File, error) {
		if path == "" {
			return nil, nil
		}
		f, err := os.Create(path)
		if err != nil {
			closeAll()
			return nil, fmt.Errorf("-%s: %w", flag, err)
		}
		files = append(files, f)
		return f, nil
	}
	cpu, err := open("cpuprofile", p.cpu)
	if err != nil {
		return nil, err
	}
	block, err := open("blockprofile", p.block)
	if err != nil {
		return nil, err
	}
	mutex, err := open("mutexprofile", p.mutex)
	if err != nil {
		return nil, err
	}
	exec, err := open("exectrace", p.exec)
	if err != nil {
		return nil, err
	}
	if cpu != nil {
		if err := pprof.StartCPUProfile(cpu); err != nil {
			closeAll()
			return nil, fmt.Errorf("-cpuprofile: %w", err)
		}
	}
	if exec != nil {
		if err := trace.Start(exec); err != nil {
			if cpu != nil {
				pprof.StopCPUProfile()
			}
			closeAll()
			return nil, fmt.Errorf("-exectrace: %w", err)
		}
	}
	if block != nil {
		runtime.SetBlockProfileRate(blockProfileRate)
	}
	if mutex != nil {
		runtime.SetMutexProfileFraction(mutexProfileFraction)
	}
	return func() error {
		var errs []error
		if cpu != nil {
			pprof.StopCPUProfile()
		}
		if exec != nil {
			trace.Stop()
		}
		write := func(flag, name string, f *os.File) {
			if f == nil {
				return
			}
			if err := pprof.Lookup(name).WriteTo(f, 0); err != nil {
				errs = append(errs, fmt.Errorf("-%s: %w", flag, err))
			}
		}
		write("blockprofile", "block", block)
		write("mutexprofile", "mutex", mutex)
		if block != nil {
			runtime.SetBlockProfileRate(0)
		}
		if mutex != nil {
			runtime.SetMutexProfileFraction(0)
		}
		for _, f := range files {
			if err := f.Close(); err != nil {
				errs = append(errs, fmt.Errorf("profile %s: %w", f.Name(), err))
			}
		}
		return errors.Join(errs...)
	}, nil
}
