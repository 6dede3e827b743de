package workload

import (
	"math"
	"math/bits"
	"sort"
)

// rng is a small splitmix64 generator. We use our own rather than math/rand/v2
// so that a seed produces the same workload on every Go release: the standard
// library does not promise stable value streams for its helper methods.
type rng struct{ s uint64 }

const golden = 0x9e3779b97f4a7c15

func newRNG(seed uint64) *rng { return &rng{s: mix(seed, 0x5eed)} }

// Uint64 returns the next 64 pseudo-random bits.
func (r *rng) Uint64() uint64 {
	r.s += golden
	return fmix(r.s)
}

// Float64 returns a value in [0, 1).
func (r *rng) Float64() float64 { return float64(r.Uint64()>>11) / (1 << 53) }

// IntN returns a value in [0, n) (Lemire's multiply-shift; the tiny bias is
// irrelevant for workload shapes). n must be > 0.
func (r *rng) IntN(n int) int {
	hi, _ := bits.Mul64(r.Uint64(), uint64(n))
	return int(hi)
}

// Range returns a value in [lo, hi], both inclusive. hi < lo returns lo.
func (r *rng) Range(lo, hi int) int {
	if hi <= lo {
		return lo
	}
	return lo + r.IntN(hi-lo+1)
}

// Exp returns an exponentially distributed value with mean 1.
func (r *rng) Exp() float64 { return -math.Log(1 - r.Float64()) }

// Normal returns a standard normal value (Box-Muller).
func (r *rng) Normal() float64 {
	u1 := 1 - r.Float64() // (0, 1]
	u2 := r.Float64()
	return math.Sqrt(float64(-2*math.Log(u1))) * math.Cos(float64(2*math.Pi*u2))
}

// Shuffle permutes n elements with Fisher-Yates.
func (r *rng) Shuffle(n int, swap func(i, j int)) {
	for i := n - 1; i > 0; i-- {
		swap(i, r.IntN(i+1))
	}
}

// fmix is the splitmix64 output function: a bijective 64-bit mixer.
func fmix(z uint64) uint64 {
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

// mix combines two values into a well-distributed 64-bit id.
func mix(a, b uint64) uint64 { return fmix(fmix(a+golden) ^ (b * 0xff51afd7ed558ccd)) }

// textID derives the id of a text block from a namespace (one per generator
// and per kind of text inside it), the generator's seed and up to two indices.
// Different inputs give different ids with overwhelming probability, so two
// generators (or two seeds) never share text by accident.
func textID(ns textNamespace, seed uint64, a, b int) uint64 {
	return mix(mix(mix(uint64(ns), seed), uint64(a)), uint64(b))
}

// textNamespace separates the block ids of different generators and roles.
type textNamespace uint64

const (
	nsMooncake textNamespace = iota + 1
	nsMultiTurnCommon
	nsMultiTurnConversation
	nsMultiTurnUser
	nsMultiTurnAssistant
	nsSharedPrefixSystem
	nsSharedPrefixQuestion
	nsLongDocDocument
	nsLongDocQuestion
	nsHotPrefixPrefix
	nsHotPrefixSuffix
	nsCustomersContext
	nsCustomersQuery
	nsCustomersAnswer
	nsAgentSystem
	nsAgentRepository
	nsAgentAction
	nsAgentResult
)

// zipf samples ranks 0..n-1 with P(k) proportional to 1/(k+1)^s, by binary
// search over the cumulative distribution (exact for any s > 0, unlike
// rejection samplers that need s > 1).
type zipf struct{ cdf []float64 }

func newZipf(n int, s float64) *zipf {
	cdf := make([]float64, n)
	sum := 0.0
	for k := range n {
		sum += math.Pow(float64(k+1), -s)
		cdf[k] = sum
	}
	for k := range cdf {
		cdf[k] /= sum
	}
	return &zipf{cdf: cdf}
}

// Prob returns the probability of rank k.
func (z *zipf) Prob(k int) float64 {
	if k == 0 {
		return z.cdf[0]
	}
	return z.cdf[k] - z.cdf[k-1]
}

func (z *zipf) Sample(r *rng) int {
	u := r.Float64()
	k := sort.SearchFloat64s(z.cdf, u)
	// u < cdf[last] == 1 always, but guard against rounding.
	return min(k, len(z.cdf)-1)
}
