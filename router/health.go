package router

import (
	"context"
	"io"
	"net/http"
	"time"

	"github.com/kvmesh/kvmesh/tree"
)

// healthState is a backend's health bookkeeping, guarded by backend.mu.
//
// The rules:
//   - Any failure (connection error, 5xx answer, response timeout, failed
//     probe) adds to a run of consecutive failures; any success of a
//     backend in rotation ends it.
//   - EjectAfter consecutive failures eject the backend: it stops being a
//     candidate. A run ended by an answer (5xx, header timeout, broken
//     stream), which a client's requests can cause anywhere, ejects it
//     only while fewer than MaxEjectedShare of the listed backends are
//     ejected, for any reason (at least one, when none is); one ended by a refused
//     connection or a failed probe ejects it past that cap.
//   - A backend that has never answered (just listed, or at start) is
//     ejected by its first failed probe: it starts in rotation on trust,
//     and one failed probe ends the trust (a dead backend
//     listed at start otherwise took requests, and kept /readyz ready, for
//     EjectAfter probes). Its first successful probe admits it at once.
//   - An ejected backend is re-admitted by the first successful probe at
//     least EjectionTime after its ejection (or, with probes disabled, once
//     EjectionTime has passed).
//   - An ejected backend that had been failing for at least ColdAfter when
//     it first answered again is treated as restarted with a cold cache: its
//     claims are invalidated everywhere through Learner.Invalidate, at once
//     (before re-admission, so other nodes stop matching them too).
type healthState struct {
	fails       int       // consecutive failures
	downSince   time.Time // first failure of the current run; zero when none
	ejectedAt   time.Time // zero while in rotation
	answered    bool      // an ejected backend answered since downSince: its down time is known
	lastError   string
	lastErrorAt time.Time
	lastProbeAt time.Time
	lastProbeOK bool
	everOK      bool // answered once (a request or a probe)
	ejections   int
	coldReturns int // times the backend came back cold (claims invalidated)
	// coldAt is when this node last counted a cold return (coldCache):
	// the probe and the scrape may both see the same restart.
	coldAt time.Time
	// Last scraped prefix-cache counters (tokens): the backend's own hit
	// rate, and a restart detector (they only go backwards on a restart).
	prefixQueries, prefixHits float64
	prefixAt                  time.Time // when the scrape of prefixQueries was sent
}

// markSuccess records an answer from b (a request's or a probe's). Only a
// probe re-admits an ejected backend (requests are not sent to it) or
// decides that it came back cold.
func (rt *Router) markSuccess(b *backend, probe bool) {
	now := rt.now()
	b.mu.Lock()
	h := &b.health
	if probe {
		h.lastProbeAt, h.lastProbeOK = now, true
	}
	first := !h.everOK
	h.everOK = true
	if h.fails == 0 && h.ejectedAt.IsZero() {
		b.mu.Unlock()
		return
	}
	if h.ejectedAt.IsZero() { // a blip: the run ends, the cache is warm
		h.fails, h.downSince = 0, time.Time{}
		b.mu.Unlock()
		return
	}
	if !probe {
		// A request sent before the ejection finished well: it says nothing
		// about whether the backend restarted since.
		b.mu.Unlock()
		return
	}
	cold, downSince := false, h.downSince
	if !h.answered {
		h.answered = true
		cold = now.Sub(h.downSince) >= rt.cfg.ColdAfter
	}
	readmit := probe && (first || now.Sub(h.ejectedAt) >= rt.cfg.EjectionTime)
	if readmit {
		h.ejectedAt, h.fails, h.downSince, h.answered = time.Time{}, 0, time.Time{}, false
		if !cold {
			b.healthy.Store(true)
		}
	}
	b.mu.Unlock()
	if cold {
		// Its claims go before it takes requests again: a request routed
		// to it in between would trust prefixes its restart dropped.
		if rt.coldCache(b, downSince) {
			rt.log.Info().Str("backend", b.name).Msg("backend answers again after being down: claims invalidated (cold cache)")
		}
		if readmit {
			b.mu.Lock()
			readmit = h.ejectedAt.IsZero() // not ejected again meanwhile
			if readmit {
				b.healthy.Store(true)
			}
			b.mu.Unlock()
		}
	}
	if readmit {
		rt.admissionChanged()
		rt.log.Info().Str("backend", b.name).Msg("backend re-admitted")
	}
}

