package router

import (
	"context"
	"io"
	"net/http"
	"time"
)

// scrapeEvery: while ORCA reports keep a backend's load fresh, its
// /metrics page is still read every scrapeEvery intervals, for the running
// count ORCA may lack and the prefix-cache counters that reveal a restart.
const scrapeEvery = 10

// watch runs one backend's background work until ctx ends: active probes,
// load scrapes and model discovery, each on its own ticker. ready is called
// after the first discovery and probe.
func (rt *Router) watch(ctx context.Context, b *backend, ready func()) {
	if b.static == nil {
		rt.discover(ctx, b)
	}
	if rt.cfg.ProbeInterval > 0 {
		rt.probe(ctx, b)
	}
	ready()

	var probeC, readmitC, discoverC <-chan time.Time
	if rt.cfg.ProbeInterval > 0 {
		t := time.NewTicker(rt.cfg.ProbeInterval)
		defer t.Stop()
		probeC = t.C
	} else {
		t := time.NewTicker(max(rt.cfg.EjectionTime/4, 10*time.Millisecond))
		defer t.Stop()
		readmitC = t.C
	}
	if b.static == nil {
		t := time.NewTicker(rt.cfg.DiscoveryInterval)
		defer t.Stop()
		discoverC = t.C
	}
	scrapeT := time.NewTicker(rt.cfg.ScrapeInterval)
	defer scrapeT.Stop()
	skipped := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-probeC:
			rt.probe(ctx, b)
		case <-readmitC:
			rt.readmitDue(b)
		case <-discoverC:
			rt.discover(ctx, b)
		case <-scrapeT.C:
			if at := b.orca.at.Load(); at != 0 && rt.now().UnixNano()-at < int64(rt.cfg.ScrapeInterval) && skipped < scrapeEvery-1 {
				skipped++
				continue
			}
			skipped = 0
			rt.scrapeLoad(ctx, b)
		}
	}
}

// scrapeLoad reads b's /metrics page into its scrape signal. A prefix-cache
// query counter that went backwards means the backend restarted (its
// counters and its cache started from zero): its claims are invalidated.
func (rt *Router) scrapeLoad(ctx context.Context, b *backend) {
	ctx, cancel := context.WithTimeout(ctx, rt.cfg.ProbeTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.base+rt.cfg.ScrapePath, nil)
	if err != nil {
		return
	}
	// The page is taken somewhere between sending and receiving: the most
	// requests the mesh had pending at b over that span bounds how many of
	// its waiting requests were the mesh's.
	own := rt.meshPending(b)
	resp, err := rt.client.Do(req)
	if err != nil {
		if ctx.Err() != context.Canceled {
			rt.metrics.errors[errScrape].Inc()
			rt.log.Debug().Str("backend", b.name).Err(err).Msg("metrics scrape failed")
		}
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		rt.metrics.errors[errScrape].Inc()
		rt.log.Debug().Str("backend", b.name).Str("status", resp.Status).Msg("metrics scrape answered an error")
		return
	}
	var sl ScrapedLoad
	if err := ParseMetrics(resp.Body, "", &sl); err != nil {
		rt.metrics.errors[errSignalParse].Inc()
		rt.log.Debug().Str("backend", b.name).Err(err).Msg("metrics page did not parse")
		return
	}
	at := rt.now()
	if sl.Has&(HasWaiting|HasRunning|HasKVCacheUsage) != 0 {
		own = max(own, rt.meshPending(b))
		b.noteLoad(&b.scrape, sample{Waiting: sl.Waiting, Running: sl.Running, KVUsage: sl.KVCacheUsage, Has: sl.Has, Own: own}, at)
	}
	if sl.Has&HasKVCapacity != 0 && !b.capConfigured {
		b.belief.capTokens.Store(capacityTokens(sl.KVCapacityTokens))
	}
	if sl.Has&HasPrefixQueries == 0 {
		return
	}
	b.mu.Lock()
	prev := b.health.prefixQueries
	b.health.prefixQueries = sl.PrefixQueries
	if sl.Has&HasPrefixHits != 0 {
		b.health.prefixHits = sl.PrefixHits
	}
	restarted := prev > 0 && sl.PrefixQueries < prev
	if restarted {
		b.health.coldReturns++
	}
	b.mu.Unlock()
	if restarted {
		rt.coldCache(b)
		rt.log.Info().Str("backend", b.name).Float64("prefix_cache_queries", sl.PrefixQueries).Float64("before", prev).
			Msg("backend's prefix-cache counters went backwards (restart): claims invalidated (cold cache)")
	}
}
