package router

// The kvmesh policy's tests: its cost model, load override, hot prefixes,
// ties and spread (policy_test.go builds the cases).

import (
	"math"
	"testing"
)

func TestKVMeshPrefersDeepestHolder(t *testing.T) {
	p := newKVMeshPolicy(DefaultKVMeshConfig())
	pc := newPolicyCase(40, 1, "a", "b", "c").match(10, 35, 0)
	name, d := pc.choose(p)
	if name != "b" || d.Reason != ReasonPrefix || !d.Learn {
		t.Fatalf("chose %s %+v, want b prefix learn", name, d)
	}
	if !(pc.scores[1] < pc.scores[0] && pc.scores[0] < pc.scores[2]) {
		t.Errorf("costs %v should rank b < a < c", pc.scores)
	}
}

// Writing into a cache's unfilled part displaces nothing: a backend that
// has never been sent anything is not priced the cache weight for the
// part of a new conversation nobody holds (only for its copy of the
// shared prefix it lacks, CopyWriteShare), so a new conversation goes
// there rather than to a full holder with work queued; once that backend
// is full, the holder wins again.
func TestKVMeshEmptyBackendPaysNoCacheWeight(t *testing.T) {
	p := newKVMeshPolicy(DefaultKVMeshConfig())
	// 40 blocks: the holder has the first 10 (a shared system prompt) and
	// a little prefill queued; the other backend holds nothing.
	pc := newPolicyCase(40, 3, "holder", "empty").match(10, 0).pending(1500, 0)
	if name, d := pc.choose(p); name != "holder" {
		t.Fatalf("both caches full: chose %s %+v (costs %v), want the holder", name, d, pc.scores)
	}
	pc.cands[1].Unfilled = 1
	if name, d := pc.choose(p); name != "empty" || !d.Learn {
		t.Fatalf("an empty cache beside the holder: chose %s %+v (costs %v), want the empty one", name, d, pc.scores)
	}
}

// A request sent away from a holder writes a second copy of what the
// holder keeps: with CopyWriteShare 1 that copy pays the full cache weight
// even into an unfilled cache, so an early conversation stays at its
// holder through a queue it would have left for an empty backend; the
// part of the prompt nobody holds keeps the discount.
func TestKVMeshCopyWriteShare(t *testing.T) {
	cfg := DefaultKVMeshConfig()
	cfg.CopyWriteShare = 0
	pc := newPolicyCase(40, 3, "holder", "empty").match(30, 0).pending(3000, 0)
	pc.cands[0].Unfilled, pc.cands[1].Unfilled = 1, 1 // both caches still filling
	if name, d := pc.choose(newKVMeshPolicy(cfg)); name != "empty" {
		t.Fatalf("share 0: chose %s %+v (costs %v), want the empty backend (650 units to compute and 3,000 queued at the holder against 2,570)", name, d, pc.scores)
	}
	off := append([]float64(nil), pc.scores...)
	cfg.CopyWriteShare = 1
	name, d := pc.choose(newKVMeshPolicy(cfg))
	if name != "holder" || d.Reason != ReasonPrefix {
		t.Fatalf("share 1: chose %s %+v (costs %v), want the holder", name, d, pc.scores)
	}
	// The empty backend pays the cache weight for the 30 blocks (1,920
	// units) it would copy; the holder copies nothing.
	if got, want := pc.scores[1]-off[1], cfg.CacheWeight*1920; math.Abs(got-want) > 1e-9 || pc.scores[0] != off[0] {
		t.Fatalf("costs %v against %v at share 0: want the empty backend's %v higher and the holder's the same", pc.scores, off, want)
	}
	// Half filled, the copy pays half the weight (the other half is the
	// write price both pay on what they compute).
	pc.cands[1].Unfilled = 0.5
	pc.choose(newKVMeshPolicy(cfg))
	if got, want := pc.scores[1], 2570*(1+cfg.CacheWeight*0.5)+cfg.CacheWeight*0.5*1920; math.Abs(got-want) > 1e-6 {
		t.Fatalf("half-filled empty backend costs %v, want %v", got, want)
	}
}

