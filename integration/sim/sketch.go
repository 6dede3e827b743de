package sim

import (
	"math"
	"sync/atomic"
)

// LatencySketch counts latencies in log-spaced buckets, each sketchRatio
// (1%) wider than the one before, from sketchMin (0.1 ms) up: a quantile
// of any number of observations comes out within half a bucket (0.5%) of
// the exact one, in constant memory. It is what the engine measures of its
// own time to first token (Instance.Stats), in simulated seconds from the
// request's arrival at the engine: the queue and the prefill, not the
// router, the HTTP hops or the load generator in front of it.
type LatencySketch struct {
	Counts [sketchBuckets]uint64
}

const (
	sketchMin     = 1e-4
	sketchRatio   = 1.01
	sketchBuckets = 1852 // sketchMin * sketchRatio^1852 > 10,000 s; longer ones share the last bucket
)

var (
	sketchLogRatio = math.Log(sketchRatio)
	sketchMax      = sketchMin * math.Pow(sketchRatio, sketchBuckets-1) // the last bucket's floor
)

// sketchIndex is the bucket of a latency of sec seconds.
func sketchIndex(sec float64) int {
	switch {
	case !(sec > sketchMin): // also NaN
		return 0
	case sec >= sketchMax: // also +Inf
		return sketchBuckets - 1
	}
	return min(int(math.Log(sec/sketchMin)/sketchLogRatio), sketchBuckets-1)
}

// N is how many latencies s holds.
func (s *LatencySketch) N() uint64 {
	var n uint64
	for _, c := range s.Counts {
		n += c
	}
	return n
}

// Add adds o's counts to s (a fleet's sketch is the sum of its engines').
func (s *LatencySketch) Add(o *LatencySketch) {
	for i, c := range o.Counts {
		s.Counts[i] += c
	}
}

// Quantile is the q-quantile (0 <= q <= 1) of the latencies s holds: the
// geometric middle of the bucket holding the ceil(q*N)-th smallest (the
// smallest for q = 0); 0 when s is empty.
func (s *LatencySketch) Quantile(q float64) float64 {
	n := s.N()
	if n == 0 {
		return 0
	}
	rank := max(uint64(math.Ceil(min(max(q, 0), 1)*float64(n))), 1)
	var seen uint64
	for i, c := range s.Counts {
		if seen += c; seen >= rank {
			return sketchMin * math.Pow(sketchRatio, float64(i)+0.5)
		}
	}
	return sketchMin * math.Pow(sketchRatio, sketchBuckets-0.5) // not reached: seen ends at n
}

// sketchRecorder is a LatencySketch that engine goroutines add to without
// a lock.
type sketchRecorder struct {
	counts [sketchBuckets]atomic.Uint64
}

// observe counts one latency of sec seconds.
func (r *sketchRecorder) observe(sec float64) { r.counts[sketchIndex(sec)].Add(1) }

// snapshot copies the counts (each read atomically; observations made
// during the copy may be partly in it).
func (r *sketchRecorder) snapshot() LatencySketch {
	var s LatencySketch
	for i := range r.counts {
		s.Counts[i] = r.counts[i].Load()
	}
	return s
}
