// Command kvmesh-sim runs one simulated vLLM-like backend (package
// integration/sim) on an HTTP address: the OpenAI API, vLLM's /metrics and
// ORCA headers, plus /sim/fault and /sim/match for experiments.
//
//	kvmesh-sim -listen 127.0.0.1:8001 -cache-blocks 4000 -time-scale 60
//
// It shuts down gracefully on SIGINT or SIGTERM: it stops accepting, lets
// in-flight requests finish for -shutdown-grace, then fails the rest.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/kvmesh/kvmesh/integration/sim"
)

func main() {
	if err := run(os.Args[1:], os.Stderr); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "kvmesh-sim:", err)
		}
		os.Exit(2)
	}
}

// options are the flags that are not sim.Config fields.
type options struct {
	listen   string
	models   string
	logLevel string
	console  bool
	grace    time.Duration
}

// parseFlags fills a sim.Config (starting from sim.DefaultConfig) and the
// process options from args.
func parseFlags(args []string, out io.Writer) (sim.Config, options, error) {
	cfg := sim.DefaultConfig()
	opt := options{listen: "127.0.0.1:8000", models: strings.Join(cfg.Models, ","), logLevel: "info", grace: 10 * time.Second}
	fs := flag.NewFlagSet("kvmesh-sim", flag.ContinueOnError)
	fs.SetOutput(out)

	fs.StringVar(&opt.listen, "listen", opt.listen, "HTTP listen address")
	fs.StringVar(&cfg.Name, "name", cfg.Name, "instance name (logs, response ids)")
	fs.StringVar(&opt.models, "models", opt.models, "comma-separated served model names; the first labels the metrics")
	fs.IntVar(&cfg.CacheBlocks, "cache-blocks", cfg.CacheBlocks, "KV cache capacity in blocks")
	fs.IntVar(&cfg.BlockSize, "block-size", cfg.BlockSize, "tokens per KV block")
	fs.IntVar(&cfg.MaxRunning, "max-running", cfg.MaxRunning, "maximum running sequences (vLLM max_num_seqs)")
	fs.IntVar(&cfg.MaxBatchedTokens, "max-batched-tokens", cfg.MaxBatchedTokens, "token budget per engine step (vLLM max_num_batched_tokens)")
	fs.IntVar(&cfg.MaxModelLen, "max-model-len", cfg.MaxModelLen, "maximum prompt + output tokens per request")
	fs.IntVar(&cfg.DefaultMaxTokens, "default-max-tokens", cfg.DefaultMaxTokens, "output tokens when a request sets no max_tokens")
	fs.IntVar(&cfg.MaxOutputTokens, "max-output-tokens", cfg.MaxOutputTokens, "cap on output tokens per request (0 = none)")
	fs.Float64Var(&cfg.TimeScale, "time-scale", cfg.TimeScale, "simulated seconds per real second (60 = an hour in a minute)")
	fs.DurationVar(&cfg.Timing.StepOverhead, "step-overhead", cfg.Timing.StepOverhead, "simulated fixed cost of an engine step")
	fs.DurationVar(&cfg.Timing.PrefillPerToken, "prefill-per-token", cfg.Timing.PrefillPerToken, "simulated cost of one uncached prompt token")
	fs.DurationVar(&cfg.Timing.DecodePerSeq, "decode-per-seq", cfg.Timing.DecodePerSeq, "simulated cost of one decoding sequence per step")
	fs.IntVar(&cfg.StreamInterval, "stream-interval", cfg.StreamInterval, "tokens per streamed event after the first (SGLang's --stream-interval; 1 = every token, as vLLM)")
	fs.BoolVar(&cfg.ORCAOnStreaming, "orca-streaming", cfg.ORCAOnStreaming, "also send endpoint-load-metrics on streaming replies")
	fs.Float64Var(&cfg.Faults.ErrorRate, "error-rate", cfg.Faults.ErrorRate, "probability of an injected HTTP 500")
	fs.Float64Var(&cfg.Faults.SpikeRate, "spike-rate", cfg.Faults.SpikeRate, "probability of an injected latency spike")
	fs.DurationVar(&cfg.Faults.SpikeDelay, "spike-delay", cfg.Faults.SpikeDelay, "simulated extra latency of a spike")
	fs.DurationVar(&cfg.Faults.RestartDowntime, "restart-downtime", cfg.Faults.RestartDowntime, "simulated downtime of a restart (POST /sim/fault {\"restart\":true})")
	fs.Uint64Var(&cfg.Seed, "seed", cfg.Seed, "fault injection seed")
	fs.StringVar(&cfg.KVEvents.Endpoint, "kv-events-endpoint", "", "publish KV-cache events (vLLM's ZMQ format) on this endpoint, e.g. tcp://127.0.0.1:5557")
	fs.StringVar(&cfg.KVEvents.ReplayEndpoint, "kv-events-replay-endpoint", "", "answer KV-event replay requests on this endpoint, e.g. tcp://127.0.0.1:5558")
	fs.StringVar(&cfg.KVEvents.Topic, "kv-events-topic", "", "KV-event topic (first frame of every message)")
	fs.BoolVar(&cfg.KVEvents.Map, "kv-events-map", false, "encode KV events as maps with a \"type\" key (vLLM since mid-2026) instead of positional arrays")
	fs.StringVar(&opt.logLevel, "log-level", opt.logLevel, "log level: debug, info, warn, error")
	fs.BoolVar(&opt.console, "log-console", false, "human-readable logs instead of JSON")
	fs.DurationVar(&opt.grace, "shutdown-grace", opt.grace, "how long in-flight requests may finish after SIGINT/SIGTERM")
	if err := fs.Parse(args); err != nil {
		return cfg, opt, err
	}
	if fs.NArg() > 0 {
		return cfg, opt, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	cfg.Models = nil
	for _, m := range strings.Split(opt.models, ",") {
		if m = strings.TrimSpace(m); m != "" {
			cfg.Models = append(cfg.Models, m)
		}
	}
	if opt.grace < 0 {
		return cfg, opt, fmt.Errorf("-shutdown-grace must be >= 0, got %v", opt.grace)
	}
	return cfg, opt, cfg.Validate()
}

func newLogger(opt options, w io.Writer) (zerolog.Logger, error) {
	lvl, err := zerolog.ParseLevel(opt.logLevel)
	if err != nil || lvl == zerolog.NoLevel {
		return zerolog.Nop(), fmt.Errorf("bad -log-level %q (want debug, info, warn or error)", opt.logLevel)
	}
	if opt.console {
		w = zerolog.ConsoleWriter{Out: w, TimeFormat: time.RFC3339}
	}
	return zerolog.New(w).Level(lvl).With().Timestamp().Logger(), nil
}

func run(args []string, stderr io.Writer) error {
	cfg, opt, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	log, err := newLogger(opt, stderr)
	if err != nil {
		return err
	}
	cfg.Logger = log

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	return serve(ctx, cfg, opt, nil)
}

// serve runs the instance until ctx ends. If ready is not nil it receives the
// bound address once the listener is up.
func serve(ctx context.Context, cfg sim.Config, opt options, ready chan<- string) error {
	log := cfg.Logger
	// The port first: a taken one fails before the instance logs that it
	// started.
	ln, err := net.Listen("tcp", opt.listen)
	if err != nil {
		return err
	}
	in, err := sim.New(cfg)
	if err != nil {
		ln.Close()
		return err
	}
	srv := &http.Server{Handler: in, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	log.Info().Str("listen", ln.Addr().String()).Strs("models", cfg.Models).Int("cache_blocks", cfg.CacheBlocks).
		Float64("time_scale", cfg.TimeScale).Msg("kvmesh-sim serving")
	if ready != nil {
		ready <- ln.Addr().String()
	}

	select {
	case err := <-errc:
		in.Close()
		return fmt.Errorf("serving: %w", err)
	case <-ctx.Done():
	}
	log.Info().Stringer("grace", opt.grace).Msg("shutting down: draining in-flight requests")
	sctx, cancel := context.WithTimeout(context.Background(), opt.grace)
	defer cancel()
	shutErr := srv.Shutdown(sctx)
	in.Close() // fails whatever is still running; their handlers answer at once
	if shutErr != nil {
		log.Warn().Err(shutErr).Msg("grace period over; closing remaining connections")
		srv.Close()
	}
	log.Info().Msg("kvmesh-sim stopped")
	return nil
}
