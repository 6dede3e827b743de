package router

import (
	"context"
	"io"
	"net/http"
	"time"
)

// scrapeEvery: while ORCA reports keep a backend's load fresh, its
// /metrics page is still read at least every scrapeEvery intervals, for
// the running count ORCA may lack and the prefix-cache counters that
// reveal a restart (scrapeCadence: more often with a short SignalMaxAge).
const scrapeEvery = 10

// scrapeCadence is how many scrape intervals apart a backend's /metrics
// page is read while ORCA keeps its load fresh. vLLM's ORCA report has no
// num_requests_running: the load view borrows it from the last scrape
// while that is younger than SignalMaxAge (freshest), so the scrape must
// come again before that, with an interval to spare for the scrape's own
// time and a late tick: floor(SignalMaxAge/ScrapeInterval) - 1 intervals
// (5 s at the defaults), at least 1, at most scrapeEvery. At scrapeEvery
// the running count was gone from the view 4 s of every 10.
func scrapeCadence(cfg *Config) int {
	if cfg.ScrapeInterval <= 0 {
		return 1
	}
	return min(max(int(cfg.SignalMaxAge/cfg.ScrapeInterval)-1, 1), scrapeEvery)
}

// scrapeGate decides which of a backend's scrape ticks read its /metrics
// page (one per watch loop). It counts time, not ticks: a ticker drops the
// ticks that come while the loop probes or discovers (a slow backend, the
// loaded one whose running count matters, stretches both), so the gate
// scrapes at the last tick before the next one, as far apart as the last
// two, would come too late.
type scrapeGate struct {
	span time.Duration // scrapeCadence intervals: the most a scrape may wait while ORCA is fresh
	tick time.Duration // the scrape interval
	last time.Time     // the last scrape (zero: none yet)
	prev time.Time     // the last tick
}

// newScrapeGate is the gate of a watch loop: its first tick scrapes
// (nothing has been read yet, ORCA or not).
func newScrapeGate(cfg *Config) scrapeGate {
	return scrapeGate{span: time.Duration(scrapeCadence(cfg)) * cfg.ScrapeInterval, tick: cfg.ScrapeInterval}
}

// due reports whether the scrape tick at now reads b's /metrics page:
// always unless an ORCA report came within the last interval; then only
// when waiting for the next tick (expected as far from now as this one was
// from the last, at least an interval) would leave more than span (and
// half an interval's slack) since the last scrape.
func (g *scrapeGate) due(rt *Router, b *backend, now time.Time) bool {
	gap := g.tick
	if !g.prev.IsZero() {
		gap = max(gap, now.Sub(g.prev))
	}
	g.prev = now
	if at := b.orca.at.Load(); at != 0 && now.UnixNano()-at < int64(g.tick) && !g.last.IsZero() && now.Add(gap).Sub(g.last) < g.span+g.tick/2 {
		return false
	}
	g.last = now
	return true
}

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
	var unknownNext time.Time     // the next probe-paced discovery of unknown models
	var unknownWait time.Duration // doubles from ProbeInterval up to DiscoveryInterval
	gate := newScrapeGate(&rt.cfg)
	for {
		select {
		case <-ctx.Done():
			return
		case <-probeC:
			rt.probe(ctx, b)
			if b.static == nil && b.discovered.Load() == nil && b.healthy.Load() {
				// Models not known yet (down or starting at the first
				// round) of a backend that answers its probe now: asked
				// sooner than DiscoveryInterval while requests for them get
				// 503 models_unknown, at a pace that backs off from the
				// probe's to DiscoveryInterval's (a backend that never
				// serves GET /v1/models is not asked every probe for good).
				if now := rt.now(); !now.Before(unknownNext) {
					rt.discover(ctx, b)
					unknownWait = min(max(2*unknownWait, rt.cfg.ProbeInterval), rt.cfg.DiscoveryInterval)
					unknownNext = now.Add(unknownWait)
				}
			}
		case <-readmitC:
			rt.readmitDue(b)
		case <-discoverC:
			rt.discover(ctx, b)
		case <-scrapeT.C:
			if gate.due(rt, b, rt.now()) {
				rt.scrapeLoad(ctx, b)
			}
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
	sent := rt.now() // the page is no older: a restart it missed came after
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
	if err := parseMetrics(resp.Body, "", &sl, rt.cfg.BackendLimits.MetricsBytes, rt.cfg.BackendLimits.MetricsLineBytes); err != nil {
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
	prev, prevAt := b.health.prefixQueries, b.health.prefixAt
	b.health.prefixQueries, b.health.prefixAt = sl.PrefixQueries, sent
	if sl.Has&HasPrefixHits != 0 {
		b.health.prefixHits = sl.PrefixHits
	}
	restarted := prev > 0 && sl.PrefixQueries < prev
	b.mu.Unlock()
	if restarted && rt.coldCache(b, prevAt) {
		rt.log.Info().Str("backend", b.name).Float64("prefix_cache_queries", sl.PrefixQueries).Float64("before", prev).
			Msg("backend's prefix-cache counters went backwards (restart): claims invalidated (cold cache)")
	}
}
