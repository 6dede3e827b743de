package router

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"time"

	"github.com/kvmesh/kvmesh/tree"
)

// Policy chooses a backend for a request among candidates.
//
// Choose must be cheap and safe for concurrent use. It reads req and
// cands, writes one score per candidate into scores (len(scores) ==
// len(cands); what a score means is the policy's own, for /debug/route),
// and returns its Decision. cands is never empty. When req.Explain is set
// the decision is only being shown (POST /debug/route): the policy must
// not change its state (counters, private trees).
type Policy interface {
	Name() string
	Choose(req *Request, cands []Candidate, scores []float64) Decision
}

// Request is what a policy sees of one request. It is only valid during
// Choose.
type Request struct {
	Model    string
	Endpoint Endpoint
	// Prompt is the canonical rendering (nil for forwarded paths, which
	// have no prompt).
	Prompt *Prompt
	// Chain holds the prompt's block keys (Chain.Blocks() may be 0 for a
	// prompt shorter than one block).
	Chain *tree.Chain
	Seed  tree.Seed
	// Deepest is the deepest matched depth among cands, in blocks.
	Deepest int32
	// MeshShare is this node's share of the requests its mesh routes (1
	// alone): what it counts itself, divided by this, estimates the mesh's
	// count.
	MeshShare float64
	// PeerPrompts is the prompts the other nodes of the mesh have routed
	// and their units (PeerPrompts; zero alone): the kvmesh policy folds
	// them into late binding's average prompt (promptavg.go).
	PeerPrompts PromptTotals
	// Reuse is the share of prompt tokens the backends answered they had
	// cached, over this router's recent answers (a moving average weighted
	// by tokens); negative before any answer said.
	Reuse float64
	// Attempt is 0 for the first choice and n for the n-th retry (the
	// backends already tried are not among cands).
	Attempt int
	// Explain marks a decision that is only shown, not acted on.
	Explain bool
	Now     time.Time
	// HoldOK says the router would hold the request if the policy asked
	// (Decision.Hold): its first attempt, not held for its longest yet.
	// Held counts the times it was held so far; a policy keeps its
	// once-per-request bookkeeping (moving averages) for Held 0.
	HoldOK bool
	Held   int

	// scratch is space policies of this package may use, cap >= 2*len(cands)
	// when the router sets it; a policy allocates its own when it is
	// shorter (a Request built outside this package has none).
	scratch []float64
}

// Units is the prompt's length in units (bytes in byte mode), 0 without a prompt.
func (r *Request) Units() int {
	if r.Chain == nil {
		return 0
	}
	return r.Chain.Units
}

// reuse is Reuse, at most 1, or the kvmesh policy's initialReuse before
// any answer said.
func (r *Request) reuse() float64 {
	if r.Reuse < 0 {
		return initialReuse
	}
	return min(r.Reuse, 1)
}

// Candidate is one backend that may serve the request: healthy, serving
// the model, not yet tried for it.
type Candidate struct {
	Name string
	// Slot is the backend's stable index in the router's configuration, for
	// policies that keep per-backend state in a slice.
	Slot int
	// ID is the backend's id in the shared tree.Index.
	ID tree.BackendID
	// Hash is a stable hash of Name, equal on every node.
	Hash   uint64
	Weight float64
	// Matched is the deepest depth of the prompt, in blocks, that this
	// backend holds according to the claims.
	Matched int32
	// Discount is how much of the match the router doubts, in [0, 1): the
	// claim is near the edge of what the backend's cache still holds, by
	// the belief's count of what was written there since (0: fully
	// believed).
	Discount float64
	// Doubted is the depth, in blocks, of a deeper claim the router doubts
	// (past the edge of the backend's cache, BeliefConfig.DoubtBeyond), 0
	// when there is none; the blocks between max(Matched, Near) and Doubted
	// are expected to be held with probability DoubtTrust.
	Doubted    int32
	DoubtTrust float64
	// Near is the depth, in blocks, of the deepest doubted claim near the
	// edge (BeliefConfig.DoubtNear; 0 when none lies strictly between
	// Matched and Doubted): the blocks between Matched and Near count NearTrust,
	// those between Near and Doubted DoubtTrust.
	Near      int32
	NearTrust float64
	// Lost says the match is a prompt whose answer from this backend
	// showed it lost (a conversation's previous request, within
	// BeliefConfig.LostTTL): Discount counts it at DoubtTrust.
	Lost bool
	// Unfilled is the share of the backend's cache nothing has been
	// written to yet, by the belief's count (what the mesh has sent it to
	// compute against its capacity; 0 when either is unknown): writing
	// there displaces nothing, so the kvmesh policy's CacheWeight counts
	// only in proportion to the rest.
	Unfilled float64
	Load     LoadView

	// cutReach is, when BeliefConfig.DepthEdge or PinnedEdge cut Matched below the
	// deepest trusted claim (cutAtEdge), how far into the cache the cut
	// depth reaches: the answer's check learns from it.
	cutReach float64
	// doubtX and nearX are how many capacities were written to the
	// backend after the doubted and the near claim (0: no such claim): the
	// distance ranges the span curve prices them in (spanWorths).
	doubtX, nearX float64
}

