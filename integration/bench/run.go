package bench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/kvmesh/kvmesh/integration/workload"
)

// Run measures every arm of cfg on w, cfg.Repeats times. Each run starts a
// fresh fleet (refusing one whose counters are not zero) and fresh router
// state (which is why external Fronts allow one repeat only); repeat r runs
// the arms in row r of a balanced design (rotation). The report's Workload and
// Setup are left for the caller, who knows the fleet's shape.
func Run(ctx context.Context, cfg Config, w *workload.Workload) (*Report, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if len(w.Requests) == 0 {
		return nil, errors.New("bench: the workload has no requests")
	}
	rep := &Report{Started: time.Now()}
	cfg.Progress.Expect(cfg.Repeats * len(cfg.Arms) * len(w.Requests))
	for r := range cfg.Repeats {
		for pos, arm := range rotation(cfg.Arms, r) {
			var res *RunResult
			for attempt := 0; ; attempt++ {
				var err error
				if res, err = RunOnce(ctx, &cfg, w, arm, r, pos); err != nil {
					return rep, fmt.Errorf("bench: arm %s, repeat %d: %w", arm.Name, r+1, err)
				}
				res.Attempt = attempt
				if res.Invalid == "" || attempt >= cfg.Retries {
					break
				}
				cfg.Logger.Warn().Str("arm", arm.Name).Int("repeat", r+1).Str("why", res.Invalid).Msg("untrusted run; running it again")
				rep.Discarded = append(rep.Discarded, *res)
				cfg.Progress.Rerun(fmt.Sprintf("%s rep %d/%d", arm.Name, r+1, cfg.Repeats), res.Invalid, len(w.Requests))
			}
			cfg.Logger.Info().Str("arm", arm.Name).Int("repeat", r+1).Float64("hit_rate", res.HitRate).
				Float64("ttft_p50_s", res.TTFT.P50).Float64("ttft_p99_s", res.TTFT.P99).Int("errors", res.Errors).
				Msg("run done")
			rep.Runs = append(rep.Runs, *res)
		}
	}
	rep.Elapsed = time.Since(rep.Started).Seconds()
	rep.Arms = Summarize(cfg.Arms, rep.Runs)
	return rep, nil
}

