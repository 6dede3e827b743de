package workload

import (
	"fmt"
	"math"
)

// HotPrefixOptions shape a skewed shared-prefix workload: requests pick their
// prefix group from a Zipf distribution, so the hottest prefix alone can
// exceed one backend's capacity and a router that pins a prefix to one
// backend overloads it. Sizes follow SGLang's generated-shared-prefix
// defaults; SGLang's bench_serving offers the same skew as
// --gsp-group-distribution zipf.
type HotPrefixOptions struct {
	// Requests is the number of requests. Default 2048 (about ten per group
	// on average; the hottest group gets ~435).
	Requests int
	// Groups is the number of distinct prefixes. Default 200.
	Groups int
	// ZipfS is the Zipf exponent: group k (0-based rank) is chosen with
	// probability proportional to 1/(k+1)^ZipfS. Default 1.1, the skew
	// commonly reported for cache and CDN popularity; over 200 groups the
	// hottest one draws ~21% of requests, the top 10 ~57%.
	ZipfS float64
	// PrefixTokens is each group's system prompt length. Default 2048 (SGLang
	// --gsp-system-prompt-len).
	PrefixTokens int
	// SuffixTokens is each request's own user message length. Default 128
	// (SGLang --gsp-question-len).
	SuffixTokens int
	// OutputTokens is max_tokens. Default 256 (SGLang --gsp-output-len).
	OutputTokens int
	// Rate is the Poisson arrival rate in requests per second; 0 puts every
	// arrival at 0. Default 16: the hottest group then arrives at ~3.4/s.
	Rate float64
	// Seed selects groups, arrivals and text. Default 1.
	Seed uint64
	// Body sets model, streaming and ignore_eos.
	Body BodyOptions
}

// DefaultHotPrefixOptions returns the defaults documented on HotPrefixOptions.
func DefaultHotPrefixOptions() HotPrefixOptions {
	return HotPrefixOptions{
		Requests:     2048,
		Groups:       200,
		ZipfS:        1.1,
		PrefixTokens: 2048,
		SuffixTokens: 128,
		OutputTokens: 256,
		Rate:         16,
		Seed:         1,
		Body:         DefaultBodyOptions(),
	}
}

// GroupShare returns the expected fraction of requests in group rank k
// (0 = hottest) under these options, or 0 if k is out of range.
func (o HotPrefixOptions) GroupShare(k int) float64 {
	if o.Groups <= 0 || k < 0 || k >= o.Groups || !(o.ZipfS > 0) {
		return 0
	}
	return newZipf(o.Groups, o.ZipfS).Prob(k)
}

// HotPrefix generates Requests requests, each a system message (its group's
// prefix) and a user message of its own. Group is the Zipf rank (0 is the
// hottest); Conversation is the request's index; Turn is 0.
func HotPrefix(o HotPrefixOptions) (*Workload, error) {
	c := optionChecker{gen: "HotPrefix"}
	c.positive("Requests", o.Requests)
	c.ordered("Requests", "1<<20", o.Requests, maxRequests)
	c.positive("Groups", o.Groups)
	c.ordered("Groups", "1<<20", o.Groups, maxRequests)
	c.tokens("PrefixTokens", o.PrefixTokens)
	c.tokens("SuffixTokens", o.SuffixTokens)
	c.positive("OutputTokens", o.OutputTokens)
	c.tokens("OutputTokens", o.OutputTokens)
	c.rate(o.Rate)
	c.body(o.Body)
	if c.err == nil && (!(o.ZipfS > 0) || math.IsInf(o.ZipfS, 0)) {
		c.err = fmt.Errorf("workload: HotPrefix: ZipfS must be a positive number, got %v", o.ZipfS)
	}
	if c.err != nil {
		return nil, c.err
	}
	r := newRNG(o.Seed)
	enc := newEncoding(o.Body)
	z := newZipf(o.Groups, o.ZipfS)
	prefixes := make([]message, o.Groups)
	for g := range prefixes {
		prefixes[g] = message{role: roleSystem, spans: []span{{block: textID(nsHotPrefixPrefix, o.Seed, g, 0), words: int32(o.PrefixTokens)}}}
	}
	reqs := make([]Request, o.Requests)
	for i := range reqs {
		g := z.Sample(r)
		suffix := message{role: roleUser, spans: []span{{block: textID(nsHotPrefixSuffix, o.Seed, i, 0), words: int32(o.SuffixTokens)}}}
		reqs[i] = newRequest(enc, []message{prefixes[g], suffix}, o.OutputTokens)
		reqs[i].Group, reqs[i].Conversation = g, i
	}
	name := fmt.Sprintf("hotprefix(requests=%d groups=%d s=%g seed=%d)", o.Requests, o.Groups, o.ZipfS, o.Seed)
	return finishSynthetic(name, reqs, o.Rate, r), nil
}