// Load pressure on the deepest holder: when the work queued there is far
// above the typical candidate's, the override diverts, although the cost
// (which saves the holder's match) still favours it, and learns only the
// request's own part beyond the holder's match at the backend it diverts to.
func TestKVMeshLoadOverride(t *testing.T) {
	cfg := DefaultKVMeshConfig()
	cfg.LoadOverrideFactor = 2
	cfg.LoadOverrideFloor = 0.1 // 410 units with the initial average prompt of 4096
	p := newKVMeshPolicy(cfg)
	pc := newPolicyCase(40, 2, "a", "b", "c").match(40, 0, 0).pending(2000, 0, 0)
	name, d := pc.choose(p)
	if name != "b" || d.Reason != ReasonLoadOverride || !d.Learn || d.LearnAbove != 40 {
		t.Fatalf("chose %s %+v (costs %v), want b (least cost among the others), load-override, learning above the holder's 40 blocks", name, d, pc.scores)
	}
	if !(pc.scores[0] < pc.scores[1]) {
		t.Fatalf("costs %v: the holder should still be the cheapest by cost", pc.scores)
	}
	// Below the floor nothing is overloaded, whatever the median.
	pc.pending(500, 0, 0)
	if name, d := pc.choose(p); name != "a" || d.Reason != ReasonPrefix {
		t.Fatalf("with a under the floor: chose %s %+v", name, d)
	}
}

// The cost trades the prefill a holder saves (priced for the time it
// takes and for the cache it displaces) against the prefill already queued
// there.
func TestKVMeshCostTradesMatchForPendingPrefill(t *testing.T) {
	cfg := DefaultKVMeshConfig()
	cfg.CacheWeight = 1
	p := newKVMeshPolicy(cfg)
	pc := newPolicyCase(40, 3, "a", "b").match(4, 0).pending(3000, 0)
	// a saves 256 units of prefill (512 of cost) but has 3,000 queued.
	name, d := pc.choose(p)
	if name != "b" || d.Reason != ReasonCost || !d.Learn {
		t.Fatalf("chose %s %+v (costs %v), want b by cost", name, d, pc.scores)
	}
	if want := 2 * 2570.0; pc.scores[1] != want || pc.scores[0] != 2*(2570-256)+3000 {
		t.Errorf("costs %v, want [%v %v]", pc.scores, 2*(2570-256)+3000, want)
	}
	// a holding 2,560 units with 4,000 queued wins: the cache it would
	// displace elsewhere counts too.
	pc.match(40, 0).pending(4000, 0)
	if name, _ := pc.choose(p); name != "a" {
		t.Fatalf("chose %s (costs %v), want a", name, pc.scores)
	}
	// Priced for time alone (cache_weight 0), the same queue sends it away.
	cfg.CacheWeight = 0
	if name, _ := pc.choose(newKVMeshPolicy(cfg)); name != "b" {
		t.Fatalf("cache_weight 0: chose %s (costs %v), want b", name, pc.scores)
	}
	// The default weights keep a holder with (prefill_weight +
	// cache_weight) times its match queued...
	def := newKVMeshPolicy(DefaultKVMeshConfig())
	f := def.cfg.PrefillWeight + def.cfg.CacheWeight
	pc.pending(f*2560-100, 0)
	if name, _ := pc.choose(def); name != "a" {
		t.Fatalf("default weights, %vx the match queued: chose %s (costs %v), want a", f, name, pc.scores)
	}
	// ...and give it up beyond that.
	pc.pending(f*2560+100, 0)
	if name, _ := pc.choose(def); name != "b" {
		t.Fatalf("default weights, over %vx the match queued: chose %s (costs %v), want b", f, name, pc.scores)
	}
}

// Requests past their first token (decoding) barely count: a holder
// decoding many requests keeps its conversations, and a miss goes to the
// backend with the least prefill queued, not the fewest requests.
func TestKVMeshDecodingIsCheap(t *testing.T) {
	p := newKVMeshPolicy(DefaultKVMeshConfig())
	pc := newPolicyCase(40, 12, "a", "b").match(30, 0).inflight(40, 0)
	if name, d := pc.choose(p); name != "a" || d.Reason != ReasonPrefix {
		t.Fatalf("holder decoding 40 requests: chose %s %+v (costs %v)", name, d, pc.scores)
	}
	miss := newPolicyCase(40, 13, "a", "b", "c").inflight(30, 1, 30).pending(0, 3000, 0)
	if name, d := miss.choose(p); name == "b" || d.Reason != ReasonMiss {
		t.Fatalf("miss: chose %s %+v (costs %v), want a or c (no prefill queued)", name, d, miss.scores)
	}
}

