package router

import (
	"errors"
	"fmt"
	"math"
	"sync/atomic"
	"time"
)

// KVMeshConfig weighs saved prefill against load in the kvmesh policy.
//
// Cost model (lower is better), in prompt units (bytes in byte mode, tokens
// in token mode), for a prompt of T units of which candidate i holds M_i:
//
//	cost_i = PrefillWeight * (T - M_i)
//	       + avg * (LoadWeight * inflight_i + QueueWeight * w_i * waiting_i) / weight_i
//	       + avg * KVUsageWeight * w_i * max(0, kv_i - KVUsageThreshold) / (1 - KVUsageThreshold)
//
// where avg is the average prompt size seen recently, w_i the freshness of
// the backend's load signal (1 fresh .. 0 stale) and weight_i its
// configured capacity. The first term is the prefill the backend must
// compute; the second estimates the work queued ahead of the request; the
// third keeps requests off a backend about to preempt for lack of KV space.
type KVMeshConfig struct {
	// PrefillWeight prices one unit of prompt the chosen backend must
	// compute. 1: the unit of cost.
	PrefillWeight float64 `yaml:"prefill_weight"`
	// LoadWeight prices each request this router has in flight at the
	// backend, in average prompts. 0.25: under continuous batching an
	// in-flight request is mostly decoding, which slows a new prefill far
	// less than a whole prompt's worth of compute; with 0.25 a conversation
	// stays on its backend until that backend has about four more requests
	// in flight than an idle one per prompt-length of matched prefix.
	LoadWeight float64 `yaml:"load_weight"`
	// QueueWeight prices each request waiting in the backend's queue (from
	// ORCA or /metrics), in average prompts. 1: a waiting request must be
	// prefilled before ours starts.
	QueueWeight float64 `yaml:"queue_weight"`
	// KVUsageThreshold and KVUsageWeight: above this KV-cache usage (0..1)
	// a backend starts preempting; each full step from the threshold to 100%
	// costs KVUsageWeight average prompts. 0.9 and 4: only a nearly full
	// cache is penalized, and then strongly.
	KVUsageThreshold float64 `yaml:"kv_usage_threshold"`
	KVUsageWeight    float64 `yaml:"kv_usage_weight"`
	// LoadOverrideFactor: when the backend chosen for its prefix has a queue
	// (in-flight + waiting) above this many times the median queue of the
	// candidates, the request goes to the best other backend instead. 2, as
	// Ranvier: a backend twice as busy as the typical one costs more in
	// queueing than most prefix hits save.
	LoadOverrideFactor float64 `yaml:"load_override_factor"`
	// LoadOverrideFloor is the least queue that counts as overloaded,
	// whatever the median (with an idle fleet the median is 0). 4: vLLM
	// batches dozens of sequences, a handful is no overload.
	LoadOverrideFloor float64 `yaml:"load_override_floor"`
	// BoundedLoadFactor bounds ties placed by rendezvous hashing: a backend
	// whose queue (in-flight plus waiting) would exceed this factor times
	// the mean is skipped.
	// 1.25, the factor of consistent hashing with bounded loads (Mirrokni et
	// al.) that KubeAI uses too.
	BoundedLoadFactor float64 `yaml:"bounded_load_factor"`
	// HotWindow and HotThreshold define a hot prefix: matched at least
	// HotThreshold times within HotWindow. 10 s and 20 (2 requests/s): a
	// prefix that busy alone keeps a backend's prefill busy.
	HotWindow    time.Duration `yaml:"hot_window"`
	HotThreshold float64       `yaml:"hot_threshold"`
	// HotMaxHolders caps how many backends a hot prefix is replicated to
	// (holders at its deepest depth). 2: one more holder halves the load a
	// hot prefix puts on each while keeping the fleet's cache mostly
	// unduplicated; beyond that, diversions are plain load overrides.
	HotMaxHolders int `yaml:"hot_max_holders"`
	// HotSlots is the size of the hot-prefix counter. 4096 slots (64 KiB)
	// track far more concurrently hot prefixes than any fleet has.
	HotSlots int `yaml:"hot_slots"`
	// InitialPromptUnits is the average prompt size assumed before any
	// request was seen. 4096 units (about 1,000 tokens in byte mode).
	InitialPromptUnits float64 `yaml:"initial_prompt_units"`
}

