package router

import (
	"math"
	"sync"
	"time"
)

// The blocking term of the kvmesh cost (KVMeshConfig.BlockWeight): what a
// request's own prefill costs the requests that will arrive behind it.
//
// The rest of the cost is the request's own: the prefill queued ahead of
// it and what it computes. It is myopic about the requests that come
// next. An engine prefills in arrival order, so every request that reaches
// the backend while this one waits or computes waits for it too. Most of
// those can go elsewhere (the load term steers them away), but a request
// whose context the backend holds is bound to it: the cache term keeps it
// there, however long the queue. On the Mooncake trace at 2x most of the
// hits in kvmesh's slowest 1% waited 6-7 s behind a ~120,000-token miss
// that had been placed on their holder a moment before, while other
// backends stood idle: among idle candidates the miss's own cost was the
// same everywhere, and a tie placed it.
//
// So a candidate pays for the delay its choice imposes on the requests
// bound to it: with lambda_i the rate at which requests arrive there for
// a prefix it holds (arrivals whose booked prefill was at most half their
// prompt), mu_i the rate at which it computes prefill (learned from this
// router's answers), X_i what the request would compute there and P_i the
// prefill queued ahead of it, the bound requests expected to arrive during
// the wait and the prefill are lambda_i/mu_i * (P_i + X_i), and each is
// delayed by X_i (by what is left of it, for those arriving during the
// prefill):
//
//	block_i = BlockWeight * lambda_i / mu_i * X_i * (P_i + X_i/2)
//
// in prompt units of delay, the currency of the rest of the cost. It is
// quadratic in X_i: nothing for a hit or an average prompt, decisive for a
// long miss, which goes where fewer requests will queue behind it.
//
// It is capped at BlockMaxShare * X_i: the request waits at most that
// share of its own prefill longer to spare the others. Uncapped, a busy
// fleet sent its long prompts to longer queues, and they are its slowest
// 1%.

// Two guards keep the term where it pays. In a saturated fleet (Mooncake
// at 3x) every candidate is queued and the term sends the long prompts,
// the fleet's slowest requests, to longer queues: BlockFleetLoad turns it
// off while the fleet's decayed mean load is above a few average prompts,
// and BlockFence never lets it move a request to a queue much longer than
// the one it would take without it.

// boundShare is the most of its prompt a request may have booked as
// uncached and still count as bound to its backend: it was sent there for
// a prefix that covers at least half of it.
const boundShare = 0.5

// countArrival counts a request booked at uncached units of a prompt of
// prompt units as an arrival at b, bound to it if it booked at most
// boundShare of the prompt; nothing while the term is off.
func (b *backend) countArrival(uncached, prompt int, now time.Time, cfg *KVMeshConfig) {
	if cfg.BlockWeight > 0 && prompt > 0 && float64(uncached) <= boundShare*float64(prompt) {
		b.bound.observe(now.UnixNano(), cfg.BlockWindow)
	}
}

// boundView is what the blocking term reads of b at now: the rate of
// bound arrivals and the learned prefill rate (both 0 while it is off).
func (b *backend) boundView(now time.Time, cfg *KVMeshConfig) (bound, prefill float64) {
	if cfg.BlockWeight <= 0 {
		return 0, 0
	}
	return b.bound.perSecond(now.UnixNano(), cfg.BlockWindow), b.queue.rate()
}

// arrivalRate is a decayed count of arrivals: each arrival adds one, and
// the count decays by e every window, so count/window estimates arrivals
// per second over roughly the last window. Times are Unix nanoseconds.
type arrivalRate struct {
	mu sync.Mutex
	n  float64
	at int64
}

// observe counts one arrival at now.
func (a *arrivalRate) observe(now int64, window time.Duration) {
	a.mu.Lock()
	a.n = a.decayed(now, window) + 1
	if now > a.at {
		a.at = now
	}
	a.mu.Unlock()
}

// perSecond is the estimated arrival rate at now.
func (a *arrivalRate) perSecond(now int64, window time.Duration) float64 {
	if window <= 0 {
		return 0
	}
	a.mu.Lock()
	n := a.decayed(now, window)
	a.mu.Unlock()
	return n / window.Seconds()
}

// decayed is the count decayed to now. Caller holds mu.
func (a *arrivalRate) decayed(now int64, window time.Duration) float64 {
	if dt := now - a.at; dt > 0 && window > 0 {
		return a.n * math.Exp(-float64(dt)/float64(window))
	}
	return a.n
}