// Other routers' work shows only in the backend's waiting queue: it counts
// beyond the requests this router had pending when the queue was sampled.
func TestKVMeshOthersWaiting(t *testing.T) {
	p := newKVMeshPolicy(DefaultKVMeshConfig())
	pc := newPolicyCase(40, 14, "a", "b").match(20, 0).pending(100, 0)
	pc.cands[0].Load.Waiting, pc.cands[0].Load.OwnAtSignal = 1, 1 // our own pending request
	if name, _ := pc.choose(p); name != "a" {
		t.Fatalf("our own waiting request counted twice: chose %s (costs %v)", name, pc.scores)
	}
	// A stale sample: the request it saw is no longer pending. It was ours
	// then, so it is not taken for another router's.
	pc.pending(0, 0)
	if name, _ := pc.choose(p); name != "a" {
		t.Fatalf("a stale sample's own request taken for another router's: chose %s (costs %v)", name, pc.scores)
	}
	pc.cands[0].Load.Waiting = 9 // eight more from other routers: 8 average prompts
	if name, _ := pc.choose(p); name != "b" {
		t.Fatalf("others' queue ignored: chose %s (costs %v)", name, pc.scores)
	}
	// Eight average prompts (the average starts at 4,096 units and moves
	// towards this prompt's 2,570) on top of a's own prefill.
	if want := (1+DefaultKVMeshConfig().CacheWeight)*(2570-1280) + 8*2570.0; pc.scores[0] < want {
		t.Errorf("a's cost %v, want at least %v", pc.scores[0], want)
	}
}

// A hot prefix whose holder is overloaded gets a second holder (learned),
// up to HotMaxHolders; a cold one is only diverted.
func TestKVMeshHotPrefixReplicates(t *testing.T) {
	cfg := DefaultKVMeshConfig()
	cfg.HotThreshold = 5
	cfg.LoadOverrideFactor = 2
	cfg.LoadOverrideFloor = 0.1
	p := newKVMeshPolicy(cfg)
	pc := newPolicyCase(20, 4, "a", "b", "c", "d", "e").match(20, 0, 0, 0, 0)
	for i := 0; i < 4; i++ { // hits below the threshold, holder not overloaded
		if name, _ := pc.choose(p); name != "a" {
			t.Fatalf("chose %s", name)
		}
	}
	pc.pending(1000, 10, 20, 10, 0)
	name, d := pc.choose(p) // 5th hit: hot
	if name != "e" || d.Reason != ReasonReplicate || !d.Learn {
		t.Fatalf("chose %s %+v, want e replicate+learn", name, d)
	}
	pc.match(20, 20, 0, 0, 0).pending(1000, 1000, 20, 10, 0) // two holders, both overloaded: cap reached
	name, d = pc.choose(p)
	if name != "e" || d.Reason != ReasonLoadOverride || !d.Learn || d.LearnAbove != 20 {
		t.Fatalf("chose %s %+v, want e load-override learning above the holders' 20 blocks only", name, d)
	}
}

