package router

import (
	"math"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/kvmesh/kvmesh/tree"
)

// One backend's cache model, cacheBelief: what the mesh wrote to it and when, its learned capacity, and from those
// how far each of its claims is believed. What it models and why is on BeliefConfig (belief_config.go).

// beliefRing is how many (time, written) samples a backend keeps. Samples
// are spaced by a 128th of the capacity, so the history covers the last
// four capacities' worth of writes whatever the write rate.
const beliefRing = 512

// writeSample is the mesh's written count for a backend at a time.
type writeSample struct {
	ms int64   // router clock, Unix ms
	w  float64 // units written to the backend, mesh-wide, up to then
	// p is what its running requests held out of the LRU then, in units
	// (BeliefConfig.PinnedEdge; 0 without it).
	p float64
}

// cacheBelief is one backend's cache model: the history of what the mesh
// wrote to it, its capacity estimate and the bound below which its claims
// are no longer believed. refresh and learn hold mu; the request path
// reads the atomics.
type cacheBelief struct {
	mu      sync.Mutex
	ring    [beliefRing]writeSample
	head, n int // next slot, samples held
	// capTokens is the capacity configured or scraped, in tokens (0:
	// unknown); scale is what the answers have taught about it (the
	// effective capacity is scale x capTokens x units per token).
	capTokens atomic.Int64
	scale     float64
	// learned is the capacity in units taught by answers alone, when none
	// is known (0: none yet: every claim is believed).
	learned float64

	// coldAt is the written count (float64 bits) when the backend last came
	// back with an empty cache (restarted): unfilled counts from it.
	coldAt atomic.Uint64

	updated atomic.Int64  // ms of the last refresh
	kappa   atomic.Uint64 // float64 bits: the effective capacity in units now (0: none)
	since   atomic.Uint64 // tree.Timestamp: claims stamped before it are past the edge
	nowW    atomic.Uint64 // float64 bits: the written count at the last refresh

	// stamp orders this belief's lessons (the capacity and doubt worth
	// learned from answers) against the mesh's: ms of the last lesson
	// learned here or adopted from a peer (0: none).
	stamp atomic.Int64
	own   bool // the lesson was learned here, not adopted (under mu)

	confirmed, refuted atomic.Uint64 // prefix routes the answers confirmed or not
	doubt              atomic.Uint64 // float64 bits: the learned worth of doubted claims (0: none yet)
	doubtN             atomic.Uint64 // answers learnDoubt has taken in
	// nearSince is the bound for claims near the edge (BeliefConfig.DoubtNear,
	// a tree.Timestamp like since).
	nearSince atomic.Uint64
	// curve is doubt for each range of distance past the edge
	// (BeliefConfig.DoubtCurve, doubtBounds); pool is the fleet's curve,
	// which replaces it with BeliefConfig.DoubtPool (set by the Router).
	curve doubtCurve
	pool  *doubtCurve

	// pinned is the share of the cache the backend's running requests
	// held at its last load report (float64 bits), pinnedAt that report's
	// Unix ms (0: none).
	pinned   atomic.Uint64
	pinnedAt atomic.Int64
}

// notePinned records a load report's KV usage: the share of the cache
// running requests held out of the LRU at ms.
func (cb *cacheBelief) notePinned(share float64, ms int64) {
	if !(share >= 0 && share <= 1) {
		return
	}
	cb.pinned.Store(math.Float64bits(share))
	cb.pinnedAt.Store(ms)
}

// pinnedMaxAgeMs: a KV usage report older than this no longer counts as
// what is pinned now (a backend that stopped reporting). 10 s: a request's
// lifetime on the engines kvmesh serves, many scrape intervals.
const pinnedMaxAgeMs = 10_000

// pinnedUnits is what running requests hold out of the LRU at nowMs, in
// units, by the last load report (0 without a capacity or a recent
// report).
func (cb *cacheBelief) pinnedUnits(nowMs int64, upt float64) float64 {
	c := cb.capTokens.Load()
	at := cb.pinnedAt.Load()
	if c <= 0 || at == 0 || nowMs-at > pinnedMaxAgeMs {
		return 0
	}
	return math.Float64frombits(cb.pinned.Load()) * float64(c) * upt
}

// capacities is d units in capacities as of the last refresh (0 when the
// capacity is unknown).
func (cb *cacheBelief) capacities(d float64) float64 {
	kappa := math.Float64frombits(cb.kappa.Load())
	if !(kappa > 0) {
		return 0
	}
	return d / kappa
}

