package router

import (
	"fmt"
	"testing"
	"time"

	"github.com/kvmesh/kvmesh/tree"
)

// policyCase builds a policy request by hand: a chain of blocks keys and
// candidates with given matched depths and in-flight counts.
type policyCase struct {
	req    Request
	chain  tree.Chain
	cands  []Candidate
	scores []float64
}

func newPolicyCase(blocks int, keySalt uint64, names ...string) *policyCase {
	pc := &policyCase{}
	pc.chain.UnitsPerBlock = 64
	pc.chain.Units = blocks*64 + 10
	for i := 0; i < blocks; i++ {
		pc.chain.Keys = append(pc.chain.Keys, tree.Key(mix64(keySalt*1000+uint64(i)+1)))
	}
	for i, n := range names {
		pc.cands = append(pc.cands, Candidate{Name: n, Slot: i, ID: tree.BackendID(i), Hash: stableHash(n), Weight: 1,
			Load: LoadView{SignalWeight: 1}})
	}
	pc.scores = make([]float64, len(names))
	pc.req = Request{Model: "m", Chain: &pc.chain, Seed: 1, Now: time.Unix(1_700_000_000, 0), scratch: make([]float64, 2*len(names))}
	return pc
}

func (pc *policyCase) match(depths ...int32) *policyCase {
	pc.req.Deepest = 0
	for i, d := range depths {
		pc.cands[i].Matched = d
		pc.req.Deepest = max(pc.req.Deepest, d)
	}
	return pc
}

func (pc *policyCase) inflight(n ...int) *policyCase {
	for i, f := range n {
		pc.cands[i].Load.InFlight = f
	}
	return pc
}

// pending sets each candidate's pending prefill (units), one request each
// where non-zero.
func (pc *policyCase) pending(units ...float64) *policyCase {
	for i, u := range units {
		pc.cands[i].Load.PendingPrefill = u
		pc.cands[i].Load.PendingRequests = 0
		if u > 0 {
			pc.cands[i].Load.PendingRequests = 1
		}
		pc.cands[i].Load.InFlight = max(pc.cands[i].Load.InFlight, pc.cands[i].Load.PendingRequests)
	}
	return pc
}

func (pc *policyCase) choose(p Policy) (string, Decision) {
	d := p.Choose(&pc.req, pc.cands, pc.scores)
	return pc.cands[d.Index].Name, d
}

func TestRoundRobinRotates(t *testing.T) {
	p := new(roundRobinPolicy)
	pc := newPolicyCase(2, 1, "a", "b", "c")
	var got string
	for i := 0; i < 6; i++ {
		n, d := pc.choose(p)
		if d.Reason != ReasonRoundRobin {
			t.Fatal(d.Reason)
		}
		got += n
	}
	if got != "abcabc" {
		t.Fatalf("order %s", got)
	}
	pc.req.Explain = true
	pc.choose(p)
	pc.req.Explain = false
	if n, _ := pc.choose(p); n != "a" {
		t.Fatalf("an explained decision advanced the rotation: got %s", n)
	}
}

func TestRandomSpreads(t *testing.T) {
	pc := newPolicyCase(2, 1, "a", "b")
	counts := map[string]int{}
	for i := 0; i < 400; i++ {
		n, _ := pc.choose(randomPolicy{})
		counts[n]++
	}
	if counts["a"] < 100 || counts["b"] < 100 {
		t.Fatalf("counts %v", counts)
	}
}

func TestLeastLoaded(t *testing.T) {
	p := new(leastLoadedPolicy)
	pc := newPolicyCase(2, 1, "a", "b", "c").inflight(5, 0, 2)
	if n, d := pc.choose(p); n != "b" || d.Reason != ReasonLeastLoaded {
		t.Fatalf("chose %s", n)
	}
	pc.inflight(1, 1, 1)
	pc.cands[0].Load.Waiting = 3
	seen := map[string]int{}
	for i := 0; i < 4; i++ {
		n, _ := pc.choose(p)
		seen[n]++
	}
	if seen["a"] != 0 || seen["b"] != 2 || seen["c"] != 2 {
		t.Fatalf("ties should rotate among b and c (a has a queue): %v", seen)
	}
}

