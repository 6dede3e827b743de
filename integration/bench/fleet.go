package bench

import (
	"bufio"
	"context"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/kvmesh/kvmesh/integration/sim"
)

// Fleet is a set of backends one run routes to. Every run gets a new one:
// fresh caches, counters that start at zero.
type Fleet interface {
	// URLs are the backends' base URLs, in a fixed order; backend i is
	// named BackendName(i) in the routers' configuration.
	URLs() []string
	// Counters returns each backend's own counters since the fleet started.
	Counters(ctx context.Context) ([]BackendCounters, error)
	// Oracle returns what the oracle arm may ask of the backends; nil if
	// the fleet cannot answer (the oracle arm is then refused).
	Oracle() *OracleView
	Close() error
}

// FleetFactory starts a fresh fleet.
type FleetFactory func(ctx context.Context) (Fleet, error)

// BackendName is the router's name for backend i.
func BackendName(i int) string { return "b" + strconv.Itoa(i) }

// BackendCounters are one backend's own counters over a run, the only
// source of hit rates.
type BackendCounters struct {
	Name string `json:"name"`
	// PrefixCacheQueries and PrefixCacheHits are vllm:prefix_cache_queries_total
	// and vllm:prefix_cache_hits_total (tokens).
	PrefixCacheQueries uint64 `json:"prefix_cache_queries"`
	PrefixCacheHits    uint64 `json:"prefix_cache_hits"`
	// GenerationTokens is vllm:generation_tokens_total.
	GenerationTokens uint64 `json:"generation_tokens"`
	// Requests counts the requests the engine admitted (scheduled at least
	// once); for an ExternalFleet, those that succeeded.
	Requests uint64 `json:"requests"`
	// Preemptions and EvictedBlocks show cache pressure.
	Preemptions   uint64 `json:"preemptions"`
	EvictedBlocks uint64 `json:"evicted_blocks"`
	// BusySeconds is simulated time spent in engine steps.
	BusySeconds float64 `json:"busy_seconds"`
	// TTFT is the engine's own time to first token (engine_ttft.go); nil
	// for an ExternalFleet. Summarised in RunResult.EngineTTFT, not stored.
	TTFT *sim.LatencySketch `json:"-"`
}

// ComputedTokens is the prompt tokens the backend had to prefill: queries
// minus hits. It is the work measure of the load-imbalance figure.
func (c BackendCounters) ComputedTokens() uint64 { return c.PrefixCacheQueries - c.PrefixCacheHits }

// OracleView is what the oracle sees of a fleet: each backend (in URLs
// order) and the engines' cost model.
type OracleView struct {
	Backends []OracleBackend
	// Timing and StepTokens are the engines' step cost model and prefill
	// budget per step (sim.Config.Timing and MaxBatchedTokens).
	Timing     sim.Timing
	StepTokens int
}

// SimFleet starts in-process simulated fleets of n backends with cfg.
func SimFleet(n int, cfg sim.Config) FleetFactory {
	return func(context.Context) (Fleet, error) {
		f, err := sim.StartFleet(n, cfg)
		if err != nil {
			return nil, err
		}
		return &simFleet{f: f, cfg: cfg}, nil
	}
}

type simFleet struct {
	f   *sim.Fleet
	cfg sim.Config
}

func (s *simFleet) URLs() []string { return s.f.URLs() }

func (s *simFleet) Counters(context.Context) ([]BackendCounters, error) {
	st := s.f.Stats()
	out := make([]BackendCounters, len(st.Instances))
	for i, in := range st.Instances {
		out[i] = BackendCounters{
			Name:               BackendName(i),
			PrefixCacheQueries: in.PrefixCacheQueries,
			PrefixCacheHits:    in.PrefixCacheHits,
			GenerationTokens:   in.GenerationTokens,
			Requests:           in.RequestsAdmitted,
			Preemptions:        in.Preemptions,
			EvictedBlocks:      in.EvictedBlocks,
			BusySeconds:        in.BusySeconds,
			TTFT:               &in.TTFT,
		}
	}
	return out, nil
}

func (s *simFleet) Oracle() *OracleView {
	v := &OracleView{Timing: s.cfg.Timing, StepTokens: s.cfg.MaxBatchedTokens}
	for _, in := range s.f.Instances() {
		v.Backends = append(v.Backends, in)
	}
	return v
}

func (s *simFleet) Close() error { return s.f.Close() }

// lagSampler records the largest kvmesh_sim_engine_lag_seconds any backend
// reported while a run was going on: a lag that grows means the machine
// could not run the engines at the chosen time scale, and every latency of
// the run is suspect.
type lagSampler struct {
	client *http.Client
	urls   []string
	max    float64
	stop   chan struct{}
	done   chan struct{}
}

func startLagSampler(urls []string, every time.Duration) *lagSampler {
	ls := &lagSampler{
		client: &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 1}},
		urls:   urls,
		stop:   make(chan struct{}),
		done:   make(chan struct{}),
	}
	go func() {
		defer close(ls.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ls.stop:
				return
			case <-t.C:
				for _, u := range ls.urls {
					ls.max = max(ls.max, ls.sample(u))
				}
			}
		}
	}()
	return ls
}

// sample reads one backend's lag (0 if it cannot).
func (ls *lagSampler) sample(url string) float64 {
	resp, err := ls.client.Get(url + "/metrics")
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		// The name ends at its labels or the value: another metric may
		// begin with it (a _max, a _total).
		rest, ok := strings.CutPrefix(sc.Text(), "kvmesh_sim_engine_lag_seconds")
		if !ok || rest == "" || (rest[0] != ' ' && rest[0] != '{') {
			continue
		}
		if i := strings.LastIndexByte(rest, ' '); i >= 0 {
			// A NaN would make the run's MaxEngineLag NaN, which JSON
			// cannot carry: results.json would not be written.
			if v, err := strconv.ParseFloat(rest[i+1:], 64); err == nil && v >= 0 && !math.IsInf(v, 1) {
				return v
			}
		}
	}
	return 0
}

// Stop ends sampling and returns the largest lag seen, in real seconds.
func (ls *lagSampler) Stop() float64 {
	close(ls.stop)
	<-ls.done
	ls.client.CloseIdleConnections()
	return ls.max
}