// SavedUnits is the prefill the match is expected to save: MatchedUnits,
// less the doubted part, plus the doubted claims' blocks at their worth
// (the near claim's at NearTrust, the rest at DoubtTrust). It is
// TrustedUnits plus DoubtedWorth.
func (c *Candidate) SavedUnits(ch *tree.Chain) float64 {
	return c.TrustedUnits(ch) + c.DoubtedWorth(ch)
}

// TrustedUnits is the trusted match's part of SavedUnits: MatchedUnits
// less the doubted share (Discount).
func (c *Candidate) TrustedUnits(ch *tree.Chain) float64 {
	return float64(c.MatchedUnits(ch)) * (1 - c.Discount)
}

// DoubtedWorth is the doubted claims' part of SavedUnits: the blocks only
// a claim past the edge of the backend's cache covers, each at the worth
// of its claim (the near claim's at NearTrust, the rest at DoubtTrust).
func (c *Candidate) DoubtedWorth(ch *tree.Chain) float64 {
	if ch == nil {
		return 0
	}
	matched := c.MatchedUnits(ch)
	worth := 0.0
	near := matched
	if c.Near > c.Matched {
		near = min(ch.UnitsAt(int(c.Near)), ch.Units)
		worth += float64(near-matched) * c.NearTrust
	}
	if c.Doubted > max(c.Matched, c.Near) {
		worth += float64(c.ClaimedUnits(ch)-near) * c.DoubtTrust
	}
	return worth
}

// ClaimedUnits is what the deepest unexpired claim says the backend holds,
// in prompt units, believed or doubted: MatchedUnits, or the doubted
// claim's depth.
func (c *Candidate) ClaimedUnits(ch *tree.Chain) int {
	if ch == nil {
		return 0
	}
	return min(ch.UnitsAt(int(max(c.Matched, c.Near, c.Doubted))), ch.Units)
}

// MatchedUnits is Matched in prompt units, at most the prompt's length.
func (c *Candidate) MatchedUnits(ch *tree.Chain) int {
	if ch == nil {
		return 0
	}
	return min(ch.UnitsAt(int(c.Matched)), ch.Units)
}

