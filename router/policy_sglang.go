package router

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvmesh/kvmesh/tree"
)

// SGLangConfig configures sglang_cache_aware, the published algorithm of
// SGLang's router (sgl-router / SMG "cache_aware"), with its current CLI
// defaults.
type SGLangConfig struct {
	// CacheThreshold: route to the deepest holder only when it matches more
	// than this share of the prompt. 0.3, SGLang's default.
	CacheThreshold float64 `yaml:"cache_threshold"`
	// BalanceAbsThreshold and BalanceRelThreshold: the load is imbalanced
	// when max-min in-flight > abs AND max > rel*min; then the least loaded
	// candidate is chosen whatever the prefixes. 64 and 1.5, SGLang's
	// defaults.
	BalanceAbsThreshold float64 `yaml:"balance_abs_threshold"`
	BalanceRelThreshold float64 `yaml:"balance_rel_threshold"`
	// TreeCapacity is the size of the policy's private approximate tree in
	// blocks (claims). 1,048,576 blocks of 64 bytes are SGLang's default
	// max_tree_size of 2^26 characters; the tree takes 64 MiB.
	TreeCapacity int `yaml:"tree_capacity"`
	// TreeTTL is how long an inserted prefix stays in the private tree
	// unless capacity evicts it first (oldest first, as SGLang's LRU). 1 h.
	TreeTTL time.Duration `yaml:"tree_ttl"`
}

// DefaultSGLangConfig returns SGLang's defaults.
func DefaultSGLangConfig() SGLangConfig {
	return SGLangConfig{
		CacheThreshold:      0.3,
		BalanceAbsThreshold: 64,
		BalanceRelThreshold: 1.5,
		TreeCapacity:        1 << 20,
		TreeTTL:             time.Hour,
	}
}

func (c SGLangConfig) validate() []error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("router: sglang_cache_aware."+format, args...))
	}
	if !(c.CacheThreshold >= 0 && c.CacheThreshold <= 1) {
		bad("cache_threshold must be in [0, 1], got %v", c.CacheThreshold)
	}
	if !(c.BalanceAbsThreshold >= 0) || math.IsInf(c.BalanceAbsThreshold, 0) {
		bad("balance_abs_threshold must be non-negative, got %v", c.BalanceAbsThreshold)
	}
	if !(c.BalanceRelThreshold >= 1) || math.IsInf(c.BalanceRelThreshold, 0) {
		bad("balance_rel_threshold must be at least 1, got %v", c.BalanceRelThreshold)
	}
	if c.TreeCapacity < 16 || c.TreeCapacity > 1<<28 {
		bad("tree_capacity must be in [16, 2^28], got %d", c.TreeCapacity)
	}
	if c.TreeTTL <= 0 {
		bad("tree_ttl must be positive, got %v", c.TreeTTL)
	}
	return errs
}

// sglangPolicy reproduces SGLang's cache-aware routing with a private,
// unreplicated approximate tree (a tree.Index holding a claim at every
// block of every routed prompt):
//
//  1. if max-min in-flight > BalanceAbsThreshold and max > BalanceRelThreshold
//     * min, choose the least loaded candidate (reason imbalance);
//  2. else if the deepest holder in the private tree matches more than
//     CacheThreshold of the prompt, choose it (reason prefix);
//  3. else choose the candidate with the smallest tree, the most free cache
//     (reason miss; SGLang's get_smallest_tenant);
//
// and in every case insert the prompt for the chosen backend. A tree's size
// is the units inserted for the backend that it did not hold yet, capped at
// TreeCapacity blocks (SGLang evicts each tenant down to its maximum tree
// size). Ties go to the least loaded, then the first. Scores are each
// candidate's matched share of the prompt.
type sglangPolicy struct {
	cfg SGLangConfig
	ix  *tree.Index // private

	idMu    sync.RWMutex
	ids     map[string]*sglangBackend // by backend name
	results sync.Pool

	mu      sync.Mutex // guards depths and changed
	depths  []int32    // 1, 2, 3, ...: a claim at every block
	changed []tree.Claim
	origin  tree.NodeID
}

// sglangBackend is a backend's id in the private tree and its tree size.
type sglangBackend struct {
	id   tree.BackendID
	size atomic.Int64 // units
	seen atomic.Int64 // ms: when it was last a candidate (to the second)
}

func newSGLangPolicy(cfg SGLangConfig, shared *tree.Index) (*sglangPolicy, error) {
	tc := tree.DefaultConfig()
	if shared != nil {
		tc = shared.Config()
	}
	tc.Capacity = cfg.TreeCapacity
	// The private tree answers "deepest block held", which a claim at every
	// block gives without checkpoints.
	tc.CheckpointTokens = 0
	// A backend not among the candidates for a TreeTTL has nothing left in
	// the tree: its name can make room for new ones (prune).
	tc.ForgetRemovedMillis = cfg.TreeTTL.Milliseconds()
	ix, err := tree.New(tc)
	if err != nil {
		return nil, fmt.Errorf("router: sglang_cache_aware tree: %w", err)
	}
	p := &sglangPolicy{cfg: cfg, ix: ix, ids: make(map[string]*sglangBackend), origin: tree.NodeIDOf("sglang_cache_aware")}
	p.results.New = func() any { return new(tree.Result) }
	return p, nil
}

func (p *sglangPolicy) Name() string { return PolicySGLangCacheAware }

