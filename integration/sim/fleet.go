package sim

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"
)

// InstanceStats is a snapshot of one instance's own counters (the ones
// /metrics exports). Token counts are cumulative since New and survive
// simulated restarts.
type InstanceStats struct {
	Name string
	URL  string // "" unless started by StartFleet

	PrefixCacheQueries uint64 // vllm:prefix_cache_queries_total (prompt tokens of admitted requests)
	PrefixCacheHits    uint64 // vllm:prefix_cache_hits_total (cached tokens)
	PromptTokens       uint64 // vllm:prompt_tokens_total (requests that reached their first token)
	GenerationTokens   uint64 // vllm:generation_tokens_total

	RequestsAdmitted  uint64 // scheduled at least once
	RequestsSucceeded uint64 // vllm:request_success_total
	RequestsCancelled uint64 // client went away
	RequestsDropped   uint64 // failed by a restart or Close
	Preemptions       uint64 // vllm:num_preemptions_total
	EvictedBlocks     uint64 // cached blocks evicted (LRU)
	Restarts          uint64
	InjectedErrors    uint64
	InjectedSpikes    uint64

	Steps       uint64  // engine steps run
	BusySeconds float64 // simulated seconds spent in steps

	Running      int     // current vllm:num_requests_running
	Waiting      int     // current vllm:num_requests_waiting
	KVCacheUsage float64 // current vllm:kv_cache_usage_perc
	CachedBlocks int     // current prefix-cache entries

	// TTFT is every time to first token the engine measured, in simulated
	// seconds from the request's arrival at the engine (its queue and its
	// prefill; vllm:time_to_first_token_seconds at 1% resolution).
	TTFT LatencySketch
}

// HitRate is PrefixCacheHits / PrefixCacheQueries (0 with no queries).
func (s InstanceStats) HitRate() float64 {
	if s.PrefixCacheQueries == 0 {
		return 0
	}
	return float64(s.PrefixCacheHits) / float64(s.PrefixCacheQueries)
}

// Stats returns the instance's counters and current load.
func (in *Instance) Stats() InstanceStats {
	c := &in.eng.ctr
	l := in.Load()
	st := InstanceStats{
		Name:               in.cfg.Name,
		PrefixCacheQueries: c.queries.Load(),
		PrefixCacheHits:    c.hits.Load(),
		PromptTokens:       c.promptTokens.Load(),
		GenerationTokens:   c.genTokens.Load(),
		RequestsAdmitted:   c.admitted.Load(),
		RequestsSucceeded:  c.success.Load(),
		RequestsCancelled:  c.cancelled.Load(),
		RequestsDropped:    c.dropped.Load(),
		Preemptions:        c.preemptions.Load(),
		EvictedBlocks:      c.evictions.Load(),
		Restarts:           c.restarts.Load(),
		InjectedErrors:     in.faults.errors.Load(),
		InjectedSpikes:     in.faults.spikes.Load(),
		Steps:              c.steps.Load(),
		BusySeconds:        float64(c.busyNanos.Load()) / 1e9,
		Running:            l.Running,
		Waiting:            l.Waiting,
		KVCacheUsage:       l.KVCacheUsage,
		CachedBlocks:       int(in.eng.gauge.cachedBlocks.Load()),
		TTFT:               in.ttfts.snapshot(),
	}
	if u := in.url.Load(); u != nil {
		st.URL = *u
	}
	return st
}

// FleetStats sums the instances' counters.
type FleetStats struct {
	Instances []InstanceStats
	// Total sums every counter and the current Running/Waiting/CachedBlocks;
	// KVCacheUsage is the mean over instances. Name and URL are empty.
	Total InstanceStats
}

// HitRate is the fleet-wide token hit rate: sum of hits / sum of queries.
func (f FleetStats) HitRate() float64 { return f.Total.HitRate() }

// Fleet is n instances, each served on its own 127.0.0.1:0 listener.
type Fleet struct {
	insts   []*Instance
	servers []*http.Server
	urls    []string
	done    []chan struct{}
}

// StartFleet starts n fresh instances (fresh caches, fresh counters) from
// cfg. Instance i is named "<cfg.Name>-<i>" and seeded cfg.Seed+i.
func StartFleet(n int, cfg Config) (*Fleet, error) {
	if n < 1 {
		return nil, fmt.Errorf("sim: StartFleet needs n >= 1, got %d", n)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	f := &Fleet{}
	for i := 0; i < n; i++ {
		c := cfg
		c.Name = fmt.Sprintf("%s-%d", cfg.Name, i)
		c.Seed = cfg.Seed + uint64(i)
		in, err := New(c)
		if err != nil {
			f.Close()
			return nil, err
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			in.Close()
			f.Close()
			return nil, fmt.Errorf("sim: listening for %s: %w", c.Name, err)
		}
		url := "http://" + ln.Addr().String()
		in.url.Store(&url)
		srv := &http.Server{Handler: in, ReadHeaderTimeout: 10 * time.Second}
		done := make(chan struct{})
		go func() {
			defer close(done)
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				in.log.Error().Err(err).Msg("fleet server stopped")
			}
		}()
		f.insts = append(f.insts, in)
		f.servers = append(f.servers, srv)
		f.urls = append(f.urls, url)
		f.done = append(f.done, done)
	}
	return f, nil
}

// URLs returns each instance's base URL ("http://127.0.0.1:port"), in order.
func (f *Fleet) URLs() []string { return append([]string(nil), f.urls...) }

// Instances returns the instances, in URL order.
func (f *Fleet) Instances() []*Instance { return append([]*Instance(nil), f.insts...) }

// Stats snapshots every instance and sums them.
func (f *Fleet) Stats() FleetStats {
	var fs FleetStats
	t := &fs.Total
	for _, in := range f.insts {
		s := in.Stats()
		fs.Instances = append(fs.Instances, s)
		t.PrefixCacheQueries += s.PrefixCacheQueries
		t.PrefixCacheHits += s.PrefixCacheHits
		t.PromptTokens += s.PromptTokens
		t.GenerationTokens += s.GenerationTokens
		t.RequestsAdmitted += s.RequestsAdmitted
		t.RequestsSucceeded += s.RequestsSucceeded
		t.RequestsCancelled += s.RequestsCancelled
		t.RequestsDropped += s.RequestsDropped
		t.Preemptions += s.Preemptions
		t.EvictedBlocks += s.EvictedBlocks
		t.Restarts += s.Restarts
		t.InjectedErrors += s.InjectedErrors
		t.InjectedSpikes += s.InjectedSpikes
		t.Steps += s.Steps
		t.BusySeconds += s.BusySeconds
		t.Running += s.Running
		t.Waiting += s.Waiting
		t.CachedBlocks += s.CachedBlocks
		t.TTFT.Add(&s.TTFT)
		t.KVCacheUsage += s.KVCacheUsage / float64(len(f.insts))
	}
	return fs
}

// Close stops every instance (in-flight requests fail) and its server.
func (f *Fleet) Close() error {
	var errs []error
	for _, in := range f.insts {
		in.Close()
	}
	for i, srv := range f.servers {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := srv.Shutdown(ctx); err != nil {
			errs = append(errs, err)
			srv.Close()
		}
		cancel()
		<-f.done[i]
	}
	return errors.Join(errs...)
}