// DefaultKVMeshConfig returns the defaults documented on KVMeshConfig.
func DefaultKVMeshConfig() KVMeshConfig {
	return KVMeshConfig{
		PrefillWeight:      1,
		LoadWeight:         0.25,
		QueueWeight:        1,
		KVUsageThreshold:   0.9,
		KVUsageWeight:      4,
		LoadOverrideFactor: 2,
		LoadOverrideFloor:  4,
		BoundedLoadFactor:  1.25,
		HotWindow:          10 * time.Second,
		HotThreshold:       20,
		HotMaxHolders:      2,
		HotSlots:           4096,
		InitialPromptUnits: 4096,
	}
}

func (c KVMeshConfig) validate() []error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf("router: kvmesh."+format, args...)) }
	nonNeg := func(name string, v float64) {
		if !(v >= 0) || math.IsInf(v, 0) {
			bad("%s must be a non-negative number, got %v", name, v)
		}
	}
	nonNeg("prefill_weight", c.PrefillWeight)
	nonNeg("load_weight", c.LoadWeight)
	nonNeg("queue_weight", c.QueueWeight)
	nonNeg("kv_usage_weight", c.KVUsageWeight)
	nonNeg("load_override_floor", c.LoadOverrideFloor)
	nonNeg("hot_threshold", c.HotThreshold)
	if c.PrefillWeight == 0 && c.LoadWeight == 0 && c.QueueWeight == 0 {
		errs = append(errs, errors.New("router: kvmesh: prefill_weight, load_weight and queue_weight are all 0"))
	}
	if !(c.KVUsageThreshold >= 0 && c.KVUsageThreshold < 1) {
		bad("kv_usage_threshold must be in [0, 1), got %v", c.KVUsageThreshold)
	}
	if !(c.LoadOverrideFactor >= 1) || math.IsInf(c.LoadOverrideFactor, 0) {
		bad("load_override_factor must be at least 1, got %v", c.LoadOverrideFactor)
	}
	if !(c.BoundedLoadFactor >= 1) || math.IsInf(c.BoundedLoadFactor, 0) {
		bad("bounded_load_factor must be at least 1, got %v", c.BoundedLoadFactor)
	}
	if c.HotWindow <= 0 {
		bad("hot_window must be positive, got %v", c.HotWindow)
	}
	if c.HotMaxHolders < 1 {
		bad("hot_max_holders must be at least 1, got %d", c.HotMaxHolders)
	}
	if c.HotSlots < 1 || c.HotSlots > 1<<24 {
		bad("hot_slots must be in [1, 2^24], got %d", c.HotSlots)
	}
	if !(c.InitialPromptUnits > 0) || math.IsInf(c.InitialPromptUnits, 0) {
		bad("initial_prompt_units must be positive, got %v", c.InitialPromptUnits)
	}
	return errs
}

// kvmeshPolicy is the default policy: cost-based choice between saved
// prefill and load, load override with hot-prefix replication, and
// rendezvous hashing for ties so that nodes agree on new prefixes. Scores
// are the costs (lower is better).
type kvmeshPolicy struct {
	cfg       KVMeshConfig
	hot       *hotCounter
	avgPrompt atomic.Uint64 // float64 bits: moving average of prompt units
}

// promptEWMA is the weight of one prompt in the moving average of prompt
// sizes: the last ~64 requests.
const promptEWMA = 1.0 / 64

func newKVMeshPolicy(cfg KVMeshConfig) *kvmeshPolicy {
	p := &kvmeshPolicy{cfg: cfg, hot: newHotCounter(cfg.HotSlots, int64(cfg.HotWindow))}
	p.avgPrompt.Store(math.Float64bits(cfg.InitialPromptUnits))
	return p
}

func (p *kvmeshPolicy) Name() string { return PolicyKVMesh }

