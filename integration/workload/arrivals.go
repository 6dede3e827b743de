package workload

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// poissonArrivals gives reqs, in order, the arrival times of a Poisson
// process of rate requests per second starting at 0 (the first request
// arrives at 0). rate <= 0 puts every request at 0: a burst, or closed-loop
// replay where the harness paces requests itself.
func poissonArrivals(reqs []Request, rate float64, r *rng) {
	t := 0.0
	for i := range reqs {
		if i > 0 && rate > 0 {
			t += r.Exp() / rate
		}
		reqs[i].At = time.Duration(t * float64(time.Second))
	}
}

// optionChecker collects the first invalid option of a generator.
type optionChecker struct {
	gen string
	err error
}

func (c *optionChecker) positive(name string, v int) {
	if c.err == nil && v <= 0 {
		c.err = fmt.Errorf("workload: %s: %s must be > 0, got %d", c.gen, name, v)
	}
}

func (c *optionChecker) nonNegative(name string, v int) {
	if c.err == nil && v < 0 {
		c.err = fmt.Errorf("workload: %s: %s must be >= 0, got %d", c.gen, name, v)
	}
}

func (c *optionChecker) ordered(lo, hi string, a, b int) {
	if c.err == nil && a > b {
		c.err = fmt.Errorf("workload: %s: %s (%d) must not exceed %s (%d)", c.gen, lo, a, hi, b)
	}
}

// maxRequests bounds a synthetic workload's size (and keeps products of
// counts far from overflow).
const maxRequests = 1 << 20

// minRate keeps arrival offsets (in ns) far from overflowing.
const minRate = 1e-6

// maxGeneratedTokens bounds every token-count option: beyond any context
// length, and small enough that counts multiplied by request counts fit.
const maxGeneratedTokens = 1 << 22

func (c *optionChecker) tokens(name string, v int) {
	c.nonNegative(name, v)
	if c.err == nil && v > maxGeneratedTokens {
		c.err = fmt.Errorf("workload: %s: %s %d exceeds %d", c.gen, name, v, maxGeneratedTokens)
	}
}

func (c *optionChecker) rate(v float64) {
	if c.err == nil && (math.IsNaN(v) || math.IsInf(v, 0) || v < 0 || (v > 0 && v < minRate)) {
		c.err = fmt.Errorf("workload: %s: Rate must be 0 or a finite number >= %g, got %v", c.gen, minRate, v)
	}
}

func (c *optionChecker) body(o BodyOptions) {
	if c.err == nil && o.Model == "" {
		c.err = errors.New("workload: " + c.gen + ": Body.Model is empty (see DefaultBodyOptions)")
	}
}

// finishSynthetic assigns arrivals, materialises bodies and fills the summary.
func finishSynthetic(name string, reqs []Request, rate float64, r *rng) *Workload {
	poissonArrivals(reqs, rate, r)
	w := &Workload{Name: name, Requests: reqs}
	w.Materialize()
	w.summarize()
	return w
}

// finishOnDemand is finishSynthetic without materialising: for generators
// whose defaults render to hundreds of MB, bodies are rendered when sent
// (Request.AppendBody), as for the Mooncake trace.
func finishOnDemand(name string, reqs []Request, rate float64, r *rng) *Workload {
	poissonArrivals(reqs, rate, r)
	w := &Workload{Name: name, Requests: reqs}
	w.summarize()
	return w
}
