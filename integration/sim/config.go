package sim

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/rs/zerolog"
)

// Config describes one simulated backend. Start from DefaultConfig and change
// what the experiment needs; New rejects a Config that fails Validate.
//
// Every duration in Timing and Faults is in simulated time: the real duration
// is the simulated one divided by TimeScale.
type Config struct {
	// Name identifies the instance in logs, response ids and Stats. Default
	// "sim"; StartFleet appends "-<index>" so every instance is distinct.
	Name string

	// Models are the served model names (/v1/models). Requests naming any
	// other model get 404; a request without "model" uses Models[0]. Each name
	// seeds its own block hashes (like LoRA adapters sharing one engine), so
	// two names never share cache blocks. Metrics are labelled with Models[0],
	// as vLLM labels everything with its first served name. Default
	// "kvmesh-sim", the name integration/workload puts in request bodies by
	// default, so the two work together unconfigured.
	Models []string

	// BlockSize is the number of tokens per KV block. Default 16: vLLM's
	// default, and the granularity every router in the field notes assumes.
	BlockSize int

	// CacheBlocks is the KV capacity in blocks, shared by running sequences
	// and the prefix cache. Default 27,000: an H100 80 GB at vLLM's 0.9 memory
	// utilisation leaves ~55 GB for KV after Llama-3.1-8B's 16 GB of weights;
	// at 128 KiB per token (32 layers x 8 KV heads x 128 dims x 2 (K,V) x
	// 2 bytes) that is ~430k tokens. Benchmarks set it much lower so a fleet
	// cannot hold the whole working set.
	CacheBlocks int

	// MaxRunning caps concurrently running sequences (vLLM max_num_seqs).
	// Default 256: vLLM's long-standing default; at 256 the decode step takes
	// ~25 ms with the default Timing, the top of the range an 8B model on one
	// H100 shows.
	MaxRunning int

	// MaxBatchedTokens is the token budget of one engine step (vLLM
	// max_num_batched_tokens): decode tokens plus prefill chunks. Default
	// 8192: vLLM V1's default for the OpenAI server on 80 GB-class GPUs.
	MaxBatchedTokens int

	// MaxModelLen bounds prompt + output tokens of one request; longer
	// requests get 400 like vLLM. Default 131,072: Llama-3.1's context.
	MaxModelLen int

	// DefaultMaxTokens is the output length when a request names neither
	// max_tokens nor max_completion_tokens. vLLM would generate up to the
	// context limit; a simulator without EOS needs a finite default. Default
	// 256: long enough to look like a chat answer, short enough that a
	// forgotten max_tokens does not dominate a benchmark.
	DefaultMaxTokens int

	// MaxOutputTokens caps every request's output (0 = no cap). Default 0:
	// benchmarks replay trace output lengths and need them honoured exactly.
	MaxOutputTokens int

	// Timing is the engine step cost model (simulated time).
	Timing Timing

	// TimeScale is simulated seconds per real second: 1 runs in real time, 60
	// plays an hour in a minute. Default 1 so a lone kvmesh-sim behaves like a
	// real server; tests use 1000+.
	TimeScale float64

	// SleepGranularity is the smallest real sleep the engine takes. The
	// engine runs steps ahead of the wall clock and sleeps only once it is
	// this far ahead, so high TimeScales cost one timer per batch of steps
	// rather than one per token. Default 1 ms: below the Linux timer slack that
	// matters, and tokens reach clients at most this early.
	SleepGranularity time.Duration

	// StreamInterval is how many sampled tokens a streaming reply gathers
	// per event after its first token, which goes out at once (SGLang's
	// --stream-interval; vLLM streams every step). The last event carries
	// whatever is left. Default 1 (0 means the same): an event per token,
	// as a client of vLLM sees. A benchmark on a few cores sets it higher:
	// time to first token is the same, and the process that hosts the
	// backends, the routers and the load generator spends most of its CPU
	// on the write, read and flush of each token, once per hop.
	StreamInterval int

	// ORCAOnStreaming also sends the endpoint-load-metrics header (as a
	// response header at stream start) on streaming replies. Default false:
	// vLLM only reports on non-streaming replies.
	ORCAOnStreaming bool

	// KVEvents publishes the engine's KV-cache events over ZMQ (vLLM's
	// format, kvevents.go). The zero value publishes none.
	KVEvents KVEventsConfig

	// Faults are injected failures; the zero value injects none. They can be
	// changed at run time with SetFaults, Restart or POST /sim/fault.
	Faults Faults

	// Seed seeds the fault injector's random numbers. Default 1; StartFleet
	// gives instance i Seed+i so instances fail independently but
	// reproducibly.
	Seed uint64

	// MaxBodyBytes bounds a request body. Default 32 MiB: a 128k-token prompt
	// of synthetic words is ~1 MB, so this only stops abuse.
	MaxBodyBytes int64

	// Logger receives structured logs: lifecycle at info, one line per
	// scheduling decision at debug. The zero value discards everything.
	Logger zerolog.Logger
}