// Ties (misses, or a prefix every backend holds equally) go by rendezvous
// hashing of the first block beyond the match: the same on every node,
// spread over the backends, skipping overloaded ones.
func TestKVMeshTiesByRendezvous(t *testing.T) {
	names := []string{"a", "b", "c", "d"}
	counts := map[string]int{}
	for k := uint64(0); k < 400; k++ {
		p1 := newKVMeshPolicy(DefaultKVMeshConfig())
		p2 := newKVMeshPolicy(DefaultKVMeshConfig())
		pc := newPolicyCase(10, 100+k, names...)
		n1, d := pc.choose(p1)
		if d.Reason != ReasonMiss {
			t.Fatalf("reason %v on a miss", d.Reason)
		}
		// The same prompt seen by another node with candidates in another order.
		pc2 := newPolicyCase(10, 100+k, "d", "c", "b", "a")
		n2, _ := pc2.choose(p2)
		if n1 != n2 {
			t.Fatalf("prompt %d: nodes disagree: %s vs %s", k, n1, n2)
		}
		counts[n1]++
	}
	for _, n := range names {
		if counts[n] < 60 {
			t.Errorf("rendezvous spread %v is uneven", counts)
		}
	}
	// Equal holders of a shared system prompt: the winner depends on the
	// key at the prompt's next learn position (6 blocks), not on which
	// holder is first.
	pc := newPolicyCase(10, 7, names...).match(3, 3, 3, 3)
	pc.chain.Learn = []int32{2, 3, 6, 10}
	winner, d := pc.choose(newKVMeshPolicy(DefaultKVMeshConfig()))
	if d.Reason != ReasonPrefix {
		t.Fatalf("reason %v", d.Reason)
	}
	want := rendezvous(uint64(pc.chain.Keys[5]), pc.cands, nil)
	if winner != pc.cands[want].Name {
		t.Fatalf("winner %s, rendezvous of the key at depth 6 says %s", winner, pc.cands[want].Name)
	}
	// The rendezvous winner above the load bound is skipped.
	var loads []int
	for i := range names {
		if i == want {
			loads = append(loads, 5)
		} else {
			loads = append(loads, 0)
		}
	}
	pc.inflight(loads...)
	if w2, _ := pc.choose(newKVMeshPolicy(DefaultKVMeshConfig())); w2 == winner {
		t.Fatalf("overloaded rendezvous winner %s chosen anyway", w2)
	}
	// So is one whose own queue (seen by every router) is long.
	pc.inflight(0, 0, 0, 0)
	pc.cands[want].Load.Waiting = 5
	if w2, _ := pc.choose(newKVMeshPolicy(DefaultKVMeshConfig())); w2 == winner {
		t.Fatalf("rendezvous winner %s with 5 waiting chosen anyway", w2)
	}
}

// Prompts sharing a long opening beyond what every backend holds (the
// Mooncake trace's first 512-token block, checkpointed halfway) must still
// spread: the tie key is taken at each prompt's own next learn position,
// past the shared opening, not at the block right after the match.
func TestKVMeshSharedOpeningSpreads(t *testing.T) {
	names := []string{"a", "b", "c", "d"}
	counts := map[string]int{}
	for k := uint64(0); k < 200; k++ {
		pc := newPolicyCase(80, 500+k, names...).match(32, 32, 32, 32)
		// Blocks 0..44 are the shared opening, the same in every prompt.
		shared := newPolicyCase(45, 499, names...)
		copy(pc.chain.Keys, shared.chain.Keys)
		pc.chain.Learn = []int32{32, 64, 80}
		name, d := pc.choose(newKVMeshPolicy(DefaultKVMeshConfig()))
		if d.Reason != ReasonPrefix {
			t.Fatalf("reason %v", d.Reason)
		}
		counts[name]++
	}
	for _, n := range names {
		if counts[n] < 30 {
			t.Fatalf("200 conversations past a shared opening went to %v: they should spread", counts)
		}
	}
}

func TestTieKey(t *testing.T) {
	pc := newPolicyCase(10, 11, "a")
	pc.chain.Learn = []int32{4, 8, 10}
	for _, c := range []struct{ depth, want int32 }{{0, 4}, {3, 4}, {4, 8}, {7, 8}, {8, 10}, {10, 10}} {
		if got := tieKey(&pc.req, c.depth); got != uint64(pc.chain.Keys[c.want-1]) {
			t.Errorf("depth %d: key of depth %d expected", c.depth, c.want)
		}
	}
	pc.chain.Learn = nil
	if got := tieKey(&pc.req, 2); got != uint64(pc.chain.Keys[9]) {
		t.Error("without learn positions the last full block decides")
	}
	pc.chain.Keys = nil
	if got := tieKey(&pc.req, 0); got != uint64(pc.req.Seed) {
		t.Error("a prompt shorter than a block is placed by its seed")
	}
}

func TestKVMeshChooseAllocatesNothing(t *testing.T) {
	p := newKVMeshPolicy(DefaultKVMeshConfig())
	pc := newPolicyCase(256, 9, "a", "b", "c", "d", "e", "f", "g", "h").match(100, 256, 0, 0, 3, 3, 0, 256).inflight(1, 40, 2, 3, 0, 0, 1, 2)
	if n := testing.AllocsPerRun(200, func() { pc.choose(p) }); n != 0 {
		t.Fatalf("kvmesh Choose allocates %v times per call", n)
	}
}

