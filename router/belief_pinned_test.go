package router

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvmesh/kvmesh/tree"
)

// With PinnedEdge, a claim stamped while running requests held half the
// cache is past the edge after half a capacity of writes; one stamped
// while nothing was pinned after a whole capacity. Without it, both after
// a whole capacity: the KV usage is ignored.
func TestPinnedEdgeCountsWhatWasPinned(t *testing.T) {
	run := func(pinnedEdge bool) (distHalf, distIdle float64, since int64) {
		var cb cacheBelief
		cb.init()
		cb.capTokens.Store(1000) // 4,000 units at 4 units per token
		const upt = 4
		w := 0.0
		for ms := int64(1); ms <= 100; ms++ { // 100 units written per ms
			// Half the cache pinned from ms 21 to 40, nothing otherwise.
			share := 0.0
			if ms > 20 && ms <= 40 {
				share = 0.5
			}
			cb.notePinned(share, ms)
			w += 100
			pinned := 0.0
			if pinnedEdge {
				pinned = cb.pinnedUnits(ms, upt)
			}
			cb.refresh(ms, w, pinned, upt, 1, 0)
		}
		return cb.distance(30), cb.distance(70), tree.Timestamp(cb.since.Load()).Millis()
	}
	half, idle, since := run(true)
	// 10,000 written by ms 100: 7,000 since ms 30, plus the 2,000 pinned then.
	if half < 8900 || half > 9100 {
		t.Fatalf("pinned edge: distance of a claim stamped half pinned %v, want about 9,000", half)
	}
	if idle < 2900 || idle > 3100 {
		t.Fatalf("pinned edge: distance of a claim stamped idle %v, want about 3,000", idle)
	}
	// The edge (4,000 units) is about ms 60 by the writes; a claim stamped
	// at ms 40 while half was pinned is 8,000 units away, and the bound
	// covers every claim up to the last pinned sample (every older sample's
	// distance is past the edge too).
	if since < 55 || since > 61 {
		t.Fatalf("pinned edge: bound at ms %d, want about 60", since)
	}
	half, idle, since = run(false)
	if half < 6900 || half > 7100 || idle < 2900 || idle > 3100 {
		t.Fatalf("off: distances %v and %v, want about 7,000 and 3,000", half, idle)
	}
	if since < 55 || since > 61 {
		t.Fatalf("off: bound at ms %d, want about 60", since)
	}
}

// With PinnedEdge, the bound stops at the newest sample every older one of
// which is past the edge: while the pinned share has risen since (a
// sample's own distance grows), claims stamped in between are still
// priced by their own distance. The claim stamped at the peak is past the
// edge by its distance though the bound is before it.
func TestPinnedEdgeBoundIsMonotone(t *testing.T) {
	var cb cacheBelief
	cb.init()
	cb.capTokens.Store(1000)
	const upt = 4
	w := 0.0
	for ms := int64(1); ms <= 100; ms++ {
		share := 0.0
		if ms == 80 {
			share = 0.9 // a brief peak: 3,600 units pinned
		}
		cb.notePinned(share, ms)
		w += 100
		cb.refresh(ms, w, cb.pinnedUnits(ms, upt), upt, 1, 0)
	}
	since := tree.Timestamp(cb.since.Load()).Millis()
	if since < 55 || since > 61 {
		t.Fatalf("bound at ms %d, want about 60", since)
	}
	if d := cb.distance(80); d < 5400 || d > 5700 {
		t.Fatalf("distance of the claim stamped at the peak %v, want about 5,600 (2,000 written since, 3,600 pinned then)", d)
	}
	// A stale report (older than pinnedMaxAgeMs) counts as nothing pinned.
	cb.notePinned(0.9, 101)
	if got := cb.pinnedUnits(101+pinnedMaxAgeMs+1, upt); got != 0 {
		t.Fatalf("a stale KV usage report counts %v pinned units, want 0", got)
	}
	if got := cb.pinnedUnits(102, upt); got != 3600 {
		t.Fatalf("pinned units %v, want 3,600", got)
	}
	cb.notePinned(1.5, 103) // not a share: ignored
	if got := cb.pinnedUnits(104, upt); got != 3600 {
		t.Fatalf("an out-of-range report changed the pinned units to %v", got)
	}
}