// LoadView is a backend's load as the router knows it.
type LoadView struct {
	// InFlight counts this router's requests outstanding at the backend.
	InFlight int
	// PendingPrefill is the prefill this router has queued at the backend,
	// in prompt units: the sum, over its requests sent there that have not
	// received a first answer byte yet, of each one's estimated uncached
	// part (its length minus what the backend held of it when it was sent).
	// PendingRequests counts those requests. What delays a new request's
	// first token is mostly this work queued ahead of it.
	PendingPrefill  float64
	PendingRequests int
	// HeadBooked and HeadPrompt are the booked units and the prompt's
	// units of the oldest of those requests (the one the engine is
	// computing), HeadProgress the units the backend has had time to
	// compute since it reached the front, at the rate this router's answers
	// showed (0 before the first answer, or with nothing pending). A head
	// whose progress is far past its booking has more to compute than was
	// booked (KVMeshConfig.OverdueFactor).
	HeadBooked, HeadPrompt, HeadProgress float64
	// PeerPendingPrefill, PeerPendingRequests and PeerInFlight are the same
	// bookings of the other nodes of the mesh (from their load channel,
	// weighted by freshness; 0 without a mesh).
	PeerPendingPrefill, PeerPendingRequests, PeerInFlight float64
	// Waiting, Running and KVUsage come from the freshest load signal (an
	// ORCA header or a /metrics scrape); Has says which were reported.
	Waiting, Running, KVUsage float64
	Has                       LoadFields
	// OwnAtSignal is how many requests the mesh (this router and the peers
	// it heard from) had pending at the backend when Waiting was sampled:
	// at most that many of the waiting requests were the mesh's, the rest
	// came from elsewhere (routers outside the mesh, or not heard yet).
	OwnAtSignal float64
	// SignalAge is the age of that signal; SignalWeight is 1 for a fresh
	// signal and falls linearly to 0 as it ages (see Config.SignalFresh).
	SignalAge    time.Duration
	SignalWeight float64
	// BoundRate is the rate (per second, over about
	// KVMeshConfig.BlockWindow) at which this router sent the backend
	// requests bound to it: requests it held at least half of, by their
	// booking. PrefillRate is the rate, in prompt units per second, at
	// which the backend computed this router's prefill (learned from first
	// answer bytes; 0 before the first). Both price the blocking term
	// (blocking.go).
	BoundRate, PrefillRate float64
}

// Queue is the load estimate most policies compare: this router's in-flight
// requests plus the backend's waiting queue weighted by its freshness.
func (l *LoadView) Queue() float64 {
	return float64(l.InFlight) + l.SignalWeight*l.Waiting
}

// Decision is a policy's answer.
type Decision struct {
	// Index of the chosen candidate.
	Index  int
	Reason Reason
	// Learn says whether the chosen backend is to be recorded as holding
	// the prompt (claims learned at dispatch, confirmed on success).
	Learn bool
	// LearnAbove, with Learn, limits what is learned to the prompt's learn
	// positions deeper than this many blocks: a load override learns the
	// request's own part at the backend it diverted the request to (that
	// backend computes and holds it: the conversation's next turn must find
	// it there), not the shared prefix the overloaded holder keeps. 0: every
	// position.
	LearnAbove int32
	// OwnMatch marks a policy that matched the prompt against a view of
	// its own (sglang_cache_aware's private tree) rather than the shared
	// claims: Matched, in units, is that match, which x-kvmesh-route
	// reports, and the routing precision does not count the route.
	OwnMatch bool
	Matched  int
	// Hold asks the router to keep the request until a booking ends and
	// to decide again then (only when Request.HoldOK): nothing is sent,
	// booked or learned for this decision.
	Hold bool
}

// Reason says why a backend was chosen; it appears in the x-kvmesh-route
// header, in /debug/route and as a metric label.
type Reason uint8

const (
	ReasonPrefix       Reason = iota + 1 // it holds the deepest matched prefix
	ReasonMiss                           // nothing matched: placed by rendezvous hashing, bounded by load
	ReasonCost                           // it holds a shorter prefix (or none) but its load makes it cheaper
	ReasonLoadOverride                   // the best holder is overloaded: diverted; the shared prefix stays with the holder, the request's own part is learned where it went
	ReasonReplicate                      // a hot prefix's holder is overloaded: a second holder is made
	ReasonRetry                          // an earlier attempt failed before any byte reached the client
	ReasonRoundRobin                     // round_robin's turn
	ReasonRandom                         // random's draw
	ReasonLeastLoaded                    // fewest in-flight requests
	ReasonHash                           // consistent hashing of the prompt's start
	ReasonImbalance                      // sglang_cache_aware: load imbalanced, shortest queue chosen
	ReasonForward                        // a forwarded path without a prompt
	ReasonDoubt                          // it holds the deepest prefix by a claim past its cache's edge (BeliefConfig.DoubtBeyond)
	numReasons
)