func TestConsistentHashBoundedLoads(t *testing.T) {
	p := newConsistentHashPolicy(DefaultConsistentHashConfig())
	names := []string{"a", "b", "c", "d"}
	choose := func(text string, loads ...int) string {
		pc := newPolicyCase(2, 1, names...).inflight(loads...)
		pc.req.Prompt = &Prompt{Units: []byte(text)}
		n, d := pc.choose(p)
		if d.Reason != ReasonHash {
			t.Fatal(d.Reason)
		}
		return n
	}
	base := longText("shared opening of a hundred characters or more, identical for every request", 100)
	first := choose(base + " tail one")
	if got := choose(base + " a completely different tail"); got != first {
		t.Fatalf("prompts sharing their first 100 characters went to %s and %s", first, got)
	}
	spread := map[string]bool{}
	for i := 0; i < 64; i++ {
		spread[choose(fmt.Sprintf("%03d %s", i, base))] = true
	}
	if len(spread) < 3 {
		t.Errorf("different prefixes used only %v", spread)
	}
	// The chosen backend at its bound: the request walks on.
	loads := []int{0, 0, 0, 0}
	for i, n := range names {
		if n == first {
			loads[i] = 3 // ceil(1.25*(3+1)/4) = 2 < 3+1
		}
	}
	if got := choose(base+" tail one", loads...); got == first {
		t.Fatalf("overloaded %s still chosen", first)
	}
}

func TestSGLangCacheAware(t *testing.T) {
	cfg := DefaultSGLangConfig()
	cfg.TreeCapacity = 1 << 12
	p, err := newSGLangPolicy(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	pc := newPolicyCase(20, 5, "a", "b", "c").inflight(3, 1, 2)
	if n, d := pc.choose(p); n != "b" || d.Reason != ReasonMiss {
		t.Fatalf("cold tree: chose %s %v, want b (every tree empty, least loaded first)", n, d.Reason)
	}
	// b now holds the prompt in the private tree: a repeat goes to b even
	// when b is not the least loaded.
	pc.inflight(0, 5, 0)
	if n, d := pc.choose(p); n != "b" || d.Reason != ReasonPrefix || pc.scores[1] < 0.9 {
		t.Fatalf("repeat: chose %s %v scores %v, want b by prefix", n, d.Reason, pc.scores)
	} else if !d.OwnMatch || d.Matched != 20*64 || routedUnits(&pc.cands[1], &pc.chain, d) != 20*64 {
		// Its match is its private tree's (the shared claims say nothing
		// here), and that is what x-kvmesh-route reports.
		t.Fatalf("repeat: own match %v of %d units, routed on %d; want the private tree's 1280", d.OwnMatch, d.Matched, routedUnits(&pc.cands[1], &pc.chain, d))
	}
	// Imbalanced: max-min > 64 and max > 1.5*min: least loaded wins.
	pc.inflight(100, 100, 10)
	if n, d := pc.choose(p); n != "c" || d.Reason != ReasonImbalance {
		t.Fatalf("imbalanced: chose %s %v", n, d.Reason)
	}
	// A prompt sharing less than 30% with anything goes to the smallest
	// tree (a holds nothing), even when it is the busiest.
	other := newPolicyCase(20, 6, "a", "b", "c").inflight(6, 4, 4)
	copy(other.chain.Keys[:5], pc.chain.Keys[:5]) // 25% shared with b's and c's
	if n, d := other.choose(p); n != "a" || d.Reason != ReasonMiss {
		t.Fatalf("low match: chose %s %v", n, d.Reason)
	}
}

func TestPolicyTable(t *testing.T) {
	cfg := DefaultConfig()
	cfg.SGLang.TreeCapacity = 1 << 12
	for _, name := range PolicyNames() {
		p, err := NewPolicy(name, cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		if p.Name() != name {
			t.Errorf("NewPolicy(%q).Name() = %q", name, p.Name())
		}
	}
	if _, err := NewPolicy("nope", cfg, nil); err == nil {
		t.Error("unknown policy accepted")
	}
}
