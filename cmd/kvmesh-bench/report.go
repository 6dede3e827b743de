package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/kvmesh/kvmesh/integration/bench"
)

// reportCmd re-renders a results directory (README.md and charts) from its
// results.json (or rawproxy.json), e.g. after the writers changed. The
// figures are read, never recomputed from anything else.
func reportCmd(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("kvmesh-bench report", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("dir", "", "results directory holding results.json or rawproxy.json")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *dir == "" {
		return fmt.Errorf("-dir is required")
	}
	if err := rerender[bench.Report](*dir, bench.JSONFile, stdout); err != nil {
		return err
	}
	if err := rerender[bench.RawProxyReport](*dir, bench.RawProxyJSON, stdout); err != nil {
		return err
	}
	return nil
}

// rerender reads dir/file as a report of type R, if the file exists, and
// writes the directory's README and charts from it again.
func rerender[R any, P interface {
	*R
	WriteDir(string) error
}](dir, file string, stdout io.Writer) error {
	b, err := os.ReadFile(filepath.Join(dir, file))
	if err != nil {
		return nil // not this kind of results directory
	}
	var r R
	if err := json.Unmarshal(b, &r); err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	if err := P(&r).WriteDir(dir); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "re-rendered %s from %s\n", dir, file)
	return nil
}