// RunOnce is one run: a fresh fleet, arm's routers in front of it, the
// whole workload replayed, the fleet's counters read.
func RunOnce(ctx context.Context, cfg *Config, w *workload.Workload, arm Arm, repeat, pos int) (*RunResult, error) {
	factory, err := cfg.fleetFor(arm)
	if err != nil {
		return nil, err
	}
	fleet, err := factory(ctx)
	if err != nil {
		return nil, fmt.Errorf("starting the fleet: %w", err)
	}
	defer fleet.Close()
	before, err := fleet.Counters(ctx)
	if err != nil {
		return nil, err
	}
	for _, c := range before {
		if c.PrefixCacheQueries != 0 || c.Requests != 0 {
			return nil, fmt.Errorf("backend %s is not fresh (%d queries, %d requests): arms must not share a fleet",
				c.Name, c.PrefixCacheQueries, c.Requests)
		}
	}
	d := &deployment{fronts: cfg.Fronts}
	if len(cfg.Fronts) == 0 {
		if d, err = deploy(ctx, cfg, arm, fleet); err != nil {
			return nil, err
		}
	}
	var lag *lagSampler
	if cfg.LagSampleEvery > 0 {
		lag = startLagSampler(fleet.URLs(), cfg.LagSampleEvery)
	}
	rc := cfg.Replay
	rc.TimeScale = cfg.TimeScale
	rc.Seed = cfg.Replay.Seed + uint64(repeat)
	if d.shadow != nil {
		rc.Shadow = d.shadow.decide
		rc.Answered = d.shadow.answered
	}
	if view := fleet.Oracle(); view != nil && cfg.MeasureAvailable {
		rc.Available = availableIn(view, rc.Path)
		if cfg.ExplainHolders {
			c := newHTTPClient(64)
			defer c.CloseIdleConnections()
			rc.Explain = explainAt(c, rc.Path, view)
		}
	}
	cfg.Progress.Begin(fmt.Sprintf("%-22s rep %d/%d", arm.Name, repeat+1, cfg.Repeats), len(w.Requests))
	samples, wall, rerr := Replay(ctx, w, d.fronts, rc, cfg.Progress.Add)
	cfg.Progress.End()
	res := &RunResult{Arm: arm.Name, Repeat: repeat, Position: pos}
	if lag != nil {
		res.MaxEngineLag = lag.Stop()
	}
	res.Decisions = d.decisions()
	if cfg.KeepSamples {
		res.Counters = d.counters()
	}
	res.Beliefs = d.beliefs()
	res.LoadBytesPerRequestPeer = d.loadBytesPerRequestPeer()
	for _, o := range d.oracles {
		res.OracleMisses += o.Misses()
	}
	d.Close()
	if rerr != nil {
		return nil, rerr
	}
	counters, err := fleet.Counters(ctx)
	if err != nil {
		return nil, err
	}
	fillResult(res, samples, counters, wall, cfg.TimeScale, func(i int) int { return w.Requests[i].Conversation })
	res.Held = heldSummary(samples, cfg.TimeScale, RouterConfig(cfg, arm.Policy, nil).KVMesh.HoldMax)
	switch max := cfg.MaxLag.Seconds(); {
	case max <= 0:
	case res.MaxEngineLag > max:
		res.Invalid = fmt.Sprintf("an engine fell %.3f s behind its model clock", res.MaxEngineLag)
	case res.DispatchLateP99 > max:
		res.Invalid = fmt.Sprintf("the load generator sent requests %.3f s late (p99)", res.DispatchLateP99)
	}
	if cfg.KeepSamples {
		res.Samples = samples
	}
	return res, nil
}

// agreement is the share of the requests the nodes decided as they were
// sent that went where the shadow router sent them. A request a node held
// (late binding) is left out: the shadow decides every request as the
// client sends it and never holds, while the node decides a held one when
// a queue frees, on the loads of then.
func agreement(samples []Sample) float64 {
	agree, decided := 0, 0
	for i := range samples {
		if s := &samples[i]; s.Expected != "" && s.OK() && s.Backend != "" && s.Held == 0 {
			decided++
			if s.Expected == s.Backend {
				agree++
			}
		}
	}
	if decided == 0 {
		return 0
	}
	return float64(agree) / float64(decided)
}

