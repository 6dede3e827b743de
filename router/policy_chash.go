package router

import (
	"fmt"
	"math"
	"slices"
	"sync"
	"unicode/utf8"
)

// ConsistentHashConfig configures consistent_hash, KubeAI's PrefixHash
// strategy: consistent hashing with bounded loads (CHWBL) over the start of
// the prompt.
type ConsistentHashConfig struct {
	// PrefixChars is how many characters of the rendered prompt are hashed.
	// 100, KubeAI's default.
	PrefixChars int `yaml:"prefix_chars"`
	// LoadFactor bounds a backend's in-flight requests to this factor times
	// the mean before the request walks on along the ring. 1.25, KubeAI's
	// default.
	LoadFactor float64 `yaml:"load_factor"`
	// VirtualNodes per backend on the ring. 256, KubeAI's default.
	VirtualNodes int `yaml:"virtual_nodes"`
}

// DefaultConsistentHashConfig returns KubeAI's defaults.
func DefaultConsistentHashConfig() ConsistentHashConfig {
	return ConsistentHashConfig{PrefixChars: 100, LoadFactor: 1.25, VirtualNodes: 256}
}

func (c ConsistentHashConfig) validate() []error {
	var errs []error
	if c.PrefixChars < 1 {
		errs = append(errs, fmt.Errorf("router: consistent_hash.prefix_chars must be at least 1, got %d", c.PrefixChars))
	}
	if !(c.LoadFactor >= 1) || math.IsInf(c.LoadFactor, 0) {
		errs = append(errs, fmt.Errorf("router: consistent_hash.load_factor must be at least 1, got %v", c.LoadFactor))
	}
	if c.VirtualNodes < 1 || c.VirtualNodes > 4096 {
		errs = append(errs, fmt.Errorf("router: consistent_hash.virtual_nodes must be in [1, 4096], got %d", c.VirtualNodes))
	}
	return errs
}

// consistentHashPolicy hashes the first PrefixChars characters of the
// rendered prompt onto a ring of VirtualNodes points per candidate and
// walks clockwise from there to the first candidate within the bounded
// load. Scores are each candidate's ring distance rank (0 = first reached).
type consistentHashPolicy struct {
	cfg ConsistentHashConfig

	mu    sync.RWMutex
	rings map[uint64]*hashRing // by candidate-set signature
}

// maxRings bounds the ring cache (one ring per distinct candidate set:
// models served by different backends, health changes).
const maxRings = 64

type hashRing struct {
	points []ringPoint // sorted by hash
}

type ringPoint struct {
	hash uint64
	cand int32 // index in the candidate list the ring was built for
}

func newConsistentHashPolicy(cfg ConsistentHashConfig) *consistentHashPolicy {
	return &consistentHashPolicy{cfg: cfg, rings: make(map[uint64]*hashRing)}
}

func (p *consistentHashPolicy) Name() string { return PolicyConsistentHash }

// Choose implements Policy.
func (p *consistentHashPolicy) Choose(req *Request, cands []Candidate, scores []float64) Decision {
	ring := p.ring(cands)
	h := uint64(req.Seed)
	if req.Prompt != nil {
		h = prefixHash(req.Prompt.Units, p.cfg.PrefixChars)
	}
	start, _ := slices.BinarySearchFunc(ring.points, h, func(pt ringPoint, h uint64) int {
		switch {
		case pt.hash < h:
			return -1
		case pt.hash > h:
			return 1
		}
		return 0
	})
	total, sumW := loadTotals(cands)
	for i := range scores {
		scores[i] = -1
	}
	chosen, rank := -1, 0
	for k := 0; k < len(ring.points) && rank < len(cands); k++ {
		i := int(ring.points[(start+k)%len(ring.points)].cand)
		if scores[i] >= 0 {
			continue
		}
		scores[i] = float64(rank)
		rank++
		if chosen < 0 && withinBound(&cands[i], p.cfg.LoadFactor, total, sumW) {
			chosen = i
		}
	}
	if chosen < 0 { // every candidate is at its bound: take the first reached
		chosen = int(ring.points[start%len(ring.points)].cand)
	}
	return Decision{Index: chosen, Reason: ReasonHash, Learn: true}
}

// ring returns the ring for this candidate list, building it once per
// distinct list.
func (p *consistentHashPolicy) ring(cands []Candidate) *hashRing {
	sig := uint64(len(cands))
	for i := range cands {
		sig = mix64(sig ^ cands[i].Hash)
	}
	p.mu.RLock()
	r := p.rings[sig]
	p.mu.RUnlock()
	if r != nil {
		return r
	}
	r = &hashRing{points: make([]ringPoint, 0, len(cands)*p.cfg.VirtualNodes)}
	for i := range cands {
		for v := 0; v < p.cfg.VirtualNodes; v++ {
			r.points = append(r.points, ringPoint{hash: mix64(cands[i].Hash + uint64(v)*0x9e3779b97f4a7c15), cand: int32(i)})
		}
	}
	slices.SortFunc(r.points, func(a, b ringPoint) int {
		switch {
		case a.hash < b.hash:
			return -1
		case a.hash > b.hash:
			return 1
		}
		return int(a.cand - b.cand)
	})
	p.mu.Lock()
	if len(p.rings) >= maxRings {
		clear(p.rings)
	}
	p.rings[sig] = r
	p.mu.Unlock()
	return r
}

// prefixHash is stableHash over the first chars UTF-8 characters of s.
func prefixHash(s []byte, chars int) uint64 {
	end := 0
	for c := 0; c < chars && end < len(s); c++ {
		if s[end] < utf8.RuneSelf {
			end++
			continue
		}
		_, size := utf8.DecodeRune(s[end:])
		end += size
	}
	return stableHash(s[:end])
}