// A new session (every backend holds the shared opening, none the rest)
// goes to the backend with the fewest active requests once the fleet
// reads what it caches more than spread_min_reuse times, even when that
// backend has a little prefill queued; with less reuse, or none known yet,
// the spread term is off and the queue decides.
func TestKVMeshSpreadPlacesNewSessions(t *testing.T) {
	placeWith := func(cfg KVMeshConfig, reuse float64) string {
		pc := newPolicyCase(20, 21, "a", "b", "c").match(2, 2, 2).inflight(8, 1, 8).pending(0, 600, 0)
		pc.req.Reuse = reuse
		name, _ := pc.choose(newKVMeshPolicy(cfg))
		return name
	}
	place := func(reuse float64) string { return placeWith(DefaultKVMeshConfig(), reuse) }
	if got := place(0.8); got != "b" {
		t.Fatalf("reuse 0.8: new session placed on %s, want b (fewest active)", got)
	}
	if got := place(0); got == "b" {
		t.Fatalf("no reuse: new session placed on b, want a or c (no prefill queued)")
	}
	if got := place(-1); got == "b" {
		t.Fatalf("reuse unknown: new session placed on b, want a or c (the term is off)")
	}
	if got := place(0.6); got == "b" {
		t.Fatalf("reuse 0.6 (each unit read 1.5 times, below spread_min_reuse): new session placed on b, want a or c")
	}
	low := DefaultKVMeshConfig()
	low.SpreadMinReuse = 0
	if got := placeWith(low, 0.6); got != "b" {
		t.Fatalf("reuse 0.6, spread_min_reuse 0: new session placed on %s, want b", got)
	}
}

// A continuing session stays with its crowded holder at moderate reuse (it
// would newly write only its last message there) and leaves it only where
// nearly everything written is read again many times, the crowded holder's
// cache thrashing; backends below the mean are never charged.
func TestKVMeshSpreadKeepsOrShedsHolder(t *testing.T) {
	run := func(reuse float64) (string, []float64) {
		pc := newPolicyCase(20, 22, "a", "b", "c").match(19, 2, 2).inflight(8, 0, 0)
		pc.req.Reuse = reuse
		name, _ := pc.choose(newKVMeshPolicy(DefaultKVMeshConfig()))
		return name, pc.scores
	}
	if got, scores := run(0.7); got != "a" {
		t.Fatalf("reuse 0.7: chose %s (costs %v), want the holder a", got, scores)
	}
	got, scores := run(0.97)
	if got == "a" {
		t.Fatalf("reuse 0.97: chose the crowded holder a (costs %v)", scores)
	}
	_, base := run(0)
	if scores[1] != base[1] || scores[2] != base[2] {
		t.Fatalf("backends below the mean were charged: %v, without the term %v", scores, base)
	}
}

func TestKVMeshSpreadWeightValidated(t *testing.T) {
	cfg := DefaultKVMeshConfig()
	cfg.SpreadWeight = -1
	if errs := cfg.validate(); len(errs) == 0 {
		t.Fatal("spread_weight -1 accepted")
	}
	cfg = DefaultKVMeshConfig()
	cfg.SpreadMinReuse = math.NaN()
	if errs := cfg.validate(); len(errs) == 0 {
		t.Fatal("spread_min_reuse NaN accepted")
	}
}