// Choose implements Policy. It allocates nothing.
func (p *kvmeshPolicy) Choose(req *Request, cands []Candidate, scores []float64) Decision {
	cfg := &p.cfg
	n := len(cands)
	total := float64(req.Units())
	avg := math.Float64frombits(p.avgPrompt.Load())
	if !req.Explain && req.Attempt == 0 && total > 0 {
		p.avgPrompt.Store(math.Float64bits(avg + (total-avg)*promptEWMA))
	}
	queues := req.scratch[:n]
	best := 0
	for i := range cands {
		c := &cands[i]
		l := &c.Load
		queues[i] = l.Queue() / c.Weight
		cost := cfg.PrefillWeight * (total - float64(c.MatchedUnits(req.Chain)))
		cost += avg * (cfg.LoadWeight*float64(l.InFlight) + cfg.QueueWeight*l.SignalWeight*l.Waiting) / c.Weight
		if l.Has&HasKVCacheUsage != 0 && l.KVUsage > cfg.KVUsageThreshold {
			cost += avg * cfg.KVUsageWeight * l.SignalWeight * (l.KVUsage - cfg.KVUsageThreshold) / (1 - cfg.KVUsageThreshold)
		}
		scores[i] = cost
		if cost < scores[best] || (cost == scores[best] && c.Matched > cands[best].Matched) {
			best = i
		}
	}

	// Ties: every candidate holding the same depth as the cheapest one
	// (all of them on a total miss, all holders of a shared system prompt)
	// is placed by rendezvous hashing of the first block beyond that depth,
	// skipping candidates above the bounded load, so that nodes which have
	// not seen the prefix yet agree on where it goes.
	depth := cands[best].Matched
	ties := 0
	var totalQ, sumW float64
	for i := range cands {
		if cands[i].Matched == depth {
			ties++
		}
		totalQ += queues[i] * cands[i].Weight
		sumW += cands[i].Weight
	}
	if ties > 1 {
		key := tieKey(req, depth)
		if w := rendezvous(key, cands, func(i int) bool {
			// Bounded load (Mirrokni et al.) on the queue: in-flight plus
			// the backend's own waiting requests, weighted by freshness.
			limit := math.Ceil(cfg.BoundedLoadFactor * (totalQ + 1) * cands[i].Weight / sumW)
			return cands[i].Matched == depth && queues[i]*cands[i].Weight+1 <= limit
		}); w >= 0 {
			best = w
		}
	}
	d := Decision{Index: best, Learn: true}
	switch c := &cands[best]; {
	case req.Deepest == 0:
		d.Reason = ReasonMiss
	case c.Matched == req.Deepest:
		d.Reason = ReasonPrefix
	default:
		d.Reason = ReasonCost
	}
	if cands[best].Matched == 0 || n == 1 {
		return d
	}

	// Load override: the chosen holder is far busier than the typical
	// candidate. A hot prefix gets a second holder (learned there too);
	// otherwise the request is diverted and the claim stays where it was.
	hotKey := uint64(req.Chain.Keys[cands[best].Matched-1])
	var hits float64
	if req.Explain || req.Attempt > 0 {
		hits = p.hot.count(hotKey, req.Now.UnixNano())
	} else {
		hits = p.hot.observe(hotKey, req.Now.UnixNano())
	}
	limit := cfg.LoadOverrideFactor * max(median(append(req.scratch[n:n], queues...)), cfg.LoadOverrideFloor)
	if queues[best] <= limit {
		return d
	}
	alt := -1
	for i := range cands {
		if i != best && queues[i] <= limit && (alt < 0 || scores[i] < scores[alt]) {
			alt = i
		}
	}
	if alt < 0 {
		return d // everyone is overloaded: stay with the prefix
	}
	holders := 0
	for i := range cands {
		if cands[i].Matched == cands[best].Matched {
			holders++
		}
	}
	if hits >= cfg.HotThreshold && holders < cfg.HotMaxHolders {
		return Decision{Index: alt, Reason: ReasonReplicate, Learn: true}
	}
	return Decision{Index: alt, Reason: ReasonLoadOverride, Learn: false}
}

// tieKey is the key that places a prompt among candidates holding it to
// the same depth (in blocks): the key at the first learn position (a
// message end, a checkpoint, the last full block) strictly deeper than that
// depth, the last full block's when there is none, the seed when the prompt
// is shorter than a block.
//
// Not the key of the very next block: prompts that share a long opening
// (a system prompt, a document) beyond the deepest claim would all get the
// same key and pile onto one backend. A learn position is where the
// prompt's own claims will be, so the key differs between conversations,
// is the same for identical prompts (nodes that have not heard of them
// agree), and a conversation's first message end is shared by its later
// turns.
func tieKey(req *Request, depth int32) uint64 {
	ch := req.Chain
	if ch == nil || len(ch.Keys) == 0 {
		return uint64(req.Seed)
	}
	at := int32(len(ch.Keys))
	for _, d := range ch.Learn {
		if d > depth && d <= at {
			at = d
			break
		}
	}
	return uint64(ch.Keys[at-1])
}
