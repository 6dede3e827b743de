package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"time"

	"github.com/kvmesh/kvmesh/integration/bench"
	"github.com/kvmesh/kvmesh/integration/sim"
	"github.com/kvmesh/kvmesh/integration/workload"
)

// runFlags are run's flags besides the workload's.
type runFlags struct {
	wl                          workloadFlags
	backends                    int
	cacheBlocks                 int
	capacityRatio               float64
	timeScale                   float64
	maxRunning                  int
	arms                        string
	nodes                       int
	localNodes                  int
	repeats                     int
	retries                     int
	mode                        string
	concurrency                 int
	out                         string
	publish                     string
	title                       string
	keepSamples, explainHolders bool
	evictionOrder               bool
	logLevel                    string
	noProgress                  bool
	notes                       string
	backendURLs                 string
	fronts                      string
	label                       string
	routerConfig                string
	cpuProfile                  string
	blockProfile                string
	mutexProfile                string
	execTrace                   string
	streamInterval              int
}

// defaultStreamInterval is -stream-interval's default: 8 tokens per event
// after the first. At every token, writing, reading and flushing each
// token at the backend, the router and the load generator took half the
// CPU of an 8-node mesh run on Mooncake 3x, all of it in the one process on
// two cores; at 8 the run took 23% less CPU (docs/bench/HISTORY.md, "The
// harness's CPU"). Time to first token is the same.
const defaultStreamInterval = 8

// flagSet says whether the command line set the flag name.
func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