func (cb *cacheBelief) init() { cb.scale = 1 }

// capacity is the effective capacity in units (0: unknown), given the
// router's units-per-token estimate. Caller holds mu.
func (cb *cacheBelief) capacity(upt float64) float64 {
	if c := cb.capTokens.Load(); c > 0 {
		return cb.scale * float64(c) * upt
	}
	return cb.learned
}

// refresh records the written count w at nowMs, with pinned the units
// running requests hold out of the LRU then (BeliefConfig.PinnedEdge; 0:
// not counted), and recomputes the bounds
// (claims with more than ignore capacities written after them are past
// the edge, with more than near capacities far past it; 0: no such
// bound). It is cheap to call on every request: within a
// millisecond of the last refresh it does nothing, and another caller
// refreshing skips it.
func (cb *cacheBelief) refresh(nowMs int64, w, pinned, upt, ignore, near float64) {
	if cb.updated.Load() == nowMs {
		return
	}
	cb.afterBooking(nowMs, w, pinned, upt, ignore, near)
}

// afterBooking is refresh within the millisecond of the last one too: called
// after a dispatch has added its prompt to the written count, it records
// the count with the prompt in it, so that the history has a sample
// between the dispatch and the claims' stamps and a claim's distance
// does not count the units of its own request (BeliefConfig.DepthEdge
// adds them itself). Another caller refreshing skips it.
func (cb *cacheBelief) afterBooking(nowMs int64, w, pinned, upt, ignore, near float64) {
	if !cb.mu.TryLock() {
		return
	}
	defer cb.mu.Unlock()
	cb.updated.Store(nowMs)
	kappa := cb.capacity(upt)
	cb.kappa.Store(math.Float64bits(kappa))
	if cb.n > 0 {
		last := cb.at(cb.n - 1)
		w = max(w, last.w) // the mesh's count never goes back (a peer's late snapshot)
		spacing := 65536.0
		if kappa > 0 {
			spacing = kappa / 128
		}
		if w-last.w >= spacing || nowMs-last.ms >= 1000 {
			cb.push(writeSample{ms: nowMs, w: w, p: pinned})
		}
	} else {
		cb.push(writeSample{ms: nowMs, w: w, p: pinned})
	}
	cb.nowW.Store(math.Float64bits(w))
	// The newest sample with at least ignore x kappa written after it: a
	// claim stamped before it has been pushed out of the LRU since.
	cb.since.Store(uint64(cb.boundLocked(w, kappa, ignore)))
	cb.nearSince.Store(uint64(cb.boundLocked(w, kappa, near)))
}

// boundLocked is the stamp before which claims have had more than k
// capacities (kappa) written after them, as of the count w (0: none, k
// or kappa 0, or the history does not reach back that far). It counts
// writes only: with PinnedEdge a claim's reach also counts what was
// pinned when it was stamped, which rises and falls, so a claim after the
// bound can be past the edge too; the router checks the trusted one claim
// by claim (cutAtEdge). Caller holds mu.
func (cb *cacheBelief) boundLocked(w, kappa, k float64) tree.Timestamp {
	if kappa > 0 && k > 0 {
		if i := cb.lastBefore(w - k*kappa); i >= 0 {
			return tree.MakeTimestamp(cb.at(i).ms, 0)
		}
	}
	return 0
}

func (cb *cacheBelief) push(s writeSample) {
	cb.ring[cb.head] = s
	cb.head = (cb.head + 1) % beliefRing
	cb.n = min(cb.n+1, beliefRing)
}

// at returns the i-th sample, oldest first.
func (cb *cacheBelief) at(i int) writeSample {
	return cb.ring[(cb.head-cb.n+i+2*beliefRing)%beliefRing]
}

// lastBefore is the index of the newest sample whose count is at most w,
// -1 when none is.
func (cb *cacheBelief) lastBefore(w float64) int {
	return sort.Search(cb.n, func(i int) bool { return cb.at(i).w > w }) - 1
}

// distance is how many units the mesh has written to the backend since
// time ms, by the history (as of the last refresh); for a time older than
// the history, what the history spans, a lower bound. Caller holds mu.
func (cb *cacheBelief) distanceLocked(ms int64) float64 {
	w, _ := cb.writtenSinceLocked(ms)
	return w
}