// Timing is the engine's cost model in simulated time. One engine step
// processes a token budget of prefill chunks plus one decode token for every
// decoding sequence, and lasts
//
//	StepOverhead + PrefillPerToken*prefillTokens + DecodePerSeq*decodingSeqs
//
// Defaults are calibrated to Llama-3.1-8B in bf16 on one H100.
type Timing struct {
	// StepOverhead is the fixed cost of one step (weights streamed from HBM
	// once, scheduling, kernel launches). Default 8 ms: an 8B model's 16 GB at
	// ~3 TB/s is ~5.5 ms, plus ~2.5 ms of framework overhead.
	StepOverhead time.Duration

	// PrefillPerToken is the cost of each uncached prompt token in a step.
	// Default 60 us (~16.7k prefill tokens/s): the compute-bound prefill
	// throughput of an 8B model on an H100 at realistic MFU.
	PrefillPerToken time.Duration

	// DecodePerSeq is the extra cost of each decoding sequence in a step (its
	// KV reads and sampling). Default 66 us: the step grows from ~8 ms with one
	// sequence to ~25 ms with 256.
	DecodePerSeq time.Duration
}

// Faults are failures injected on demand. The zero value injects none.
type Faults struct {
	// ErrorRate is the probability that a request fails with HTTP 500 before
	// any byte of a reply is written. Default 0.
	ErrorRate float64

	// SpikeRate is the probability that a request is held back by SpikeDelay
	// before it reaches the engine (its TTFT includes the delay). Default 0.
	SpikeRate float64

	// SpikeDelay is the extra latency of a spike, in simulated time. Default
	// 2 s: long enough to stand out in a TTFT histogram.
	SpikeDelay time.Duration

	// RestartDowntime is how long a simulated restart answers 503, in
	// simulated time. Default 30 s: a vLLM 8B restart (weights load, CUDA
	// graph capture) takes about that long.
	RestartDowntime time.Duration
}

// DefaultConfig returns the configuration of an 8B model on one H100.
func DefaultConfig() Config {
	return Config{
		Name:             "sim",
		Models:           []string{"kvmesh-sim"},
		BlockSize:        16,
		CacheBlocks:      27000,
		MaxRunning:       256,
		MaxBatchedTokens: 8192,
		MaxModelLen:      131072,
		DefaultMaxTokens: 256,
		MaxOutputTokens:  0,
		Timing: Timing{
			StepOverhead:    8 * time.Millisecond,
			PrefillPerToken: 60 * time.Microsecond,
			DecodePerSeq:    66 * time.Microsecond,
		},
		TimeScale:        1,
		SleepGranularity: time.Millisecond,
		StreamInterval:   1,
		Faults: Faults{
			SpikeDelay:      2 * time.Second,
			RestartDowntime: 30 * time.Second,
		},
		Seed:         1,
		MaxBodyBytes: 32 << 20,
		Logger:       zerolog.Nop(),
	}
}

