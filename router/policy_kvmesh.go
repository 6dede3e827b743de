package router

import (
	"math"
	"sync/atomic"
)

// kvmeshPolicy is the default policy: cost-based choice between saved
// prefill and queued work, rendezvous hashing among equally good
// candidates so that nodes agree on new prefixes, and a load override with
// hot-prefix replication. Scores are the costs (lower is better).
type kvmeshPolicy struct {
	cfg       KVMeshConfig
	hot       *hotCounter
	fleet     fleetLoad     // the fleet's decayed mean load (KVMeshConfig.BlockFleetLoad)
	avgPrompt atomic.Uint64 // float64 bits: moving average of prompt units
	// holdAvg is late binding's average prompt: the mesh's, this node's
	// prompts and its peers' (promptavg.go); avgPrompt alone, the same
	// figure.
	holdAvg *promptAverage
}

// maxReuseRatio caps r/(1-r) (at r = 0.95); initialReuse is r before any
// answer reported cached tokens (a unit written is read once: below
// SpreadMinReuse's default, the spread term is off).
const (
	maxReuseRatio = 19
	initialReuse  = 0.5
)

// promptEWMA is the weight of one prompt in the moving average of prompt
// sizes: the last ~64 requests.
const promptEWMA = 1.0 / 64

// maxPromptEWMA caps promptWeight: an average over fewer than ~8 of a
// node's own prompts would swing with each long one.
const maxPromptEWMA = 1.0 / 8

// promptWeight is one prompt's weight in the moving average at a node
// that routes share (Request.MeshShare) of its mesh's requests:
// promptEWMA/share, at most maxPromptEWMA, so that the average follows
// the mesh's last ~64 prompts, not the node's last 64 (8 nodes: the last
// ~512). Prompts that grow over time (coding agents' contexts) otherwise
// leave each node of a mesh with an average far below the prompts it
// routes, and every term priced in average prompts (the queue, decoding
// and spread terms, the load override's floor) too cheap: on the agent
// workload 8 nodes held 0.54-0.71 of the average one node had, and made
// a third of its load-driven moves.
func promptWeight(share float64) float64 { return perShare(promptEWMA, maxPromptEWMA, share) }

// perShare is the weight w of one observation in a moving average over a
// router's traffic, for a node that sees share (Request.MeshShare) of its
// mesh's: w/share, at most limit, so that the average spans as much of the
// mesh's traffic as a lone router's does (w alone, or share unknown).
func perShare(w, limit, share float64) float64 {
	if share > 0 && share < 1 {
		return min(w/share, limit)
	}
	return w
}

func newKVMeshPolicy(cfg KVMeshConfig) *kvmeshPolicy {
	p := &kvmeshPolicy{cfg: cfg, hot: newHotCounter(cfg.HotSlots, int64(cfg.HotWindow))}
	p.avgPrompt.Store(math.Float64bits(cfg.InitialPromptUnits))
	p.holdAvg = newPromptAverage(cfg.InitialPromptUnits)
	return p
}

func (p *kvmeshPolicy) Name() string { return PolicyKVMesh }

// load is load_i of the cost model: the work queued at the candidate
// ahead of a new request, in prompt units per unit of weight. Bookings are
// the mesh's: this node's exact ones plus its peers' last reported ones.
func (cfg *KVMeshConfig) load(c *Candidate, avg float64) float64 {
	l := &c.Load
	load := cfg.PendingWeight * (l.PendingPrefill + l.PeerPendingPrefill + cfg.overdue(l, avg))
	if others := l.Waiting - l.OwnAtSignal; others > 0 {
		load += avg * cfg.QueueWeight * l.SignalWeight * others
	}
	decoding := max(float64(l.InFlight-l.PendingRequests)+max(l.PeerInFlight-l.PeerPendingRequests, 0), l.SignalWeight*l.Running)
	load += avg * cfg.LoadWeight * decoding
	return load / c.Weight
}