var reasonNames = [numReasons]string{"", "prefix", "miss", "cost", "load-override", "replicate", "retry",
	"round-robin", "random", "least-loaded", "hash", "imbalance", "forward", "doubt"}

func (r Reason) String() string {
	if r == 0 || r >= numReasons {
		return fmt.Sprintf("Reason(%d)", uint8(r))
	}
	return reasonNames[r]
}

// Policy names accepted by Config.Policy.
const (
	PolicyKVMesh           = "kvmesh"
	PolicyRoundRobin       = "round_robin"
	PolicyRandom           = "random"
	PolicyLeastLoaded      = "least_loaded"
	PolicyConsistentHash   = "consistent_hash"
	PolicySGLangCacheAware = "sglang_cache_aware"
)

// policyTable maps a policy name to its constructor. ix is the router's
// Index (for the key configuration of private indexes).
var policyTable = map[string]func(cfg *Config, ix *tree.Index) (Policy, error){
	PolicyKVMesh:      func(cfg *Config, _ *tree.Index) (Policy, error) { return newKVMeshPolicy(cfg.KVMesh), nil },
	PolicyRoundRobin:  func(*Config, *tree.Index) (Policy, error) { return new(roundRobinPolicy), nil },
	PolicyRandom:      func(*Config, *tree.Index) (Policy, error) { return randomPolicy{}, nil },
	PolicyLeastLoaded: func(*Config, *tree.Index) (Policy, error) { return new(leastLoadedPolicy), nil },
	PolicyConsistentHash: func(cfg *Config, _ *tree.Index) (Policy, error) {
		return newConsistentHashPolicy(cfg.ConsistentHash), nil
	},
	PolicySGLangCacheAware: func(cfg *Config, ix *tree.Index) (Policy, error) { return newSGLangPolicy(cfg.SGLang, ix) },
}

// PolicyNames lists the names Config.Policy accepts, sorted.
func PolicyNames() []string {
	names := make([]string, 0, len(policyTable))
	for n := range policyTable {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// NewPolicy builds the named policy with its settings from cfg. ix is the
// Index the router reads claims from.
func NewPolicy(name string, cfg Config, ix *tree.Index) (Policy, error) {
	mk, ok := policyTable[name]
	if !ok {
		return nil, fmt.Errorf("router: unknown policy %q (want one of %v)", name, PolicyNames())
	}
	return mk(&cfg, ix)
}

// ---- helpers shared by policies ----

// rendezvous returns the candidate among those allowed (nil = all) with the
// highest weighted rendezvous score for key, or -1 when none is allowed.
// The score -w/ln(u) (u uniform in (0,1) from hashing key with the
// backend's name hash) gives each backend a share proportional to its
// weight, and every node computes the same winner from the same names.
func rendezvous(key uint64, cands []Candidate, allowed func(i int) bool) int {
	best, bestScore := -1, math.Inf(-1)
	for i := range cands {
		if allowed != nil && !allowed(i) {
			continue
		}
		h := mix64(key ^ cands[i].Hash)
		u := (float64(h>>11) + 0.5) / (1 << 53) // in (0, 1)
		s := -cands[i].Weight / math.Log(u)
		if s > bestScore || (s == bestScore && cands[i].Hash < cands[best].Hash) {
			best, bestScore = i, s
		}
	}
	return best
}

// loadTotals sums the candidates' in-flight requests and weights, for
// withinBound.
func loadTotals(cands []Candidate) (total int, sumW float64) {
	for i := range cands {
		total += cands[i].Load.InFlight
		sumW += cands[i].Weight
	}
	return total, sumW
}

// withinBound is consistent hashing with bounded loads' capacity test: a
// candidate may take a new request while in-flight+1 <= ceil(factor *
// (total+1) * share), where share is its weight's share of the total.
func withinBound(c *Candidate, factor float64, total int, sumW float64) bool {
	limit := math.Ceil(factor * float64(total+1) * c.Weight / sumW)
	return float64(c.Load.InFlight+1) <= limit
}

// median returns the median of v, reordering v.
func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	slices.Sort(v)
	n := len(v)
	if n%2 == 1 {
		return v[n/2]
	}
	return (v[n/2-1] + v[n/2]) / 2
}