func parseRunFlags(args []string, stderr io.Writer) (*runFlags, error) {
	f := &runFlags{}
	fs := flag.NewFlagSet("kvmesh-bench run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&f.wl.kind, "workload", "mooncake", "workload: "+workloadNames+" (customers: llm-d's 150 customers x 5 users, 6,000-token contexts, growing conversations of 1,200-token queries; agent: 32 coding agents, growing 8k-100k contexts, ~95% of each prompt the previous step's, input:output ~100:1)")
	fs.StringVar(&f.wl.trace, "trace", "", "Mooncake trace (JSONL, optionally gzipped); default: ../shared/traces/mooncake/conversation_trace.jsonl under the repository root, else its gzipped copy in integration/workload/testdata")
	fs.DurationVar(&f.wl.start, "start", 0, "mooncake: skip requests before this trace time")
	fs.DurationVar(&f.wl.duration, "duration", 20*time.Minute, "mooncake: trace time to replay from -start (0 = to the end)")
	fs.IntVar(&f.wl.requests, "requests", 0, "replay at most this many requests (0 = all of the slice; hotprefix, customers, agent: generate this many, default 2048, 3000, 1000)")
	fs.Float64Var(&f.wl.compression, "compression", 2, "mooncake: divide arrival times by this (2 = twice the request rate)")
	fs.BoolVar(&f.wl.spread, "spread", true, "mooncake: spread the requests sharing one of the trace's quantized (~3 s) timestamps evenly over the quantum, instead of sending them in the same microsecond")
	fs.IntVar(&f.wl.maxInput, "max-input-tokens", 0, "cap prompts (truncating; 0 = the backends' context minus the output)")
	fs.IntVar(&f.wl.maxOutput, "max-output-tokens", 0, "cap outputs (0 = as in the workload)")
	fs.Float64Var(&f.wl.rate, "rate", 0, "synthetic workloads: request rate per simulated second (0 = the generator's default: customers 10, agent 4, where it is the agents' mean rate, reached through their think time)")
	fs.Uint64Var(&f.wl.seed, "seed", 1, "workload seed (text, synthetic draws)")
	fs.IntVar(&f.backends, "backends", 8, "simulated backends per fleet")
	fs.IntVar(&f.cacheBlocks, "cache-blocks", 0, "KV blocks per backend (0 = chosen from -capacity-ratio)")
	fs.Float64Var(&f.capacityRatio, "capacity-ratio", 0.25, "with -cache-blocks 0: fleet KV capacity / the workload's working set (below 1: the fleet cannot hold it), capped at 27,000 blocks (an H100) per backend")
	fs.Float64Var(&f.timeScale, "time-scale", 10, "simulated seconds per real second (watch the max engine lag column)")
	fs.IntVar(&f.streamInterval, "stream-interval", defaultStreamInterval, "tokens per streamed event after the first, at the in-process simulated backends (SGLang's --stream-interval; 1 = every token, as vLLM): time to first token is the same, and the process spends less CPU on each answer's stream")
	fs.IntVar(&f.maxRunning, "max-running", sim.DefaultConfig().MaxRunning, "running sequences per backend (vLLM max_num_seqs)")
	fs.StringVar(&f.arms, "arms", "round_robin,least_loaded,consistent_hash,sglang_cache_aware,kvmesh,oracle", "comma-separated arms: policy[:nodes[:mesh|claims|local]], oracle, oracle+scraped (the oracle pricing the router's scraped load instead of the engines' live load), oracle+hold (the oracle with kvmesh's late binding), kvmesh+truth[:nodes[:mesh]] (the kvmesh policy deciding on the engines' true cache contents instead of its claims), kvmesh+truth+load:nodes:mesh (and on the peers' exact bookings instead of the load channel's), kvmesh-precise[:nodes[:mesh]] (precise mode: the backends publish KV events and tokenize), or kvmesh+evict[:nodes[:mesh]] (eviction links: requests keyed by bytes, claims ended by the backends' KV events)")
	fs.IntVar(&f.nodes, "nodes", 0, "add the arm kvmesh:<nodes>:mesh (router nodes sharing claims through the mesh)")
	fs.IntVar(&f.localNodes, "local-nodes", 0, "add the arm kvmesh:<local-nodes>:local (nodes with independent claims)")
	fs.IntVar(&f.repeats, "repeats", 3, "runs per arm (arm order rotates between repeats)")
	fs.IntVar(&f.retries, "retries", bench.DefaultConfig().Retries, "how often a run during which the machine fell behind (not trusted) is run again before it is kept, marked; 0 keeps every run")
	fs.StringVar(&f.mode, "mode", "open", "open (arrivals at the workload's times) or closed (-concurrency clients)")
	fs.IntVar(&f.concurrency, "concurrency", 2048, "closed loop: clients; open loop: most requests in flight")
	fs.StringVar(&f.out, "out", "", "write README.md, results.json and the SVG charts into this directory")
	fs.StringVar(&f.publish, "publish", "", "write the results into docs/bench/<name>/ of the repository (overrides -out)")
	fs.StringVar(&f.title, "title", "", "title of the results")
	fs.StringVar(&f.notes, "notes", "", "a note printed with the setup")
	fs.StringVar(&f.backendURLs, "backend-urls", "", "use running kvmesh-sim processes (comma-separated base URLs) instead of in-process fleets; each run restarts them (empty caches) and reads their /metrics; -cache-blocks must say their size")
	fs.StringVar(&f.fronts, "fronts", "", "with -backend-urls and -repeats 1: send requests to these running router nodes (comma-separated, spread at random) instead of deploying arms")
	fs.StringVar(&f.label, "label", "external", "with -fronts: the arm name for the runs")
	fs.StringVar(&f.routerConfig, "router-config", "", "YAML file of router settings for every arm (the `router:` section of kvmesh serve's config, e.g. kvmesh: {cache_weight: 0}); backends and policy are the bench's")
	fs.BoolVar(&f.keepSamples, "keep-samples", false, "store every request's sample in results.json")
	fs.BoolVar(&f.evictionOrder, "eviction-order", bench.DefaultConfig().EvictionOrder, "kvmesh+evict arms keep the router's copy of each engine's LRU queue and doubt by it (precise.eviction_order, the router's default; -eviction-order=false turns it off)")
	fs.BoolVar(&f.explainHolders, "explain-holders", false, "with -keep-samples: before each request, ask the router what it thinks of the backend holding the most of the prompt (sample field holder); costs a routing decision per request, so latencies are not comparable")
	fs.StringVar(&f.logLevel, "log-level", "warn", "log level: debug, info, warn, error, disabled")
	fs.BoolVar(&f.noProgress, "no-progress", false, "no progress bar")
	fs.StringVar(&f.cpuProfile, "cpuprofile", "", "write a CPU profile of the whole run (routers, simulated backends and load generator share the process) to this file, for `go tool pprof`")
	fs.StringVar(&f.blockProfile, "blockprofile", "", "write a profile of where the run's goroutines waited (channels, locks, selects; one event per 100 µs blocked) to this file when the run stops, for `go tool pprof`")
	fs.StringVar(&f.execTrace, "exectrace", "", "write an execution trace of the whole run to this file (large: keep the run short); `go tool trace -pprof=sched` makes of it a profile of the time goroutines waited for a CPU")
	fs.StringVar(&f.mutexProfile, "mutexprofile", "", "write a profile of lock contention (which holders made others wait; 1 event in 10) to this file when the run stops, for `go tool pprof`")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	switch {
	case f.backends < 1:
		return nil, fmt.Errorf("-backends must be at least 1")
	case !(f.timeScale > 0):
		return nil, fmt.Errorf("-time-scale must be positive")
	case f.cacheBlocks == 0 && !(f.capacityRatio > 0):
		return nil, fmt.Errorf("-capacity-ratio must be positive")
	case f.backendURLs != "" && f.cacheBlocks == 0:
		return nil, fmt.Errorf("-backend-urls needs -cache-blocks (the processes' -cache-blocks)")
	case f.fronts != "" && f.backendURLs == "":
		return nil, fmt.Errorf("-fronts needs -backend-urls (where the hits are counted)")
	case f.fronts != "" && f.repeats > 1:
		return nil, fmt.Errorf("-fronts needs -repeats 1: the running routers would keep one repeat's claims into the next while the backends restart empty (restart the routers between runs instead)")
	case f.streamInterval < 1:
		return nil, fmt.Errorf("-stream-interval must be at least 1")
	case f.backendURLs != "" && flagSet(fs, "stream-interval"):
		return nil, fmt.Errorf("-stream-interval sets the in-process backends; with -backend-urls start the kvmesh-sim processes with -stream-interval instead")
	case f.retries < 0:
		return nil, fmt.Errorf("-retries must be at least 0")
	case f.explainHolders && !f.keepSamples:
		return nil, fmt.Errorf("-explain-holders needs -keep-samples (the view is stored in each sample)")
	}
	return f, nil
}

func runCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f, err := parseRunFlags(args, stderr)
	if err != nil {
		return err
	}
	log, err := newLogger(f.logLevel, stderr)
	if err != nil {
		return err
	}
	simCfg := sim.DefaultConfig()
	simCfg.TimeScale = f.timeScale
	simCfg.MaxRunning = f.maxRunning
	simCfg.StreamInterval = f.streamInterval
	if f.wl.maxInput == 0 && f.wl.kind == "mooncake" {
		// Leave room for the trace's longest output (2,000 tokens).
		f.wl.maxInput = simCfg.MaxModelLen - 2048
	}

	t0 := time.Now()
	w, err := f.wl.build()
	if err != nil {
		return err
	}
	if len(w.Requests) == 0 {
		return fmt.Errorf("the workload slice is empty")
	}
	info := bench.DescribeWorkload(w, simCfg.BlockSize, 0)
	simCfg.CacheBlocks = f.cacheBlocks
	if simCfg.CacheBlocks == 0 {
		simCfg.CacheBlocks = autoCacheBlocks(info.WorkingSetBlocks, f.backends, f.capacityRatio, w, simCfg.BlockSize)
	}
	info.FleetBlocks = simCfg.CacheBlocks * f.backends
	info.CapacityRatio = float64(info.FleetBlocks) / float64(max(info.WorkingSetBlocks, 1))
	fmt.Fprintf(stderr, "workload %s: %d requests, %d prompt tokens, span %.0f s simulated (%.0f s wall at time scale %g), loaded in %v\n",
		w.Name, len(w.Requests), w.PromptTokens, w.Span.Seconds(), w.Span.Seconds()/f.timeScale, f.timeScale, time.Since(t0).Round(time.Millisecond))
	fmt.Fprintf(stderr, "infinite-cache bound %.1f%% (16-token blocks)", 100*info.Bound)
	if info.TraceBound > 0 {
		fmt.Fprintf(stderr, ", %.1f%% at the trace's 512-token blocks", 100*info.TraceBound)
	}
	fmt.Fprintf(stderr, "; working set %d blocks, fleet %d x %d = %d blocks, capacity ratio %.3f\n",
		info.WorkingSetBlocks, f.backends, simCfg.CacheBlocks, info.FleetBlocks, info.CapacityRatio)
	if info.CapacityRatio >= 1 {
		fmt.Fprintln(stderr, "warning: the fleet can hold the whole working set; routing barely matters for hit rates")
	}

	cfg := bench.DefaultConfig()
	cfg.Fleet = bench.SimFleet(f.backends, simCfg)
	cfg.PreciseFleet = bench.PreciseSimFleet(f.backends, simCfg)
	if urls := splitList(f.backendURLs); len(urls) > 0 {
		cfg.Fleet = bench.ExternalFleet(urls)
		cfg.PreciseFleet = nil // running processes: their events are not wired here
		if len(urls) != f.backends {
			return fmt.Errorf("-backends %d does not match the %d -backend-urls", f.backends, len(urls))
		}
	}
	cfg.Models = simCfg.Models
	if f.routerConfig != "" {
		if cfg.Router, err = loadRouterConfig(f.routerConfig, cfg.Router); err != nil {
			return err
		}
	}
	cfg.TimeScale = f.timeScale
	cfg.Repeats = f.repeats
	cfg.Retries = f.retries
	cfg.Replay.Mode = bench.Mode(f.mode)
	cfg.Replay.Concurrency = f.concurrency
	cfg.KeepSamples = f.keepSamples
	cfg.EvictionOrder = f.evictionOrder
	cfg.ExplainHolders = f.explainHolders
	cfg.Logger = log
	armList := f.arms
	if f.nodes > 0 {
		armList += fmt.Sprintf(",kvmesh:%d:mesh", f.nodes)
	}
	if f.localNodes > 0 {
		armList += fmt.Sprintf(",kvmesh:%d:local", f.localNodes)
	}
	if cfg.Arms, err = bench.ParseArms(armList); err != nil {
		return err
	}
	if cfg.Fronts = splitList(f.fronts); len(cfg.Fronts) > 0 {
		cfg.Arms = []bench.Arm{{Name: f.label, Policy: "external", Nodes: len(cfg.Fronts)}}
	}
	if !f.noProgress {
		cfg.Progress = bench.NewProgress(stderr)
	}

	stopProfile, err := startProfiles(profilePaths{cpu: f.cpuProfile, block: f.blockProfile, mutex: f.mutexProfile, exec: f.execTrace})
	if err != nil {
		return err
	}
	rep, err := bench.Run(ctx, cfg, w)
	if perr := stopProfile(); err == nil {
		err = perr
	}
	if err != nil {
		return err
	}
	rep.Title = f.title
	if rep.Title == "" {
		rep.Title = "kvmesh benchmark: " + w.Name
	}
	rep.Command = commandLine("run", args)
	rep.Revision = revision()
	rep.Workload = info
	rep.Setup = bench.Setup{
		Backends: f.backends, CacheBlocks: simCfg.CacheBlocks, BlockTokens: simCfg.BlockSize, TimeScale: f.timeScale,
		Mode: cfg.Replay.Mode, Concurrency: cfg.Replay.Concurrency, Repeats: f.repeats,
		ScaleRouterTimes: cfg.ScaleRouterTimes,
		Notes:            fmt.Sprintf("%s Machine: %d CPUs, %s.", f.notes, runtime.NumCPU(), runtime.Version()),
	}
	if f.backendURLs == "" { // running processes stream as they were started
		rep.Setup.StreamInterval = f.streamInterval
	}
	if err := bench.WriteMarkdown(stdout, rep); err != nil {
		return err
	}
	if floors := bench.CheckFloors(rep); len(floors) > 0 {
		fmt.Fprintln(stderr, bench.FloorsSummary(floors))
	}
	for _, c := range trustCaveats(rep, cfg.MaxLag) {
		fmt.Fprintln(stderr, c)
	}
	out := f.out
	if f.publish != "" {
		out = filepath.Join(repoRoot(), "docs", "bench", f.publish)
	}
	if out != "" {
		if err := rep.WriteDir(out); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "results written to %s\n", out)
	}
	return nil
}

