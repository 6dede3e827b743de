package router

import (
	"fmt"
	"math"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/kvmesh/kvmesh/tree"
)

// The history records what was pinned with each sample: a claim stamped
// while running requests held half the cache sees that half beside what
// was written since; one stamped while nothing was pinned sees nothing.
// The lookup's bound counts writes only (the router checks the pinned
// part claim by claim).
func TestPinnedHistory(t *testing.T) {
	var cb cacheBelief
	cb.init()
	cb.capTokens.Store(1000) // 4,000 units at 4 units per token
	const upt = 4
	w := 0.0
	for ms := int64(1); ms <= 100; ms++ { // 100 units written per ms
		// Half the cache pinned from ms 21 to 40, 90% at ms 80, nothing
		// otherwise.
		share := 0.0
		switch {
		case ms > 20 && ms <= 40:
			share = 0.5
		case ms == 80:
			share = 0.9
		}
		cb.notePinned(share, ms)
		w += 100
		cb.refresh(ms, w, cb.pinnedUnits(ms, upt), upt, 1, 0)
	}
	for _, c := range []struct {
		ms              int64
		written, pinned float64
	}{{30, 7000, 2000}, {70, 3000, 0}, {80, 2000, 3600}} {
		written, pinned := cb.writtenSince(c.ms)
		if math.Abs(written-c.written) > 100 || pinned != c.pinned {
			t.Errorf("claim stamped at ms %d: written since %v, pinned then %v; want about %v and %v", c.ms, written, pinned, c.written, c.pinned)
		}
		if d := cb.distance(c.ms); d != written {
			t.Errorf("distance(%d) = %v, want the writes alone (%v)", c.ms, d, written)
		}
	}
	// 10,000 written by ms 100: the edge (4,000 ago) is about ms 60, by the
	// writes alone.
	if since := tree.Timestamp(cb.since.Load()).Millis(); since < 55 || since > 61 {
		t.Fatalf("bound at ms %d, want about 60", since)
	}
	// A stale report (older than pinnedMaxAgeMs) counts as nothing pinned;
	// a value that is not a share is ignored.
	cb.notePinned(0.9, 101)
	if got := cb.pinnedUnits(101+pinnedMaxAgeMs+1, upt); got != 0 {
		t.Fatalf("a stale KV usage report counts %v pinned units, want 0", got)
	}
	if got := cb.pinnedUnits(102, upt); got != 3600 {
		t.Fatalf("pinned units %v, want 3,600", got)
	}
	cb.notePinned(1.5, 103)
	if got := cb.pinnedUnits(104, upt); got != 3600 {
		t.Fatalf("an out-of-range report changed the pinned units to %v", got)
	}
	// Without PinnedEdge the router passes nothing pinned: the history has
	// none to report.
	var off cacheBelief
	off.init()
	off.capTokens.Store(1000)
	off.notePinned(0.5, 1)
	off.refresh(1, 100, 0, upt, 1, 0)
	off.refresh(2, 200, 0, upt, 1, 0)
	if _, pinned := off.writtenSince(1); pinned != 0 {
		t.Fatalf("off: %v units pinned", pinned)
	}
}

// belief.pinned_edge through the router: the KV usage a backend reported
// while a claim was stamped (80% of its cache pinned by running requests,
// the claim's own blocks among them) counts in the claim's reach, less the
// claim's own units, so half a capacity of writes after it takes it past
// the edge; off, or gated off by pinned_edge_max_reuse below the share the
// answers report cached (all of it here), the claim is still trusted.
func TestPinnedEdgeThroughTheRouter(t *testing.T) {
	for _, mode := range []struct {
		on       bool
		maxReuse float64
	}{{false, 0}, {true, 0}, {true, 0.5}} {
		t.Run(fmt.Sprintf("pinned_edge=%v,max_reuse=%v", mode.on, mode.maxReuse), func(t *testing.T) {
			on := mode.on && mode.maxReuse == 0
			var usage atomic.Value
			usage.Store("0.8")
			a := newFakeBackend(t, "a")
			// Every answer reports its whole prompt cached (nothing teaches
			// the capacity) and the KV usage the test sets.
			a.setHook(func(w http.ResponseWriter, r *http.Request, body []byte) {
				w.Header().Set("Endpoint-Load-Metrics", "TEXT named_metrics.kv_cache_usage_perc="+usage.Load().(string))
				answerCached(w, body, int64(len(body)/4))
			})
			g, b, _ := newEdgeRig(t, a, func(c *BeliefConfig) { c.PinnedEdge, c.PinnedEdgeMaxReuse = mode.on, mode.maxReuse })
			// A first answer reports 80% of the cache pinned; the claim's
			// request refreshes the history with it.
			g.call("POST", "/v1/chat/completions", chat("m1", longText("warm-up", 2000), "q"))
			if share := math.Float64frombits(b.belief.pinned.Load()); share != 0.8 {
				t.Fatalf("the ORCA report's KV usage is not recorded: %v", share)
			}
			claim := chat("m1", longText("pinned claim", 2000), "question one")
			g.call("POST", "/v1/chat/completions", claim)
			usage.Store("0")
			follow := chat("m1", longText("pinned claim", 2000), "question one", "answer", "question two")
			explain := func() (RouteExplanation, CandidateExplanation) { return explainRoute(t, g, follow) }
			_, c0 := explain()
			if c0.MatchedUnits == 0 {
				t.Fatal("set-up: the claim is not trusted right after it was learned")
			}
			kappa := math.Float64frombits(b.belief.kappa.Load())
			// Half a capacity of writes after the claim: inside the edge by
			// the writes alone, past it with the 80% pinned when it was
			// stamped (less the claim's own tenth).
			if written := writeFillers(t, g, b, 0.5*kappa, 800); written >= 0.8*kappa {
				t.Fatalf("set-up: wrote %v units after the claim, capacity %v: past the edge either way", written, kappa)
			}
			x, c := explain()
			if !on {
				wantWholeClaim(t, x, c, c0)
				return
			}
			if c.MatchedUnits >= c0.MatchedUnits || x.Reason == "prefix" {
				t.Fatalf("pinned edge: trusted %d units (reason %s), want the claim doubted (it held %d)", c.MatchedUnits, x.Reason, c0.MatchedUnits)
			}
		})
	}
}
