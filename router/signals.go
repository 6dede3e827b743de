package router

import (
	"math"
	"net/http"
	"sync/atomic"
	"time"
)

var inf = math.Inf(1)

// ORCA header names (see FIELD-NOTES: vLLM and Envoy conventions).
const (
	orcaRequestHeader   = "Endpoint-Load-Metrics-Format"
	orcaResponseHeader  = "Endpoint-Load-Metrics"
	orcaResponseBin     = "Endpoint-Load-Metrics-Bin"
	orcaMaxHeaderValues = 4 // default of BackendLimits.ORCAHeaderValues: headers past it are ignored
)

// sample is one load report, whichever way it arrived.
type sample struct {
	Waiting, Running, KVUsage float64
	Has                       LoadFields // which of the three were reported
	// Own is how many requests the mesh (this router and, as far as it
	// knows, its peers) had pending (sent, no first byte yet) at the
	// backend when the report was taken: at most that many of Waiting were
	// the mesh's own.
	Own float64
}

// signal holds the last sample of one source. Its fields are separate
// atomics: a reader may see two consecutive samples mixed, which is
// harmless for load estimates, and never blocks a writer.
type signal struct {
	waiting, running, kv atomic.Uint64 // float64 bits
	has                  atomic.Uint32
	own                  atomic.Uint64 // float64 bits
	at                   atomic.Int64  // Unix ns of the sample; 0 = never
}

func (s *signal) store(v sample, at time.Time) {
	s.waiting.Store(math.Float64bits(v.Waiting))
	s.running.Store(math.Float64bits(v.Running))
	s.kv.Store(math.Float64bits(v.KVUsage))
	s.has.Store(uint32(v.Has & (HasWaiting | HasRunning | HasKVCacheUsage)))
	s.own.Store(math.Float64bits(v.Own))
	s.at.Store(at.UnixNano())
}

func (s *signal) load() (sample, int64) {
	return sample{
		Waiting: math.Float64frombits(s.waiting.Load()),
		Running: math.Float64frombits(s.running.Load()),
		KVUsage: math.Float64frombits(s.kv.Load()),
		Has:     LoadFields(s.has.Load()),
		Own:     math.Float64frombits(s.own.Load()),
	}, s.at.Load()
}

// freshest fills lv's signal fields from the newer of two sources, taking
// a field the newer one lacks from the older one when that is not past
// SignalMaxAge (an ORCA report without num_requests_running, completed by
// the last scrape).
func freshest(now time.Time, a, b *signal, cfg *Config, lv *LoadView) {
	sa, ta := a.load()
	sb, tb := b.load()
	if tb > ta || sa.Has == 0 {
		sa, ta, sb, tb = sb, tb, sa, ta
	}
	if sa.Has == 0 {
		return
	}
	age := max(now.Sub(time.Unix(0, ta)), 0)
	lv.Has, lv.Waiting, lv.Running, lv.KVUsage = sa.Has, sa.Waiting, sa.Running, sa.KVUsage
	lv.OwnAtSignal = sa.Own
	lv.SignalAge = age
	lv.SignalWeight = signalWeight(age, cfg.SignalFresh, cfg.SignalMaxAge)
	if sb.Has&^sa.Has == 0 || now.Sub(time.Unix(0, tb)) >= cfg.SignalMaxAge {
		return
	}
	if sb.Has&HasWaiting != 0 && lv.Has&HasWaiting == 0 {
		lv.Waiting, lv.OwnAtSignal = sb.Waiting, sb.Own
	}
	if sb.Has&HasRunning != 0 && lv.Has&HasRunning == 0 {
		lv.Running = sb.Running
	}
	if sb.Has&HasKVCacheUsage != 0 && lv.Has&HasKVCacheUsage == 0 {
		lv.KVUsage = sb.KVUsage
	}
	lv.Has |= sb.Has
}

// noteLoad stores a load report from one of b's sources (src) and gives
// its KV usage, the share of the cache running requests hold, to b's cache
// belief (BeliefConfig.PinnedEdge).
func (b *backend) noteLoad(src *signal, s sample, at time.Time) {
	src.store(s, at)
	if s.Has&HasKVCacheUsage != 0 {
		b.belief.notePinned(s.KVUsage, at.UnixMilli())
	}
}

// signalWeight is 1 up to fresh, then falls linearly to 0 at maxAge.
func signalWeight(age, fresh, maxAge time.Duration) float64 {
	switch {
	case age <= fresh:
		return 1
	case age >= maxAge:
		return 0
	}
	return float64(maxAge-age) / float64(maxAge-fresh)
}

// observeORCA records the load report a backend attached to a response, if
// any. It reports whether one was found and parsed.
//
// The report is taken as the answer starts, while the requesting attempt
// still counts as pending: Own includes it, which errs towards counting
// fewer of the waiting requests as coming from outside the mesh.
func (rt *Router) observeORCA(b *backend, h http.Header, at time.Time) bool {
	vals := h[orcaResponseHeader]
	bin := false
	if len(vals) == 0 {
		if vals = h[orcaResponseBin]; len(vals) == 0 {
			return false
		}
		bin = true
	}
	var s sample
	lim := &rt.cfg.BackendLimits
	for i, v := range vals {
		if i == lim.ORCAHeaderValues {
			break
		}
		var r LoadReport
		var err error
		if bin {
			r, err = parseORCABin(v, lim.ORCAValueBytes)
		} else {
			r, err = parseORCA(v, lim.ORCAValueBytes)
		}
		if err != nil {
			return rt.badORCA(b, err)
		}
		// Repeated headers (one per data-parallel engine): counts add up,
		// usage takes the busiest engine, as ParseORCA does within one value.
		s.Waiting += r.Waiting
		s.Running += r.Running
		s.KVUsage = max(s.KVUsage, r.KVCacheUsage)
		s.Has |= r.Has
	}
	// Each value is bounded, their sum too: the same bound as within one.
	if err := checkTotal("orca: headers: ", orcaWaiting, s.Waiting); err != nil {
		return rt.badORCA(b, err)
	}
	if err := checkTotal("orca: headers: ", orcaRunning, s.Running); err != nil {
		return rt.badORCA(b, err)
	}
	if s.Has&(HasWaiting|HasRunning|HasKVCacheUsage) == 0 {
		return false
	}
	s.Own = rt.meshPending(b)
	b.noteLoad(&b.orca, s, at)
	return true
}

// badORCA counts and logs a load report that did not parse; it returns false.
func (rt *Router) badORCA(b *backend, err error) bool {
	rt.metrics.errors[errSignalParse].Inc()
	rt.log.Debug().Str("backend", b.name).Err(err).Msg("bad ORCA load report")
	return false
}