// trustCaveats lists, for the terminal, the runs kept although the machine
// fell behind during them (their figures are in the report, marked "NO" in
// the trusted column) and the runs that were run again for it. None when
// every run was trusted at the first attempt.
func trustCaveats(rep *bench.Report, maxLag time.Duration) []string {
	var out []string
	for i := range rep.Runs {
		if r := &rep.Runs[i]; r.Invalid != "" {
			out = append(out, fmt.Sprintf("caveat: %s repeat %d is NOT TRUSTED: %s (more than %v behind); its figures count in the medians",
				r.Arm, r.Repeat+1, r.Invalid, maxLag))
		}
	}
	for i := range rep.Discarded {
		r := &rep.Discarded[i]
		out = append(out, fmt.Sprintf("note: %s repeat %d was run again (%s); the discarded attempt is listed apart, not counted", r.Arm, r.Repeat+1, r.Invalid))
	}
	if len(out) > 0 {
		out = append(out, "(the machine was too busy for the time scale during those runs: a lower -time-scale, or an idle machine, makes them trustworthy)")
	}
	return out
}

// autoCacheBlocks sizes each backend's KV cache so that the fleet holds
// ratio times the working set, at most an H100's worth (the simulator's
// default, 27,000 blocks: real fleets are that small next to real traffic),
// and never less than what the longest request needs twice over (the sim
// refuses a request that cannot fit).
func autoCacheBlocks(workingSet, backends int, ratio float64, w *workload.Workload, blockTokens int) int {
	longest := (w.MaxPromptTokens + maxOutputOf(w) + blockTokens - 1) / blockTokens
	want := min(int(ratio*float64(workingSet)/float64(backends)), sim.DefaultConfig().CacheBlocks)
	return max(want, 2*longest, 64)
}

