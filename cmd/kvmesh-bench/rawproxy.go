package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/kvmesh/kvmesh/integration/bench"
)

// rawProxyCmd compares kvmesh, nginx and Caddy as plain reverse proxies.
func rawProxyCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg := bench.DefaultRawProxyConfig()
	fs := flag.NewFlagSet("kvmesh-bench rawproxy", flag.ContinueOnError)
	fs.SetOutput(stderr)
	proxies := fs.String("proxies", strings.Join(cfg.Proxies, ","), "proxies to compare: direct, kvmesh, nginx, caddy")
	fs.IntVar(&cfg.Backends, "backends", cfg.Backends, "trivial backends behind every proxy")
	fs.StringVar(&cfg.KVMeshPolicy, "kvmesh-policy", cfg.KVMeshPolicy, "kvmesh's policy (round_robin measures the proxy path alone; kvmesh adds the cache-aware choice)")
	fs.IntVar(&cfg.Concurrency, "concurrency", cfg.Concurrency, "closed-loop clients")
	fs.DurationVar(&cfg.Duration, "duration", cfg.Duration, "measured time per proxy per repeat")
	fs.DurationVar(&cfg.Warmup, "warmup", cfg.Warmup, "discarded warm-up per proxy per repeat")
	fs.IntVar(&cfg.Repeats, "repeats", cfg.Repeats, "repeats (proxy order rotates)")
	fs.IntVar(&cfg.PromptWords, "prompt-words", cfg.PromptWords, "prompt length of the request body, in words")
	inProcess := fs.Bool("in-process", false, "run kvmesh inside the load generator's process instead of as its own process")
	out := fs.String("out", "", "write rawproxy.md, rawproxy.json and charts into this directory")
	publish := fs.String("publish", "", "write the results into docs/bench/<name>/ (overrides -out)")
	noProgress := fs.Bool("no-progress", false, "no progress bar")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg.Proxies = nil
	for _, p := range strings.Split(*proxies, ",") {
		if p = strings.TrimSpace(p); p != "" {
			cfg.Proxies = append(cfg.Proxies, p)
		}
	}
	if !*inProcess {
		self, err := os.Executable()
		if err != nil {
			return err
		}
		cfg.RouterCommand = func(listen string, backends []string, policy string) (string, []string) {
			return self, []string{"router", "-listen", listen, "-backends", strings.Join(backends, ","), "-policy", policy, "-log-level", "warn"}
		}
	}
	if !*noProgress {
		cfg.Progress = bench.NewProgress(stderr)
	}
	t0 := time.Now()
	rep, err := bench.RunRawProxy(ctx, cfg)
	if err != nil {
		return err
	}
	rep.Command = commandLine("rawproxy", args)
	for name, why := range rep.Skipped {
		fmt.Fprintf(stderr, "skipped %s: %s\n", name, why)
	}
	if err := rep.WriteMarkdown(stdout); err != nil {
		return err
	}
	dir := *out
	if *publish != "" {
		dir = filepath.Join(repoRoot(), "docs", "bench", *publish)
	}
	if dir != "" {
		if err := rep.WriteDir(dir); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "results written to %s\n", dir)
	}
	fmt.Fprintf(stderr, "raw-proxy comparison took %v\n", time.Since(t0).Round(time.Second))
	return nil
}
