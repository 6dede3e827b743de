package bench

import (
	"math"

	"github.com/kvmesh/kvmesh/router"
)

// The truth arm ("kvmesh+truth"): the kvmesh policy, every term of its
// cost model as configured, deciding with the engines' true cache contents
// in place of its claims. It splits the gap between kvmesh and the oracle
// in two:
//
//   - kvmesh against kvmesh+truth is the price of kvmesh's knowledge: the
//     same cost model, with the belief's errors (claims the engine evicted,
//     prefixes it holds that no claim says) and the bookings made on them;
//   - kvmesh+truth against the oracle is the price of the cost model: the
//     terms the oracle does not have (spread, second copies, the waiting
//     signal, the load override) and the load kvmesh sees (its bookings,
//     scraped running counts) against the oracle's live view.
//
// Before the inner policy chooses, each candidate's match is set to what
// the engine would serve from its cache now (Oracle's CachedPrefix), in
// the request's prompt units, and every doubt is cleared: the match is
// known. The dispatch then books what the chosen backend really lacks, as
// the oracle does, and the claims the router learns are kept as usual (the
// policy does not read them).

// chooseTruth is Choose for an oracle with Truth set: the candidates'
// matches from the engines, then Truth decides. r is the registered body
// (nil: none, the matches are all 0).
func (o *Oracle) chooseTruth(req *router.Request, cands []router.Candidate, scores []float64, r *oracleReq) router.Decision {
	var m promptMatch
	if r != nil && r.path != "" {
		m = newPromptMatch(r.body, r.path)
		defer m.release()
	}
	var deepest int32
	for i := range cands {
		c := &cands[i]
		cached, prompt := 0, 0
		if b := o.backends[c.Name]; b != nil && r != nil && r.path != "" {
			if ct, pt, err := m.at(b.b); err == nil {
				cached, prompt = ct, pt
			}
		}
		c.Matched = truthBlocks(req, cached, prompt)
		c.Discount, c.Lost = 0, false
		c.Near, c.NearTrust, c.Doubted, c.DoubtTrust = 0, 0, 0, 0
		deepest = max(deepest, c.Matched)
	}
	req.Deepest = deepest
	return o.Truth.Choose(req, cands, scores)
}

// truthBlocks converts cached of prompt tokens into the request's chain
// blocks: the same share of its units, whole blocks, at most the chain's.
func truthBlocks(req *router.Request, cached, prompt int) int32 {
	ch := req.Chain
	if ch == nil || ch.UnitsPerBlock <= 0 || cached <= 0 || prompt <= 0 {
		return 0
	}
	units := float64(ch.Units) * math.Min(float64(cached)/float64(prompt), 1)
	return int32(min(int(units)/ch.UnitsPerBlock, len(ch.Keys)))
}