// Validate reports every problem with c, joined into one error.
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if strings.TrimSpace(c.Name) == "" {
		bad("sim: Name must not be empty")
	}
	if len(c.Models) == 0 {
		bad("sim: Models must name at least one model")
	}
	seen := make(map[string]bool, len(c.Models))
	for i, m := range c.Models {
		switch {
		case m == "":
			bad("sim: Models[%d] is empty", i)
		case seen[m]:
			bad("sim: Models[%d] %q is listed twice", i, m)
		}
		seen[m] = true
	}
	if c.BlockSize < 1 {
		bad("sim: BlockSize must be >= 1, got %d", c.BlockSize)
	}
	if c.CacheBlocks < 1 {
		bad("sim: CacheBlocks must be >= 1, got %d", c.CacheBlocks)
	}
	if c.CacheBlocks > math.MaxInt32-1 {
		bad("sim: CacheBlocks must be < 2^31-1, got %d", c.CacheBlocks)
	}
	if c.MaxRunning < 1 {
		bad("sim: MaxRunning must be >= 1, got %d", c.MaxRunning)
	}
	if c.MaxBatchedTokens < 1 {
		bad("sim: MaxBatchedTokens must be >= 1, got %d", c.MaxBatchedTokens)
	}
	if c.MaxModelLen < 2 {
		bad("sim: MaxModelLen must be >= 2, got %d", c.MaxModelLen)
	}
	if c.DefaultMaxTokens < 1 {
		bad("sim: DefaultMaxTokens must be >= 1, got %d", c.DefaultMaxTokens)
	}
	if c.MaxOutputTokens < 0 {
		bad("sim: MaxOutputTokens must be >= 0 (0 = no cap), got %d", c.MaxOutputTokens)
	}
	if c.Timing.StepOverhead <= 0 {
		bad("sim: Timing.StepOverhead must be > 0 (a zero-cost step would spin), got %v", c.Timing.StepOverhead)
	}
	if c.Timing.PrefillPerToken < 0 || c.Timing.DecodePerSeq < 0 {
		bad("sim: Timing costs must be >= 0, got PrefillPerToken %v, DecodePerSeq %v",
			c.Timing.PrefillPerToken, c.Timing.DecodePerSeq)
	}
	if !(c.TimeScale > 0) || math.IsInf(c.TimeScale, 0) {
		bad("sim: TimeScale must be a positive finite number, got %v", c.TimeScale)
	}
	if c.StreamInterval < 0 {
		bad("sim: StreamInterval must be >= 0 (0 or 1: every token), got %d", c.StreamInterval)
	}
	if c.SleepGranularity < 0 {
		bad("sim: SleepGranularity must be >= 0, got %v", c.SleepGranularity)
	}
	if err := c.Faults.Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.MaxBodyBytes < 1 {
		bad("sim: MaxBodyBytes must be >= 1, got %d", c.MaxBodyBytes)
	}
	return errors.Join(errs...)
}

// Validate reports out-of-range fault settings.
func (f Faults) Validate() error {
	var errs []error
	if !(f.ErrorRate >= 0 && f.ErrorRate <= 1) {
		errs = append(errs, fmt.Errorf("sim: Faults.ErrorRate must be in [0,1], got %v", f.ErrorRate))
	}
	if !(f.SpikeRate >= 0 && f.SpikeRate <= 1) {
		errs = append(errs, fmt.Errorf("sim: Faults.SpikeRate must be in [0,1], got %v", f.SpikeRate))
	}
	if f.SpikeDelay < 0 {
		errs = append(errs, fmt.Errorf("sim: Faults.SpikeDelay must be >= 0, got %v", f.SpikeDelay))
	}
	if f.RestartDowntime < 0 {
		errs = append(errs, fmt.Errorf("sim: Faults.RestartDowntime must be >= 0, got %v", f.RestartDowntime))
	}
	return errors.Join(errs...)
}

// realDuration converts a simulated duration to wall-clock time.
func (c *Config) realDuration(simulated time.Duration) time.Duration {
	return time.Duration(float64(simulated) / c.TimeScale)
}