// A claim past the edge of its backend's cache (Candidate.Doubted) counts
// at DoubtTrust: it beats a backend with no claim, loses to a trusted
// holder of nearly as deep a prefix, and a route made on it is a doubt
// route, while one made on a trusted match stays a prefix route.
func TestKVMeshDoubtedClaims(t *testing.T) {
	doubt := func(pc *policyCase, i int, depth int32) *policyCase {
		pc.cands[i].Doubted, pc.cands[i].DoubtTrust = depth, 0.5
		return pc
	}
	p := newKVMeshPolicy(DefaultKVMeshConfig())
	// Only a doubted claim anywhere: its holder, as a doubt route.
	pc := doubt(newPolicyCase(20, 31, "a", "b", "c").match(0, 0, 0), 1, 16)
	if name, d := pc.choose(p); name != "b" || d.Reason != ReasonDoubt {
		t.Fatalf("doubted claim on b only: chose %s (%s), want b (doubt)", name, d.Reason)
	}
	if saved := pc.cands[1].SavedUnits(&pc.chain); saved != 0.5*16*64 {
		t.Fatalf("SavedUnits of a doubted claim of 16 blocks at 0.5: %v, want %v", saved, 0.5*16*64)
	}
	// A trusted holder of 12 blocks saves more than a doubted one of 16.
	pc = doubt(newPolicyCase(20, 32, "a", "b", "c").match(0, 0, 12), 1, 16)
	if name, d := pc.choose(p); name != "c" || d.Reason != ReasonPrefix {
		t.Fatalf("trusted 12 against doubted 16: chose %s (%s), want c (prefix)", name, d.Reason)
	}
	// A trusted match that a doubted claim extends: a prefix route, worth
	// the trusted part in full and the rest at half.
	pc = doubt(newPolicyCase(20, 33, "a", "b", "c").match(0, 8, 8), 1, 16)
	if name, d := pc.choose(p); name != "b" || d.Reason != ReasonPrefix {
		t.Fatalf("trusted 8 extended to 16 by a doubt against trusted 8: chose %s (%s), want b (prefix)", name, d.Reason)
	}
	if saved, want := pc.cands[1].SavedUnits(&pc.chain), 8*64+0.5*8*64; saved != want {
		t.Fatalf("SavedUnits: %v, want %v", saved, want)
	}
	if got := pc.cands[1].ClaimedUnits(&pc.chain); got != 16*64 {
		t.Fatalf("ClaimedUnits: %d, want %d", got, 16*64)
	}
}

// A doubted claim near the edge (Candidate.Near, belief.doubt_near) prices
// its blocks at its own worth, and only the blocks beyond it at the far
// claim's: a backend whose head is just past the edge beats one whose
// whole claim is far past it, as a doubt route.
func TestKVMeshNearDoubtedClaims(t *testing.T) {
	p := newKVMeshPolicy(DefaultKVMeshConfig())
	pc := newPolicyCase(20, 34, "a", "b", "c").match(0, 0, 0)
	pc.cands[1].Doubted, pc.cands[1].DoubtTrust = 16, 0.05
	pc.cands[2].Doubted, pc.cands[2].DoubtTrust = 16, 0.05
	pc.cands[2].Near, pc.cands[2].NearTrust = 12, 0.6
	if name, d := pc.choose(p); name != "c" || d.Reason != ReasonDoubt {
		t.Fatalf("near 12 at 0.6 against far 16 at 0.05: chose %s (%s), want c (doubt)", name, d.Reason)
	}
	if saved, want := pc.cands[2].SavedUnits(&pc.chain), 0.6*12*64+0.05*4*64; math.Abs(saved-want) > 1e-9 {
		t.Fatalf("SavedUnits: %v, want %v", saved, want)
	}
	// Over a trusted match of 4: the trusted blocks in full, the near ones
	// at their worth, the rest at the far claim's; claimed to the deepest.
	pc.cands[2].Matched = 4
	if saved, want := pc.cands[2].SavedUnits(&pc.chain), 4*64+0.6*8*64+0.05*4*64; math.Abs(saved-want) > 1e-9 {
		t.Fatalf("SavedUnits over a trusted match: %v, want %v", saved, want)
	}
	if got := pc.cands[2].ClaimedUnits(&pc.chain); got != 16*64 {
		t.Fatalf("ClaimedUnits: %d, want %d", got, 16*64)
	}
}

