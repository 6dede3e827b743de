package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// ExternalFleet is a fleet of kvmesh-sim processes started by someone else
// (the demo script). Every run makes it fresh the way a real fleet would
// be: each backend is restarted through POST /sim/fault (an empty cache,
// no downtime) and its counters are read from /metrics as differences from
// their values after the restart. It has no oracle: the oracle arm needs an
// in-process fleet.
func ExternalFleet(urls []string) FleetFactory {
	return func(ctx context.Context) (Fleet, error) {
		f := &externalFleet{urls: urls, client: &http.Client{Timeout: 10 * time.Second}}
		for _, u := range urls {
			if err := f.restart(ctx, u); err != nil {
				return nil, err
			}
		}
		var err error
		if f.base, err = f.read(ctx); err != nil {
			return nil, err
		}
		return f, nil
	}
}

type externalFleet struct {
	urls   []string
	client *http.Client
	base   []BackendCounters
}

func (f *externalFleet) URLs() []string { return append([]string(nil), f.urls...) }

func (f *externalFleet) Oracle() *OracleView { return nil }

func (f *externalFleet) Close() error {
	f.client.CloseIdleConnections()
	return nil
}

// Counters returns the counters since the fleet was made fresh. The
// freshness check of RunOnce sees zeros right after the restart.
func (f *externalFleet) Counters(ctx context.Context) ([]BackendCounters, error) {
	now, err := f.read(ctx)
	if err != nil {
		return nil, err
	}
	for i := range now {
		b := &f.base[i]
		c := &now[i]
		c.PrefixCacheQueries -= b.PrefixCacheQueries
		c.PrefixCacheHits -= b.PrefixCacheHits
		c.GenerationTokens -= b.GenerationTokens
		c.Requests -= b.Requests
		c.Preemptions -= b.Preemptions
		c.EvictedBlocks -= b.EvictedBlocks
		c.BusySeconds -= b.BusySeconds
	}
	return now, nil
}

// restart empties a backend's cache and waits until it serves again.
func (f *externalFleet) restart(ctx context.Context, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/sim/fault",
		strings.NewReader(`{"restart_downtime_s":0,"restart":true}`))
	if err != nil {
		return err
	}
	resp, err := f.client.Do(req)
	if err != nil {
		return fmt.Errorf("bench: restarting %s: %w", url, err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("bench: restarting %s: HTTP %d (is it a kvmesh-sim?)", url, resp.StatusCode)
	}
	return waitHealthy(ctx, url+"/health", nil, nil)
}

// read scrapes every backend's counters.
func (f *externalFleet) read(ctx context.Context) ([]BackendCounters, error) {
	out := make([]BackendCounters, len(f.urls))
	for i, u := range f.urls {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u+"/metrics", nil)
		if err != nil {
			return nil, err
		}
		resp, err := f.client.Do(req)
		if err != nil {
			return nil, fmt.Errorf("bench: reading %s/metrics: %w", u, err)
		}
		out[i], err = parseCounters(resp.Body)
		resp.Body.Close()
		if err != nil {
			return nil, fmt.Errorf("bench: reading %s/metrics: %w", u, err)
		}
		out[i].Name = BackendName(i)
	}
	return out, nil
}

// parseCounters reads the counters of a kvmesh-sim (vLLM-named) metrics
// page, summing samples of the same name over their labels.
func parseCounters(r io.Reader) (BackendCounters, error) {
	var c BackendCounters
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		end := strings.IndexAny(line, "{ ")
		sp := strings.LastIndexByte(line, ' ')
		if end <= 0 || sp <= 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[sp+1:], 64)
		if err != nil || !(v >= 0) || math.IsInf(v, 0) {
			continue
		}
		switch line[:end] {
		case "vllm:prefix_cache_queries_total":
			c.PrefixCacheQueries += uint64(v)
		case "vllm:prefix_cache_hits_total":
			c.PrefixCacheHits += uint64(v)
		case "vllm:generation_tokens_total":
			c.GenerationTokens += uint64(v)
		case "vllm:request_success_total":
			c.Requests += uint64(v)
		case "vllm:num_preemptions_total":
			c.Preemptions += uint64(v)
		case "kvmesh_sim_cache_evicted_blocks_total":
			c.EvictedBlocks += uint64(v)
		case "kvmesh_sim_engine_busy_seconds_total":
			c.BusySeconds += v
		}
	}
	return c, sc.Err()
}