func (p *sglangPolicy) backend(c *Candidate, nowMs int64) *sglangBackend {
	p.idMu.RLock()
	sb := p.ids[c.Name]
	p.idMu.RUnlock()
	if sb == nil {
		sb = p.register(c.Name, nowMs)
		if sb == nil {
			return nil
		}
	}
	if nowMs-sb.seen.Load() >= 1000 {
		sb.seen.Store(nowMs)
	}
	return sb
}

// register gives name an id in the private tree. When the tree's registry
// is full (every backend name it ever saw: a Deployment's rollouts rename
// pods), the names not among the candidates for a TreeTTL are pruned
// first: everything they inserted has expired.
func (p *sglangPolicy) register(name string, nowMs int64) *sglangBackend {
	p.idMu.Lock()
	defer p.idMu.Unlock()
	if sb := p.ids[name]; sb != nil {
		return sb
	}
	id, err := p.ix.EnsureBackend(name)
	if errors.Is(err, tree.ErrTooManyBackends) && p.prune(nowMs) > 0 {
		id, err = p.ix.EnsureBackend(name)
	}
	if err != nil {
		return nil
	}
	if _, active := p.ix.Generation(id); !active {
		// A name pruned before (its removal kept by name) and a candidate
		// again: a new generation, or every insert for it would be refused.
		if _, err := p.ix.Invalidate(name, false, tree.MakeTimestamp(nowMs, 0), p.origin); err != nil {
			return nil
		}
	}
	sb := &sglangBackend{id: id}
	sb.seen.Store(nowMs)
	p.ids[name] = sb
	return sb
}

// prune removes from the private tree the backends last a candidate more
// than TreeTTL before nowMs and frees their ids; it returns how many. The
// removal is stamped when each was last seen, which the tree's forget
// horizon (TreeTTL) has passed. Caller holds idMu.
func (p *sglangPolicy) prune(nowMs int64) int {
	ttl := p.cfg.TreeTTL.Milliseconds()
	for name, sb := range p.ids {
		if seen := sb.seen.Load(); seen < nowMs-ttl {
			_, _ = p.ix.Invalidate(name, true, tree.MakeTimestamp(max(seen, 1), 0), p.origin)
			delete(p.ids, name)
		}
	}
	return len(p.ix.ForgetRemoved(nowMs, nil))
}

// Choose implements Policy.
func (p *sglangPolicy) Choose(req *Request, cands []Candidate, scores []float64) Decision {
	minI, maxLoad := 0, 0
	for i := range cands {
		f := cands[i].Load.InFlight
		if f < cands[minI].Load.InFlight {
			minI = i
		}
		maxLoad = max(maxLoad, f)
	}
	minLoad := float64(cands[minI].Load.InFlight)
	imbalanced := float64(maxLoad)-minLoad > p.cfg.BalanceAbsThreshold && float64(maxLoad) > p.cfg.BalanceRelThreshold*minLoad

	res := p.results.Get().(*tree.Result)
	defer p.results.Put(res)
	ch := req.Chain
	total := req.Units()
	if ch != nil && len(ch.Keys) > 0 {
		p.ix.Lookup(ch, req.Now.UnixMilli(), res)
	} else {
		res.Matches, res.Deepest = res.Matches[:0], 0
	}
	deep, smallest := -1, -1
	var smallestSize int64
	for i := range cands {
		scores[i] = 0
		sb := p.backend(&cands[i], req.Now.UnixMilli())
		if sb == nil {
			continue
		}
		if size := sb.size.Load(); smallest < 0 || size < smallestSize ||
			(size == smallestSize && cands[i].Load.InFlight < cands[smallest].Load.InFlight) {
			smallest, smallestSize = i, size
		}
		if total == 0 {
			continue
		}
		d := res.Depth(sb.id)
		scores[i] = float64(min(ch.UnitsAt(int(d)), total)) / float64(total)
		if d > 0 && (deep < 0 || scores[i] > scores[deep] ||
			(scores[i] == scores[deep] && cands[i].Load.InFlight < cands[deep].Load.InFlight)) {
			deep = i
		}
	}

	d := Decision{Index: minI, Reason: ReasonImbalance, Learn: true}
	switch {
	case imbalanced:
	case deep >= 0 && scores[deep] > p.cfg.CacheThreshold:
		d.Index, d.Reason = deep, ReasonPrefix
	case smallest >= 0:
		d.Index, d.Reason = smallest, ReasonMiss
	}
	held := scores[d.Index] * float64(total)
	d.OwnMatch, d.Matched = true, int(held)
	if !req.Explain && ch != nil && len(ch.Keys) > 0 {
		p.insert(ch, &cands[d.Index], req.Now, int64(float64(total)-held))
	}
	return d
}

// insert records the whole prompt, block by block, for the chosen backend,
// whose tree grows by the added units it did not hold.
func (p *sglangPolicy) insert(ch *tree.Chain, c *Candidate, now time.Time, added int64) {
	sb := p.backend(c, now.UnixMilli())
	if sb == nil {
		return
	}
	limit := int64(p.cfg.TreeCapacity) * int64(ch.UnitsPerBlock)
	for {
		old := sb.size.Load()
		if sb.size.CompareAndSwap(old, min(old+max(added, 0), limit)) {
			break
		}
	}
	n := len(ch.Keys)
	p.mu.Lock()
	defer p.mu.Unlock()
	for len(p.depths) < n {
		p.depths = append(p.depths, int32(len(p.depths)+1))
	}
	every := *ch
	every.Learn = p.depths[:n]
	ms := now.UnixMilli()
	ts := tree.MakeTimestamp(ms, 0)
	p.changed = p.ix.Learn(&every, sb.id, ts, p.cfg.TreeTTL.Milliseconds(), p.origin, ms, p.changed[:0])
}