// overdue is the prefill the backend's oldest pending request hides
// (KVMeshConfig.OverdueFactor): 0 while its progress at the learned rate
// is within OverdueFactor times its booking plus OverdueSlack average
// prompts; past that, what is left of its whole prompt beyond its
// booking (never less than 0: the booking keeps counting in full, as
// PendingWeight says).
func (cfg *KVMeshConfig) overdue(l *LoadView, avg float64) float64 {
	if cfg.OverdueFactor <= 0 || l.HeadProgress <= cfg.OverdueFactor*l.HeadBooked+cfg.OverdueSlack*avg {
		return 0
	}
	return max(l.HeadPrompt-l.HeadProgress-l.HeadBooked, 0)
}

// active is the mesh's requests in flight at the backend (this router's
// and its peers'), or the backend's reported running count if larger.
func (l *LoadView) active() float64 {
	return max(float64(l.InFlight)+l.PeerInFlight, l.SignalWeight*l.Running)
}

// Choose implements Policy. It allocates nothing.
func (p *kvmeshPolicy) Choose(req *Request, cands []Candidate, scores []float64) Decision {
	cfg := &p.cfg
	n := len(cands)
	total := float64(req.Units())
	avg := math.Float64frombits(p.avgPrompt.Load())
	own := 0.0 // a prompt counts in the averages once, at its first decision
	if !req.Explain && req.Attempt == 0 && req.Held == 0 && total > 0 {
		own = total
		p.avgPrompt.Store(math.Float64bits(avg + (total-avg)*promptWeight(req.MeshShare)))
	}
	holdAvg := p.holdAvg.observe(req.PeerPrompts, own, req.MeshShare)
	scratch := req.scratch
	if cap(scratch) < 2*n { // a caller outside this package cannot set it
		scratch = make([]float64, 2*n)
	}
	loads := scratch[:n]
	minLoad := math.Inf(1)
	for i := range cands {
		loads[i] = cfg.load(&cands[i], avg)
		minLoad = min(minLoad, loads[i])
	}
	block := p.blockOn(req, loads, minLoad, avg)
	best, unblocked := 0, 0 // unblocked: the cheapest without the blocking term
	unblockedCost := math.Inf(1)
	// spread_i's factor, the same for every candidate: how often a unit
	// written is read again (the reuse ratio r/(1-r), r the share of prompt
	// tokens the backends answered were cached), per unit of the prompt a
	// candidate lacks, per active request above the mean.
	spread, meanActive := 0.0, 0.0
	if total > 0 && cfg.SpreadWeight > 0 {
		for i := range cands {
			meanActive += cands[i].Load.active() / cands[i].Weight
		}
		meanActive /= float64(n)
		r := req.reuse()
		spread = cfg.SpreadWeight * avg * max(min(r/(1-r), maxReuseRatio)-cfg.SpreadMinReuse, 0) / total // r = 1: +Inf, capped
	}
	held := 0.0 // the most of the prompt any candidate holds (CopyWriteShare)
	if cfg.CopyWriteShare > 0 {
		for i := range cands {
			held = max(held, cands[i].SavedUnits(req.Chain))
		}
	}
	for i := range cands {
		c := &cands[i]
		l := &c.Load
		doubted := c.DoubtedWorth(req.Chain)
		fresh := total - c.TrustedUnits(req.Chain) - doubted // what it would compute and write
		write := cfg.CacheWeight * (1 - c.Unfilled)
		cost := (cfg.PrefillWeight+write)*fresh + (1-cfg.DoubtCacheShare)*write*doubted + loads[i]
		if copied := held - (total - fresh); copied > 0 { // another candidate holds it: a second copy
			cost += cfg.CopyWriteShare * cfg.CacheWeight * c.Unfilled * copied
		}
		if cfg.shallow(fresh, total) {
			cost += write * (total - fresh) // charged for writing the whole prompt
		}
		if spread > 0 {
			cost += spread * fresh * max(l.active()/c.Weight-meanActive, 0)
		}
		if l.Has&HasKVCacheUsage != 0 {
			cost += l.SignalWeight * cfg.KVPenalty(total, l.KVUsage)
		}
		if block {
			if cheaper(cost, c, unblockedCost, &cands[unblocked]) { // for the fence
				unblocked, unblockedCost = i, cost
			}
			cost += cfg.blocking(l, fresh, loads[i]*c.Weight, req.MeshShare)
		}
		scores[i] = cost
		if cheaper(cost, c, scores[best], &cands[best]) {
			best = i
		}
	}
	// The blocking term may not move the request to a much longer queue
	// (KVMeshConfig.BlockFence): the best within the fence instead.
	fence := cfg.fenceLoad(block, loads, unblocked, avg)
	if loads[best] > fence {
		best = unblocked
		for i := range cands {
			if loads[i] <= fence && cheaper(scores[i], &cands[i], scores[best], &cands[best]) {
				best = i
			}
		}
	}

	if req.HoldOK && cfg.holds(req, cands, best, total, holdAvg) {
		return Decision{Index: best, Reason: ReasonCost, Hold: true}
	}

	// Ties: the candidates within the band of the cheapest (all of them on
	// a miss to an idle fleet, all idle holders of a shared system prompt)
	// are placed by rendezvous hashing of the prompt's next learn position
	// beyond their match, so that nodes which have not seen the prefix yet
	// agree on where it goes.
	within := scores[best] + cfg.TieBand*avg
	tied := func(i int) bool { return scores[i] <= within && loads[i] <= fence }
	ties := 0
	var depth int32
	for i := range cands {
		if tied(i) {
			ties++
			depth = max(depth, cands[i].Matched)
		}
	}
	if ties > 1 {
		if w := rendezvous(tieKey(req, depth), cands, tied); w >= 0 {
			best = w
		}
	}
	d := Decision{Index: best, Learn: true}
	switch c := &cands[best]; {
	case req.Deepest > 0 && c.Matched == req.Deepest:
		d.Reason = ReasonPrefix // the deepest trusted match (a doubted claim may go deeper)
	case max(c.Doubted, c.Near) > req.Deepest:
		d.Reason = ReasonDoubt
	case req.Deepest == 0:
		d.Reason = ReasonMiss
	default:
		d.Reason = ReasonCost
	}
	if cands[best].Matched == 0 || n == 1 || req.Chain == nil || int(cands[best].Matched) > len(req.Chain.Keys) {
		return d // (no key to count a hot prefix by: a caller's match beyond its chain)
	}

	// Load override: the chosen holder is far busier than the typical
	// candidate. A hot prefix gets a second holder (learned there too);
	// otherwise the request is diverted: the shared prefix's claim stays
	// with the holder, and the backend it goes to learns the request's own
	// part, which it computes and keeps (the conversation's next turn finds
	// it there).
	hotKey := uint64(req.Chain.Keys[cands[best].Matched-1])
	var hits float64
	if req.Explain || req.Attempt > 0 {
		hits = p.hot.count(hotKey, req.Now.UnixNano())
	} else {
		hits = p.hot.observe(hotKey, req.Now.UnixNano())
	}
	if req.MeshShare > 0 && req.MeshShare < 1 {
		hits /= req.MeshShare // this node sees its share of the mesh's requests
	}
	if alt := cfg.waitGuard(req, cands, loads, best, total, avg); alt >= 0 {
		return Decision{Index: alt, Reason: ReasonLoadOverride, Learn: true, LearnAbove: cands[best].Matched}
	}
	limit := cfg.LoadOverrideFactor * max(median(append(scratch[n:n], loads...)), cfg.LoadOverrideFloor*avg)
	if loads[best] <= limit {
		return d
	}
	alt := -1
	for i := range cands {
		if i != best && loads[i] <= limit && (alt < 0 || scores[i] < scores[alt]) {
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
	return Decision{Index: alt, Reason: ReasonLoadOverride, Learn: true, LearnAbove: cands[best].Matched}
}

// shallow says whether a candidate that would compute fresh units of a
// prompt of total holds too little of it to earn the cache weight's
// credit (KVMeshConfig.ShallowMatchShare).
func (cfg *KVMeshConfig) shallow(fresh, total float64) bool {
	return cfg.ShallowMatchShare > 0 && total-fresh < cfg.ShallowMatchShare*total
}

// cheaper says whether candidate c at cost beats other at otherCost: a
// lower cost, or the same and a deeper match.
func cheaper(cost float64, c *Candidate, otherCost float64, other *Candidate) bool {
	return cost < otherCost || (cost == otherCost && c.Matched > other.Matched)
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