// A node that routes an eighth of its mesh's requests moves its average
// prompt eight times as far per prompt as a lone node, so both follow
// prompts that grow over time equally fast in the mesh's requests; the
// weight is capped where a node would average too few of its own.
func TestKVMeshAveragePromptFollowsTheMesh(t *testing.T) {
	for _, c := range []struct{ share, want float64 }{
		{1, promptEWMA}, {0, promptEWMA}, {0.5, 2 * promptEWMA}, {0.125, 8 * promptEWMA}, {0.01, maxPromptEWMA},
	} {
		if got := promptWeight(c.share); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("promptWeight(%v) = %v, want %v", c.share, got, c.want)
		}
	}
	lone, node := newKVMeshPolicy(DefaultKVMeshConfig()), newKVMeshPolicy(DefaultKVMeshConfig())
	start := math.Float64frombits(lone.avgPrompt.Load())
	pc := newPolicyCase(40, 1, "a", "b")
	total := float64(pc.req.Units())
	pc.choose(lone) // one prompt at a lone node
	pc.req.MeshShare = 0.125
	pc.choose(node) // the same prompt at a node with an eighth of the mesh's requests
	stepLone := math.Float64frombits(lone.avgPrompt.Load()) - start
	stepNode := math.Float64frombits(node.avgPrompt.Load()) - start
	if math.Abs(stepLone-(total-start)*promptEWMA) > 1e-6 || math.Abs(stepNode-8*stepLone) > 1e-6 {
		t.Fatalf("one %v-unit prompt from %v: the lone node moved %v, the mesh node %v; want %v and 8 times that", total, start, stepLone, stepNode, (total-start)*promptEWMA)
	}
}

// The wait guard: a holder with far more queued than an idle backend would
// take to compute the whole prompt keeps the request by cost (the cache it
// would write elsewhere weighs more), and the guard sends it to the quick
// one; under the floor, or off, it stays.
func TestKVMeshWaitGuard(t *testing.T) {
	cfg := DefaultKVMeshConfig()
	pc := newPolicyCase(40, 3, "a", "b").match(40, 0).pending(20000, 0)
	if name, d := pc.choose(newKVMeshPolicy(cfg)); name != "a" || d.Reason != ReasonPrefix {
		t.Fatalf("guard off: chose %s %+v (costs %v), want the holder a", name, d, pc.scores)
	}
	cfg.WaitGuardFactor, cfg.WaitGuardFloor = 2, 2 // floor: 8,192 units at the initial average prompt
	p := newKVMeshPolicy(cfg)
	name, d := pc.choose(p)
	if name != "b" || d.Reason != ReasonLoadOverride || !d.Learn || d.LearnAbove != 40 {
		t.Fatalf("guard on: chose %s %+v (costs %v), want b, load-override, learning above the holder's 40 blocks", name, d, pc.scores)
	}
	if !(pc.scores[0] < pc.scores[1]) {
		t.Fatalf("costs %v: the holder should still be the cheapest by cost", pc.scores)
	}
	// 6,000 queued: longer than b's whole prompt more than twice over, but
	// by less than the floor.
	pc.pending(6000, 0)
	if name, d := pc.choose(p); name != "a" {
		t.Fatalf("under the floor: chose %s %+v", name, d)
	}
	// Above the floor but within the factor: b busy too.
	pc.pending(20000, 12000)
	if name, d := pc.choose(p); name != "a" {
		t.Fatalf("within the factor: chose %s %+v", name, d)
	}
}

// DoubtCacheShare: the blocks only a doubted claim covers earn that share
// of the cache weight. At 1 a doubted holder with a queue is worth waiting
// for (its blocks priced like trusted ones, at their worth); at 0 only the
// prefill they may save counts, which still beats an idle backend with no
// claim but not a queue longer than that prefill.
func TestKVMeshDoubtCacheShare(t *testing.T) {
	pc := newPolicyCase(16, 35, "a", "b").match(0, 0).pending(4000, 0)
	pc.cands[0].Doubted, pc.cands[0].DoubtTrust = 16, 0.5 // worth 0.5 * 16 * 64 = 512 units
	if w := pc.cands[0].DoubtedWorth(&pc.chain); w != 512 {
		t.Fatalf("DoubtedWorth: %v, want 512", w)
	}
	cfg := DefaultKVMeshConfig()
	if name, d := pc.choose(newKVMeshPolicy(cfg)); name != "a" || d.Reason != ReasonDoubt {
		t.Fatalf("share 1, 4,000 units queued at the doubted holder: chose %s (%s), want a (doubt)", name, d.Reason)
	}
	whole := pc.scores[0]
	cfg.DoubtCacheShare = 0
	p := newKVMeshPolicy(cfg)
	if name, d := pc.choose(p); name != "b" || d.Reason != ReasonMiss {
		t.Fatalf("share 0, 4,000 units queued at the doubted holder: chose %s (%s), want b (miss)", name, d.Reason)
	}
	if got, want := pc.scores[0]-whole, cfg.CacheWeight*512; math.Abs(got-want) > 1e-6 {
		t.Fatalf("share 0 adds %v to the doubted holder's cost, want the cache weight times its worth, %v", got, want)
	}
	pc.pending(0, 0)
	if name, d := pc.choose(p); name != "a" || d.Reason != ReasonDoubt {
		t.Fatalf("share 0, both idle: chose %s (%s), want a (doubt): the prefill it may save still counts", name, d.Reason)
	}
}

