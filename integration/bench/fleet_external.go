package bench

import (
	"bufio"
	"context"
	"errors"
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
		// A counter below its value after the restart means the backend
		// started over (a crash, a restart by someone else): the run's
		// counts are lost, and the differences would wrap around.
		if c.PrefixCacheQueries < b.PrefixCacheQueries || c.PrefixCacheHits < b.PrefixCacheHits ||
			c.GenerationTokens < b.GenerationTokens || c.Requests < b.Requests || c.Preemptions < b.Preemptions ||
			c.EvictedBlocks < b.EvictedBlocks || c.BusySeconds < b.BusySeconds {
			return nil, fmt.Errorf("bench: %s: counters went backwards during the run (prefix-cache queries %d -> %d, hits %d -> %d): the backend restarted and the run's counts are lost",
				f.urls[i], b.PrefixCacheQueries, c.PrefixCacheQueries, b.PrefixCacheHits, c.PrefixCacheHits)
		}
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
// page, summing samples of the same name over their labels. A page
// without the prefix-cache counters (not a vLLM, or one whose metrics do
// not include them) is an error: the hit rate would read as 0.
func parseCounters(r io.Reader) (BackendCounters, error) {
	var c BackendCounters
	var queries, hits bool
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		name, value, ok := sampleValue(line)
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(value, 64)
		if err != nil || !(v >= 0) || math.IsInf(v, 0) {
			continue
		}
		switch name {
		case "vllm:prefix_cache_queries_total":
			c.PrefixCacheQueries += uint64(v)
			queries = true
		case "vllm:prefix_cache_hits_total":
			c.PrefixCacheHits += uint64(v)
			hits = true
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
	if err := sc.Err(); err != nil {
		return c, err
	}
	if !queries || !hits {
		return c, errors.New("no vllm:prefix_cache_queries_total and vllm:prefix_cache_hits_total on the page (is it a vLLM or a kvmesh-sim?)")
	}
	return c, nil
}

// sampleValue splits a sample line of the Prometheus text format into its
// metric name and value: `name{labels} value [timestamp]`, where label
// values may hold spaces and braces. ok is false for a malformed line.
func sampleValue(line string) (name, value string, ok bool) {
	end := strings.IndexAny(line, "{ ")
	if end <= 0 {
		return "", "", false
	}
	name, rest := line[:end], line[end:]
	if rest[0] == '{' {
		close, quoted := -1, false
		for i := 1; i < len(rest) && close < 0; i++ {
			switch c := rest[i]; {
			case quoted && c == '\\':
				i++ // an escaped byte inside a label value
			case c == '"':
				quoted = !quoted
			case !quoted && c == '}':
				close = i
			}
		}
		if close < 0 {
			return "", "", false
		}
		rest = rest[close+1:]
	}
	fields := strings.Fields(rest)
	if len(fields) == 0 || len(fields) > 2 {
		return "", "", false
	}
	return name, fields[0], true
}