// markFailure records a failure of kind on b and ejects it once the run of
// consecutive failures reaches EjectAfter.
func (rt *Router) markFailure(b *backend, kind errKind, probe bool, err string) {
	now := rt.now()
	b.mu.Lock()
	h := &b.health
	if probe {
		h.lastProbeAt, h.lastProbeOK = now, false
	}
	h.fails++
	if h.downSince.IsZero() || h.answered { // a new down period starts
		h.downSince, h.answered = now, false
	}
	h.lastError, h.lastErrorAt = errKindNames[kind]+": "+err, now
	// Never answered: a failed probe ends the trust it started with.
	untried := !h.everOK && kind == errProbe
	eject, capped := h.ejectedAt.IsZero() && (h.fails >= rt.cfg.EjectAfter || untried), false
	if eject {
		rt.ejectMu.Lock()
		if eject = kind == errProbe || kind == errBackendConnect || rt.mayEject(); eject {
			h.ejectedAt = now
			h.ejections++
			b.healthy.Store(false)
		}
		rt.ejectMu.Unlock()
		capped = !eject
	}
	fails := h.fails
	b.mu.Unlock()
	if eject {
		b.ejections.Inc()
		rt.log.Warn().Str("backend", b.name).Int("failures", fails).Str("last_error", err).Msg("backend ejected")
	}
	if capped && fails == rt.cfg.EjectAfter { // once per run of failures
		rt.metrics.ejectionsCapped.Inc()
		rt.log.Warn().Str("backend", b.name).Int("failures", fails).Str("last_error", err).
			Float64("max_ejected_share", rt.cfg.MaxEjectedShare).Msg("backend not ejected: as many backends as max_ejected_share allows are out already")
	}
}

// mayEject says whether one more backend may be ejected by its answers:
// fewer than MaxEjectedShare of the listed backends (at least one) are
// ejected, for any reason (with half the fleet down, the rest stays in
// rotation whatever it answers). Called under ejectMu, which makes the
// count and the ejection one step.
func (rt *Router) mayEject() bool {
	if rt.cfg.MaxEjectedShare >= 1 {
		return true
	}
	listed := rt.set.Load().listed
	ejected := 0
	for _, b := range listed {
		if !b.healthy.Load() {
			ejected++
		}
	}
	return ejected < max(1, int(rt.cfg.MaxEjectedShare*float64(len(listed))))
}

// readmitDue re-admits b if it is ejected and EjectionTime has passed; it
// is the re-admission rule when probes are disabled.
func (rt *Router) readmitDue(b *backend) {
	now := rt.now()
	b.mu.Lock()
	h := &b.health
	due := !h.ejectedAt.IsZero() && now.Sub(h.ejectedAt) >= rt.cfg.EjectionTime
	if due {
		h.ejectedAt, h.fails, h.downSince, h.answered = time.Time{}, 0, time.Time{}, false
		b.healthy.Store(true)
	}
	b.mu.Unlock()
	if due {
		rt.admissionChanged()
		rt.log.Info().Str("backend", b.name).Msg("backend re-admitted after the ejection time (probes disabled)")
	}
}

// probe sends one active health check to b and records its outcome.
func (rt *Router) probe(parent context.Context, b *backend) {
	ctx, cancel := context.WithTimeout(parent, rt.cfg.ProbeTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.base+rt.cfg.ProbePath, nil)
	if err != nil {
		rt.markFailure(b, errProbe, true, err.Error())
		return
	}
	resp, err := rt.client.Do(req)
	if err != nil {
		if parent.Err() != nil {
			return // the router is closing
		}
		rt.metrics.errors[errProbe].Inc()
		rt.markFailure(b, errProbe, true, err.Error())
		return
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		rt.metrics.errors[errProbe].Inc()
		rt.markFailure(b, errProbe, true, "probe answered "+resp.Status)
		return
	}
	rt.markSuccess(b, true)
}

// coldCache records that b came back with an empty cache (restarted) some
// time after since (this node's first sight of it down, or its last scrape
// before the restart): its claims are invalidated everywhere, and its
// cache is counted as empty again (the kvmesh policy's cache weight counts
// only what fills it). It reports whether it invalidated.
//
// One restart is seen several times: by this node's probe and by its
// scrape, and by every node of a mesh. A generation started after since
// (by this node or a peer) already ended the claims from before the
// restart: starting another would end the claims learned since, on the
// backend that came back, so the first sight invalidates and the others
// only count the cache empty here (once per restart on each node).
func (rt *Router) coldCache(b *backend, since time.Time) bool {
	// Under setMu, and only for a backend still listed: a probe or a scrape
	// of a backend that was removed (or moved to another URL) meanwhile must
	// not start a new, active generation of it in the registry, mesh-wide.
	// A probe of an object replaced meanwhile on the same URL (its settings
	// changed, not its server) saw the server restart: the current object
	// takes it.
	rt.setMu.Lock()
	defer rt.setMu.Unlock()
	m := rt.members[b.name]
	if m == nil || m.state == memberRemoving || (m.b != b && m.b.base != b.base) {
		return false
	}
	b = m.b
	invalidate := true
	if e, ok := rt.ix.Backend(b.id); ok && e.Name == b.name && e.State == tree.BackendActive && e.Time != 0 && e.Time.Millis() >= since.UnixMilli() {
		invalidate = false
	}
	if invalidate {
		rt.learner.Invalidate(b.name, false)
		b.invalidated.Inc()
	}
	now := rt.now()
	b.mu.Lock()
	counted := b.health.coldAt.After(since)
	if !counted {
		b.health.coldAt = now
		b.health.coldReturns++
	}
	b.mu.Unlock()
	if !counted {
		b.belief.restarted(rt.meshWritten(b))
	}
	if !invalidate {
		rt.log.Debug().Str("backend", b.name).Msg("backend came back cold: a generation started since it went down already invalidated its claims")
	}
	return invalidate
}