// BeliefConfig.DoubtSpanCurve: doubted spans learn a worth by distance
// range and length, a cell untaught reports none (the worth by distance
// stays), and a taught 0 keeps the floor.
func TestSpanCurveLearns(t *testing.T) {
	var sc spanCurve
	if _, ok := sc.worth(0, 50000); ok {
		t.Fatal("an untaught cell reports a worth")
	}
	sc.learn(0, 50000, 0.1)
	sc.learn(0, 40000, 0)
	sc.learn(0, 1000, 0.5)
	sc.learn(0, 40000, math.NaN())  // ignored
	sc.learn(doubtRanges, 40000, 1) // no such range: ignored
	if w, ok := sc.worth(0, 60000); !ok || w != 0.05 {
		t.Fatalf("spans over 32,768 tokens just past the edge after answers finding 0.1 and 0: worth %v (%v), want their mean 0.05", w, ok)
	}
	if w, ok := sc.worth(0, 2000); !ok || w != 0.5 {
		t.Fatalf("spans up to 2,048 tokens: worth %v (%v), want 0.5", w, ok)
	}
	if _, ok := sc.worth(1, 60000); ok {
		t.Fatal("the next distance range was not taught")
	}
	if _, ok := sc.worth(0, 5000); ok {
		t.Fatal("the 2,048-8,192 span range was not taught")
	}
	sc.learn(2, 20000, 0)
	if w, _ := sc.worth(2, 20000); w != minDoubtTrust {
		t.Fatalf("a cell taught 0: worth %v, want the floor %v", w, minDoubtTrust)
	}
}

// A nearly full KV cache (KVUsageThreshold) is priced in proportion to the
// prompt that would add to it: a short prompt stays at the holder of half
// of it, whose cache is 99% used, where a penalty of KVUsageWeight average
// prompts would send it to compute everything elsewhere; a long prompt of
// which the holder has a sliver goes elsewhere.
func TestKVMeshKVUsagePenaltyScalesWithThePrompt(t *testing.T) {
	cfg := DefaultKVMeshConfig()
	full := func(pc *policyCase) *policyCase {
		pc.cands[0].Load.KVUsage, pc.cands[0].Load.Has = 0.99, HasKVCacheUsage
		pc.cands[1].Load.Has = HasKVCacheUsage
		return pc
	}
	short := full(newPolicyCase(8, 5, "holder", "other").match(4, 0))
	if name, d := short.choose(newKVMeshPolicy(cfg)); name != "holder" || d.Reason != ReasonPrefix {
		t.Fatalf("short prompt: chose %s %+v (costs %v), want the holder", name, d, short.scores)
	}
	total := float64(short.req.Units())
	penalty := total * cfg.KVUsageWeight * (0.99 - cfg.KVUsageThreshold) / (1 - cfg.KVUsageThreshold)
	if want := (cfg.PrefillWeight+cfg.CacheWeight)*(total-4*64) + penalty; math.Abs(short.scores[0]-want) > 1e-6 {
		t.Fatalf("holder's cost %v, want %v (its penalty %v: the prompt's %v units, not the average's %v)", short.scores[0], want, penalty, total, cfg.InitialPromptUnits)
	}
	long := full(newPolicyCase(160, 6, "holder", "other").match(8, 0))
	if name, d := long.choose(newKVMeshPolicy(cfg)); name != "other" {
		t.Fatalf("long prompt with a sliver held: chose %s %+v (costs %v), want the other backend", name, d, long.scores)
	}
	long.cands[0].Load.KVUsage = 0.5
	if name, _ := long.choose(newKVMeshPolicy(cfg)); name != "holder" {
		t.Fatalf("long prompt, holder's cache half used: chose %s (costs %v), want the holder", name, long.scores)
	}
}
