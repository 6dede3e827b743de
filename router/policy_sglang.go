package router

import (
	"fmt"
	"math"
	"sync"
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
//  3. else choose the least loaded (reason least-loaded);
//
// and in every case insert the prompt for the chosen backend. Scores are
// each candidate's matched share of the prompt.
type sglangPolicy struct {
	cfg SGLangConfig
	ix  *tree.Index // private

	idMu    sync.RWMutex
	ids     map[string]tree.BackendID // backend name -> id in ix
	results sync.Pool

	mu      sync.Mutex // guards depths and changed
	depths  []int32    // 1, 2, 3, ...: a claim at every block
	changed []tree.Claim
	origin  tree.NodeID
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
	ix, err := tree.New(tc)
	if err != nil {
		return nil, fmt.Errorf("router: sglang_cache_aware tree: %w", err)
	}
	p := &sglangPolicy{cfg: cfg, ix: ix, ids: make(map[string]tree.BackendID), origin: tree.NodeIDOf("sglang_cache_aware")}
	p.results.New = func() any { return new(tree.Result) }
	return p, nil
}

func (p *sglangPolicy) Name() string { return PolicySGLangCacheAware }

func (p *sglangPolicy) id(c *Candidate) (tree.BackendID, bool) {
	p.idMu.RLock()
	id, ok := p.ids[c.Name]
	p.idMu.RUnlock()
	if ok {
		return id, true
	}
	id, err := p.ix.EnsureBackend(c.Name)
	if err != nil {
		return 0, false
	}
	p.idMu.Lock()
	p.ids[c.Name] = id
	p.idMu.Unlock()
	return id, true
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
	deep := -1
	for i := range cands {
		scores[i] = 0
		id, ok := p.id(&cands[i])
		if !ok || total == 0 {
			continue
		}
		d := res.Depth(id)
		scores[i] = float64(min(ch.UnitsAt(int(d)), total)) / float64(total)
		if d > 0 && (deep < 0 || scores[i] > scores[deep] ||
			(scores[i] == scores[deep] && cands[i].Load.InFlight < cands[deep].Load.InFlight)) {
			deep = i
		}
	}

	d := Decision{Index: minI, Reason: ReasonLeastLoaded, Learn: true}
	switch {
	case imbalanced:
		d.Reason = ReasonImbalance
	case deep >= 0 && scores[deep] > p.cfg.CacheThreshold:
		d.Index, d.Reason = deep, ReasonPrefix
	}
	if !req.Explain && ch != nil && len(ch.Keys) > 0 {
		p.insert(ch, &cands[d.Index], req.Now)
	}
	return d
}

// insert records the whole prompt, block by block, for the chosen backend.
func (p *sglangPolicy) insert(ch *tree.Chain, c *Candidate, now time.Time) {
	id, ok := p.id(c)
	if !ok {
		return
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
	p.changed = p.ix.Learn(&every, id, ts, p.cfg.TreeTTL.Milliseconds(), p.origin, ms, p.changed[:0])
}
