package bench

import (
	"slices"
)

// TTFT by prompt length.
//
// A run's TTFT percentiles mix requests of every length: on Mooncake a
// median request is mostly its own prefill, and which requests land near
// the median depends on how much of each prompt was cached. Every arm of a
// report replays the same requests, so cutting each run's answered
// requests into fifths by prompt length gives classes that hold the same
// requests in every arm, and an arm's TTFT and cached share per class say
// where it gains or loses against another: on short prompts (queueing
// behind long prefills), on the median ones, or on the longest (their own
// prefill, which only cache hits shorten).

// SizeClasses is how many classes a run's requests are cut into.
const SizeClasses = 5

// SizeClass is one fifth of a run's answered requests by prompt length.
type SizeClass struct {
	// MaxTokens is the longest prompt in the class (tokens, as the
	// backends counted them: usage.prompt_tokens).
	MaxTokens int `json:"max_tokens"`
	N         int `json:"n"`
	// TTFTP50 and TTFTP90 are the class's TTFT percentiles (simulated s).
	TTFTP50 float64 `json:"ttft_p50_s"`
	TTFTP90 float64 `json:"ttft_p90_s"`
	// Cached is the share of the class's prompt tokens the backends
	// answered were cached (usage.prompt_tokens_details.cached_tokens).
	Cached float64 `json:"cached_share"`
}

// SizeSpread is a class's figures over an arm's repeats.
type SizeSpread struct {
	MaxTokens Spread `json:"max_tokens"`
	TTFTP50   Spread `json:"ttft_p50_s"`
	TTFTP90   Spread `json:"ttft_p90_s"`
	Cached    Spread `json:"cached_share"`
}

// bySize cuts the answered samples that report their prompt length into
// SizeClasses classes of (nearly) equal counts by prompt length, shortest
// first; nil when there are fewer samples than classes. TTFTs are scaled
// to simulated time.
func bySize(samples []Sample, scale float64) []SizeClass {
	idx := make([]int, 0, len(samples))
	for i := range samples {
		if s := &samples[i]; s.OK() && s.PromptTokens > 0 {
			idx = append(idx, i)
		}
	}
	if len(idx) < SizeClasses {
		return nil
	}
	// By length, then by index: equal lengths fall into the same class in
	// every arm, which sees the same requests.
	slices.SortFunc(idx, func(a, b int) int {
		if d := samples[a].PromptTokens - samples[b].PromptTokens; d != 0 {
			return d
		}
		return a - b
	})
	out := make([]SizeClass, SizeClasses)
	ttft := make([]float64, 0, len(idx)/SizeClasses+1)
	for c := range out {
		part := idx[c*len(idx)/SizeClasses : (c+1)*len(idx)/SizeClasses]
		ttft = ttft[:0]
		var prompt, cached int64
		for _, i := range part {
			s := &samples[i]
			ttft = append(ttft, s.TTFT.Seconds()*scale)
			prompt += int64(s.PromptTokens)
			cached += int64(min(s.CachedTokens, s.PromptTokens))
		}
		slices.Sort(ttft)
		out[c] = SizeClass{MaxTokens: samples[part[len(part)-1]].PromptTokens, N: len(part),
			TTFTP50: Percentile(ttft, 50), TTFTP90: Percentile(ttft, 90), Cached: float64(cached) / float64(prompt)}
	}
	return out
}

// sizeSpreads summarizes the classes of an arm's runs: class k of each
// run that has classes, median and spread.
func sizeSpreads(runs []*RunResult) []SizeSpread {
	var out []SizeSpread
	for k := range SizeClasses {
		var maxTok, p50, p90, cached []float64
		for _, r := range runs {
			if len(r.BySize) != SizeClasses {
				continue
			}
			c := &r.BySize[k]
			maxTok = append(maxTok, float64(c.MaxTokens))
			p50 = append(p50, c.TTFTP50)
			p90 = append(p90, c.TTFTP90)
			cached = append(cached, c.Cached)
		}
		if len(p50) == 0 {
			return nil
		}
		out = append(out, SizeSpread{MaxTokens: SpreadOf(maxTok), TTFTP50: SpreadOf(p50), TTFTP90: SpreadOf(p90), Cached: SpreadOf(cached)})
	}
	return out
}

// writeBySize writes each arm's TTFT p50 and cached share by prompt
// length, one column per fifth.
func writeBySize(ew *errWriter, r *Report) {
	arms := armsWhere(r, func(a *ArmSummary) bool { return len(a.BySize) == SizeClasses })
	if len(arms) == 0 {
		return
	}
	p := ew.printf
	p("TTFT by prompt length: each run's answered requests cut into fifths by prompt length (the same requests in every ")
	p("arm), each fifth's TTFT p50 in seconds and, in brackets, the share of its prompt tokens the backends answered were ")
	p("cached; medians over the repeats. The header gives each fifth's longest prompt (tokens, the first arm's median).\n\n")
	p("| arm |")
	for _, c := range arms[0].BySize {
		p(" ≤ %.0f |", c.MaxTokens.Median)
	}
	p("\n|---|")
	for range arms[0].BySize {
		p("---|")
	}
	p("\n")
	for _, a := range arms {
		p("| %s |", a.Arm.Name)
		for _, c := range a.BySize {
			p(" %.3f (%s) |", c.TTFTP50.Median, pct(c.Cached.Median))
		}
		p("\n")
	}
	p("\n")
}