// writtenSinceLocked is distanceLocked(ms) and what running requests held out of
// the backend's LRU at ms (the pinned units of the sample at or before
// it, 0 without PinnedEdge). Caller holds mu.
func (cb *cacheBelief) writtenSinceLocked(ms int64) (written, pinned float64) {
	if cb.n == 0 {
		return 0, 0
	}
	now := math.Float64frombits(cb.nowW.Load())
	lo := sort.Search(cb.n, func(i int) bool { return cb.at(i).ms > ms }) // the first sample after ms
	if lo == 0 {
		return now - cb.at(0).w, 0
	}
	s := cb.at(lo - 1)
	return now - s.w, s.p
}

func (cb *cacheBelief) distance(ms int64) float64 {
	cb.mu.Lock()
	defer cb.mu.Unlock()
	return cb.distanceLocked(ms)
}

// writtenSince is writtenSinceLocked under the lock.
func (cb *cacheBelief) writtenSince(ms int64) (written, pinned float64) {
	cb.mu.Lock()
	defer cb.mu.Unlock()
	return cb.writtenSinceLocked(ms)
}

// beyond is distance(ms) in capacities, as of the last refresh (0 when
// the capacity is unknown).
func (cb *cacheBelief) beyond(ms int64) float64 {
	return cb.capacities(cb.distance(ms))
}

// unfilled is the share of the backend's cache nothing has been written
// to yet: 1 - (what the mesh has written to it since it last started
// empty) / (its effective capacity), as of the last refresh; 0 when the
// capacity is unknown or the cache has been filled once (an LRU cache,
// once full, stays full, until the engine restarts).
func (cb *cacheBelief) unfilled() float64 {
	kappa := math.Float64frombits(cb.kappa.Load())
	if !(kappa > 0) {
		return 0
	}
	written := math.Float64frombits(cb.nowW.Load()) - math.Float64frombits(cb.coldAt.Load())
	return min(max(1-written/kappa, 0), 1)
}

// restarted records that the backend came back with an empty cache when
// the mesh had written w units to it: what it holds is counted afresh
// from there (unfilled). The capacity learned stays: the engine is the
// same.
func (cb *cacheBelief) restarted(w float64) {
	cb.coldAt.Store(math.Float64bits(w))
	cb.updated.Store(0) // take the written count at the next request
}

// trust is how much a claim stamped at ms counts: 1 well inside the
// capacity, falling to cfg.EdgeTrust at its edge.
func (cb *cacheBelief) trust(ms int64, cfg *BeliefConfig) float64 {
	kappa := math.Float64frombits(cb.kappa.Load())
	if kappa <= 0 {
		return 1
	}
	x := cb.distance(ms) / kappa
	switch {
	case x <= cfg.EdgeStart:
		return 1
	case x >= 1:
		return cfg.EdgeTrust
	}
	return 1 - (1-cfg.EdgeTrust)*(x-cfg.EdgeStart)/(1-cfg.EdgeStart)
}

// learn moves the capacity estimate towards what an answer showed: a match
// at distance x that the backend still held (held=true) says the capacity
// is at least x; one it no longer held says it is less. It reports
// whether the estimate moved, and stamps the lesson at nowMs if it did
// (unstamped leaves the stamp alone).
func (cb *cacheBelief) learn(x float64, held bool, upt float64, cfg *BeliefConfig, nowMs int64) bool {
	if !(x > 0) {
		return false
	}
	cb.mu.Lock()
	defer cb.mu.Unlock()
	kappa := cb.capacity(upt)
	var target float64
	switch {
	case held && (kappa <= 0 || x <= kappa):
		return false // consistent with the estimate (or none to correct)
	case held:
		target = x * 1.05
	case kappa > 0 && x >= kappa:
		return false // believed already gone; the answer agrees
	default:
		target = x * 0.95
	}
	if kappa <= 0 {
		kappa = target // the first sign of a limit, with nothing known
	} else {
		kappa += cfg.LearnRate * (target - kappa)
	}
	if c := cb.capTokens.Load(); c > 0 {
		cb.scale = min(max(kappa/(float64(c)*upt), 0.02), 50)
	} else {
		cb.learned = kappa
	}
	cb.kappa.Store(math.Float64bits(kappa))
	cb.updated.Store(0) // recompute the bound at the next request
	cb.stampLocked(nowMs)
	return true
}
