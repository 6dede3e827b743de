package bench

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/kvmesh/kvmesh/router"
)

// kvmesh+evict on a mesh of two nodes: a prompt routed through node 0 is
// claimed on its backend on both nodes, keyed by bytes; when that engine
// evicts the prompt's blocks (other prompts sent to it directly fill its
// cache), node 0, which linked the claims, ends them, and node 1 no
// longer matches the prompt there either (the tombstones replicate).
func TestEvictArmEndsClaimsMeshWide(t *testing.T) {
	_, sc := prefixHeavy(t) // 170 blocks of 16 tokens per engine
	cfg := e2eConfig(t, sc, "kvmesh+evict:2:mesh")
	cfg.PreciseFleet = PreciseSimFleet(2, sc)
	d, fleet, done := deployArm(t, &cfg, cfg.PreciseFleet, cfg.Arms[0])
	defer done()

	body := chatBody(words("evictme", 600), "q", 1)
	if code := postJSON(t, d.fronts[0]+"/v1/chat/completions", body); code != 200 {
		t.Fatalf("status %d", code)
	}
	holders := func(node int) (map[string]int, int) { return routeHolders(t, d.fronts[node], body) }
	var owner string
	waitUntil(t, "the prompt's claims on node 1", func() bool {
		h, upb := holders(1)
		if upb != 64 {
			t.Fatalf("node 1 keys the prompt in %d units per block, want bytes (64)", upb)
		}
		for b := range h {
			owner = b
		}
		return len(h) == 1
	})
	waitUntil(t, "node 0 to link the answered prompt", func() bool {
		return gauge(t, d, 0, "kvmesh_router_eviction_links") > 0
	})
	urls := fleet.URLs()
	target := urls[0]
	if owner == BackendName(1) {
		target = urls[1]
	}
	for i := 0; i < 8; i++ { // 8 x ~38 blocks: more than the engine's 170
		if code := postJSON(t, target+"/v1/chat/completions", chatBody(words(fmt.Sprint("flood", i), 600), "q", 1)); code != 200 {
			t.Fatalf("flood %d: status %d", i, code)
		}
	}
	waitUntil(t, "the evicted prompt's claims to end on both nodes", func() bool {
		h0, _ := holders(0)
		h1, _ := holders(1)
		return h0[owner] == 0 && h1[owner] == 0
	})
	if n := gauge(t, d, 0, "kvmesh_router_eviction_link_claims_ended_total"); n == 0 {
		t.Fatal("node 0 ended no claim through its links")
	}
}

// routeHolders asks a router front (POST /debug/route) how many blocks of
// body's prompt each backend's claims hold, and in how many units per
// block it keyed the prompt.
func routeHolders(t *testing.T, front string, body []byte) (map[string]int, int) {
	t.Helper()
	resp, err := http.Post(front+"/debug/route", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var x router.RouteExplanation
	if err := json.NewDecoder(resp.Body).Decode(&x); err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, c := range x.Candidates {
		if c.MatchedBlocks > 0 {
			out[c.Backend] = c.MatchedBlocks
		}
	}
	return out, x.UnitsPerBlock
}

// waitUntil polls cond; the bound is for liveness only.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// gauge is the sum of a metric's values on node i.
func gauge(t *testing.T, d *deployment, i int, name string) float64 {
	t.Helper()
	mfs, err := d.nodes[i].reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var v float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			v += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return v
}
