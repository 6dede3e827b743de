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
	if b, err := os.ReadFile(filepath.Join(*dir, bench.JSONFile)); err == nil {
		var r bench.Report
		if err := json.Unmarshal(b, &r); err != nil {
			return fmt.Errorf("%s: %w", bench.JSONFile, err)
		}
		if err := r.WriteDir(*dir); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "re-rendered %s from %s\n", *dir, bench.JSONFile)
	}
	if b, err := os.ReadFile(filepath.Join(*dir, bench.RawProxyJSON)); err == nil {
		var r bench.RawProxyReport
		if err := json.Unmarshal(b, &r); err != nil {
			return fmt.Errorf("%s: %w", bench.RawProxyJSON, err)
		}
		if err := r.WriteDir(*dir); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "re-rendered %s from %s\n", *dir, bench.RawProxyJSON)
	}
	return nil
}