// belief.pinned_edge through the router: the KV usage a backend reported
// while a claim was stamped (half its cache pinned by running requests)
// counts in the claim's distance, so half a capacity of writes after it
// takes it past the edge; off, or gated off by pinned_edge_max_reuse below
// the share the answers report cached (all of it here), the claim is
// still trusted.
func TestPinnedEdgeThroughTheRouter(t *testing.T) {
	for _, mode := range []struct {
		on       bool
		maxReuse float64
	}{{false, 0}, {true, 0}, {true, 0.5}} {
		t.Run(fmt.Sprintf("pinned_edge=%v,max_reuse=%v", mode.on, mode.maxReuse), func(t *testing.T) {
			on := mode.on && mode.maxReuse == 0
			var usage atomic.Value
			usage.Store("0.6")
			a := newFakeBackend(t, "a")
			// Every answer reports its whole prompt cached (nothing teaches
			// the capacity) and the KV usage the test sets.
			a.setHook(func(w http.ResponseWriter, r *http.Request, body []byte) {
				w.Header().Set("Endpoint-Load-Metrics", "TEXT named_metrics.kv_cache_usage_perc="+usage.Load().(string))
				answerCached(w, body, int64(len(body)/4))
			})
			var clock atomic.Int64
			clock.Store(time.Now().UnixMilli())
			g := newRig(t, func(c *Config, d *Deps) {
				c.Belief.Enabled, c.Belief.DoubtBeyond, c.Belief.DoubtTrust, c.Belief.DoubtLearn = true, 1, 0.5, true
				c.Belief.PinnedEdge, c.Belief.PinnedEdgeMaxReuse = mode.on, mode.maxReuse
				c.Backends[0].KVCapacityTokens = 5000
				d.Now = func() time.Time { return time.UnixMilli(clock.Add(5)) }
			}, a)
			b := g.rt.backendByName("a")
			// A first answer reports 60% of the cache pinned; the claim's
			// request refreshes the history with it.
			g.call("POST", "/v1/chat/completions", chat("m1", longText("warm-up", 2000), "q"))
			if share := math.Float64frombits(b.belief.pinned.Load()); share != 0.6 {
				t.Fatalf("the ORCA report's KV usage is not recorded: %v", share)
			}
			claim := chat("m1", longText("pinned claim", 2000), "question one")
			g.call("POST", "/v1/chat/completions", claim)
			usage.Store("0")
			follow := chat("m1", longText("pinned claim", 2000), "question one", "answer", "question two")
			explain := func() (RouteExplanation, CandidateExplanation) {
				t.Helper()
				_, body := adminCall(t, g, "POST", "/debug/route", follow)
				var x RouteExplanation
				if err := json.Unmarshal(body, &x); err != nil {
					t.Fatal(err)
				}
				return x, x.Candidates[0]
			}
			_, c0 := explain()
			if c0.MatchedUnits == 0 {
				t.Fatal("set-up: the claim is not trusted right after it was learned")
			}
			kappa := math.Float64frombits(b.belief.kappa.Load())
			// Half a capacity of writes after the claim: inside the edge by
			// the writes alone, past it with the 60% pinned when it was
			// stamped.
			start := g.rt.meshWritten(b)
			for i := 0; g.rt.meshWritten(b)-start < 0.5*kappa; i++ {
				if i == 200 {
					t.Fatal("nothing is counted as written")
				}
				g.call("POST", "/v1/chat/completions", chat("m1", fmt.Sprintf("%d %s", i, longText(fmt.Sprint("filler ", i), 800)), "q"))
			}
			if written := g.rt.meshWritten(b) - start; written >= 0.8*kappa {
				t.Fatalf("set-up: wrote %v units after the claim, capacity %v: past the edge either way", written, kappa)
			}
			x, c := explain()
			if !on {
				if c.MatchedUnits != c0.MatchedUnits || x.Reason != "prefix" {
					t.Fatalf("trusted %d units (reason %s), want the whole claim's %d", c.MatchedUnits, x.Reason, c0.MatchedUnits)
				}
				return
			}
			if c.MatchedUnits >= c0.MatchedUnits || x.Reason == "prefix" {
				t.Fatalf("pinned edge: trusted %d units (reason %s), want the claim doubted (it held %d)", c.MatchedUnits, x.Reason, c0.MatchedUnits)
			}
		})
	}
}