// fillResult computes a run's figures from its samples and the fleet's
// counters. scale converts wall time to simulated time; conversation gives
// each request's conversation (Sample.Index).
func fillResult(res *RunResult, samples []Sample, counters []BackendCounters, wall time.Duration, scale float64, conversation func(int) int) {
	res.Requests = len(samples)
	res.Backends = counters
	var ttft, e2e, late, dispatch []float64
	var outTokens int64
	res.Agreement = agreement(samples)
	res.Precision, res.PrecisionRoutes = precision(samples, "prefix")
	res.DoubtPrecision, res.DoubtRoutes = precision(samples, "doubt")
	res.Reach, res.RegretTokens, res.ReachRequests = reach(samples)
	mv := sessionMoves(samples, conversation)
	res.Moved, res.MoveRegret = mv.Moved, mv.Regret
	for i := range samples {
		s := &samples[i]
		res.ClientCachedTokens += int64(s.CachedTokens)
		if s.Late > 0 {
			late = append(late, s.Late.Seconds()*scale)
		}
		if s.Capped {
			res.CappedRequests++
		} else {
			dispatch = append(dispatch, s.Late.Seconds())
		}
		if !s.OK() {
			res.Errors++
			if res.ErrorKinds == nil {
				res.ErrorKinds = map[string]int{}
			}
			res.ErrorKinds[s.Err]++
			continue
		}
		res.OK++
		outTokens += int64(s.OutputTokens)
		ttft = append(ttft, s.TTFT.Seconds()*scale)
		e2e = append(e2e, s.E2E.Seconds()*scale)
	}
	res.TTFT = summarizeLatency(ttft)
	res.EngineTTFT = engineTTFT(counters)
	if res.EngineTTFT.N == 0 {
		res.EngineTTFT = sampledEngineTTFT(samples) // simulators in processes of their own
	}
	res.Outside = outside(samples, scale)
	res.BySize = bySize(samples, scale)
	res.E2E = summarizeLatency(e2e)
	res.Late = summarizeLatency(late)
	res.Late.N = len(late) // requests sent late at all
	if len(dispatch) > 0 {
		slices.Sort(dispatch)
		res.DispatchLateP99 = Percentile(dispatch, 99)
	}

	work := make([]float64, len(counters))
	reqs := make([]float64, len(counters))
	for i, c := range counters {
		res.Queries += c.PrefixCacheQueries
		res.Hits += c.PrefixCacheHits
		work[i] = float64(c.ComputedTokens())
		reqs[i] = float64(c.Requests)
	}
	if res.Queries > 0 {
		res.HitRate = float64(res.Hits) / float64(res.Queries)
	}
	res.WorkCV = CV(work)
	res.RequestsCV = CV(reqs)
	res.WallSeconds = wall.Seconds()
	res.SimSeconds = wall.Seconds() * scale
	if res.SimSeconds > 0 {
		res.RequestsPerSec = float64(res.OK) / res.SimSeconds
		res.OutputTokensPerSec = float64(outTokens) / res.SimSeconds
	}
}

// precision is the share of the routes made for reason (prefix, doubt) that
// the backend confirmed (see RunResult.Precision).
func precision(samples []Sample, reason string) (share float64, routes int) {
	hits := 0
	for i := range samples {
		s := &samples[i]
		if !s.OK() || s.Reason != reason || s.Matched <= 0 || s.PromptTokens <= 0 {
			continue
		}
		routes++
		if float64(s.CachedTokens) >= 0.5*s.Matched*float64(s.PromptTokens) {
			hits++
		}
	}
	if routes == 0 {
		return 0, 0
	}
	return float64(hits) / float64(routes), routes
}

// availableIn returns what the best-placed backend of view holds of a
// request body, in prompt tokens (the most any router could reuse), and
// that backend's name ("" when none holds any; the first of equals).
func availableIn(view *OracleView, path string) func([]byte) (int, string) {
	return func(body []byte) (int, string) {
		best, at := 0, -1
		m := newPromptMatch(body, path)
		for i, b := range view.Backends {
			if c, _, err := m.at(b); err == nil && c > best {
				best, at = c, i
			}
		}
		m.release()
		if at < 0 {
			return 0, ""
		}
		return best, BackendName(at)
	}
}

// reach compares what the requests reused (cached_tokens) with what the
// best-placed backend held when each was sent: reach = reused / available,
// and regret = the tokens per request that some backend held but the
// request recomputed. A request may reuse more than was available when it
// was sent (another request filled the cache meanwhile): then it counts as
// available. requests is how many answered requests they are over; all 0
// when nothing was measured.
func reach(samples []Sample) (reach, regretPerRequest float64, requests int) {
	var used, avail float64
	n, measured := 0, false
	for i := range samples {
		s := &samples[i]
		if !s.OK() {
			continue
		}
		n++
		measured = measured || s.Available > 0
		a := max(s.Available, s.CachedTokens)
		used += float64(s.CachedTokens)
		avail += float64(a)
	}
	if !measured || avail == 0 {
		return 0, 0, 0
	}
	return used / avail, (avail - used) / float64(n), n
}