// splitList splits a comma-separated flag value, dropping empty items.
func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// revision is the VCS revision the binary was built from ("+dirty" when the
// tree had uncommitted changes), "" when unknown.
func revision() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	var rev, dirty string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "+dirty"
			}
		}
	}
	if rev == "" {
		return checkoutRevision(repoRoot())
	}
	return rev + dirty
}

// checkoutRevision is the git revision of the checkout at dir, with
// "+dirty" when it has uncommitted changes to tracked files outside docs/:
// what `go run` measures when the build carries no VCS stamp
// (GOFLAGS=-buildvcs=false, or a build outside git). Changes under docs/
// do not count: publishing one benchmark rewrites docs/bench, and the next
// one in the same checkout measures the same code. "" when dir is not a
// git checkout or git is not installed.
func checkoutRevision(dir string) string {
	if dir == "" {
		return ""
	}
	out, err := exec.Command("git", "-C", dir, "rev-parse", "HEAD").Output()
	if err != nil {
		return ""
	}
	rev := strings.TrimSpace(string(out))
	if st, err := exec.Command("git", "-C", dir, "status", "--porcelain", "--untracked-files=no", "--", ".", ":(exclude)docs").Output(); err == nil && len(bytes.TrimSpace(st)) > 0 {
		rev += "+dirty"
	}
	return rev
}