// blocking is block_i above for a candidate whose load view is l: fresh
// is X_i, pending P_i,
// share this node's share of the mesh's requests (each node sees that
// share of the arrivals). 0 when the term is off or a rate is unknown.
func (cfg *KVMeshConfig) blocking(l *LoadView, fresh, pending, share float64) float64 {
	if cfg.BlockWeight <= 0 || l.PrefillRate <= 0 || l.BoundRate <= 0 || fresh <= 0 {
		return 0
	}
	lambda := l.BoundRate
	if share > 0 && share < 1 {
		lambda /= share
	}
	block := cfg.BlockWeight * lambda / l.PrefillRate * fresh * (max(pending, 0) + fresh/2)
	if cfg.BlockMaxShare > 0 {
		block = min(block, cfg.BlockMaxShare*fresh)
	}
	return block
}

// blockOn says whether the blocking term prices this decision: it is on
// (KVMeshConfig.BlockWeight), some candidate could start the request
// almost at once (BlockIdleLoad), the fleet is not saturated
// (BlockFleetLoad) and its answers show little reuse (BlockMaxReuse). A
// decision observes the fleet's load; an explanation or a retry only
// reads it.
func (p *kvmeshPolicy) blockOn(req *Request, loads []float64, minLoad, avg float64) bool {
	cfg := &p.cfg
	if cfg.BlockWeight <= 0 {
		return false
	}
	on := cfg.BlockIdleLoad <= 0 || minLoad <= cfg.BlockIdleLoad*avg
	if cfg.BlockMaxReuse > 0 {
		on = on && req.reuse() <= cfg.BlockMaxReuse
	}
	if cfg.BlockFleetLoad > 0 {
		fleet := p.fleet.value()
		if !req.Explain && req.Attempt == 0 && len(loads) > 0 && avg > 0 {
			sum := 0.0
			for _, l := range loads {
				sum += l
			}
			fleet = p.fleet.observe(req.Now.UnixNano(), sum/float64(len(loads))/avg, cfg.BlockWindow)
		}
		on = on && fleet <= cfg.BlockFleetLoad
	}
	return on
}

// gatingFleetLoad is the fleet's decayed mean load in average prompts,
// and whether it gates the blocking term (BlockFleetLoad set), for
// /debug/route (fleetGated).
func (p *kvmeshPolicy) gatingFleetLoad() (float64, bool) {
	return p.fleet.value(), p.cfg.BlockWeight > 0 && p.cfg.BlockFleetLoad > 0
}

// fenceLoad is the most load a candidate may have queued for the
// blocking term to move the request there: BlockFence average prompts
// above the load of unblocked, the candidate it would take without the
// term. +Inf while the term or the fence is off.
func (cfg *KVMeshConfig) fenceLoad(block bool, loads []float64, unblocked int, avg float64) float64 {
	if !block || cfg.BlockFence <= 0 {
		return math.Inf(1)
	}
	return loads[unblocked] + cfg.BlockFence*avg
}

// fleetLoad is the fleet's load over time: a time-decayed mean of the
// mean candidate load (in average prompts) seen at each decision, each
// sample weighted by the time since the one before it, so that the mean
// covers roughly the last window whatever the request rate.
type fleetLoad struct {
	mu   sync.Mutex
	mean float64
	at   int64 // Unix nanoseconds of the last sample
	seen bool
}

// observe folds the sample x taken at now into the mean and returns it.
// A sample at or before the last one's time leaves the mean as it is, and
// so does one that is not a finite number (a load per unit of weight that
// overflowed, at a backend of a tiny weight): a mean of +Inf would turn
// NaN at the next sample, and NaN would gate the blocking term off for
// good (a huge finite one for hours: the mean decays by e per window).
func (f *fleetLoad) observe(now int64, x float64, window time.Duration) float64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return f.mean
	}
	switch {
	case !f.seen:
		f.mean, f.at, f.seen = x, now, true
	case now > f.at && window > 0:
		w := 1 - math.Exp(-float64(now-f.at)/float64(window))
		f.mean += (x - f.mean) * w
		f.at = now
	}
	return f.mean
}

// value is the mean as last observed, 0 before any sample.
func (f *fleetLoad) value() float64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.mean
}
