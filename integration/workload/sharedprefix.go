package workload

import "fmt"

// SharedPrefixOptions shape SGLang's "generated-shared-prefix" benchmark
// dataset (python -m sglang.bench_serving --dataset-name
// generated-shared-prefix; defaults from its --gsp-* flags).
type SharedPrefixOptions struct {
	// Groups is the number of distinct system prompts. Default 64
	// (--gsp-num-groups).
	Groups int
	// PromptsPerGroup is the number of questions per system prompt. Default
	// 16 (--gsp-prompts-per-group).
	PromptsPerGroup int
	// SystemPromptTokens is each group's system prompt length. Default 2048
	// (--gsp-system-prompt-len).
	SystemPromptTokens int
	// QuestionTokens is each question's length. Default 128
	// (--gsp-question-len).
	QuestionTokens int
	// OutputTokens is max_tokens. Default 256 (--gsp-output-len).
	OutputTokens int
	// Ordered keeps group order (all of group 0, then group 1, ...) instead
	// of shuffling. Default false: SGLang shuffles unless --gsp-ordered.
	Ordered bool
	// Rate is the Poisson arrival rate in requests per second; 0 puts every
	// arrival at 0 (SGLang's default --request-rate inf). Default 8: the
	// 1,024 requests span about two minutes.
	Rate float64
	// Seed selects order, arrivals and text. Default 1 (SGLang's --seed).
	Seed uint64
	// Body sets model, streaming and ignore_eos.
	Body BodyOptions
}

// DefaultSharedPrefixOptions returns the defaults documented on
// SharedPrefixOptions.
func DefaultSharedPrefixOptions() SharedPrefixOptions {
	return SharedPrefixOptions{
		Groups:             64,
		PromptsPerGroup:    16,
		SystemPromptTokens: 2048,
		QuestionTokens:     128,
		OutputTokens:       256,
		Rate:               8,
		Seed:               1,
		Body:               DefaultBodyOptions(),
	}
}

// SharedPrefix generates Groups x PromptsPerGroup requests, each a system
// message (its group's prompt) and a user message (a question of its own).
// Group is the group index; Conversation is unique per request
// (group*PromptsPerGroup + question); Turn is 0.
func SharedPrefix(o SharedPrefixOptions) (*Workload, error) {
	c := optionChecker{gen: "SharedPrefix"}
	c.positive("Groups", o.Groups)
	c.positive("PromptsPerGroup", o.PromptsPerGroup)
	c.ordered("Groups", "1<<20", o.Groups, maxRequests)
	c.ordered("PromptsPerGroup", "1<<20", o.PromptsPerGroup, maxRequests)
	c.ordered("Groups x PromptsPerGroup", "1<<20", o.Groups*o.PromptsPerGroup, maxRequests)
	c.tokens("SystemPromptTokens", o.SystemPromptTokens)
	c.tokens("QuestionTokens", o.QuestionTokens)
	c.positive("OutputTokens", o.OutputTokens)
	c.tokens("OutputTokens", o.OutputTokens)
	c.rate(o.Rate)
	c.body(o.Body)
	if c.err != nil {
		return nil, c.err
	}
	r := newRNG(o.Seed)
	enc := newEncoding(o.Body)
	reqs := make([]Request, 0, o.Groups*o.PromptsPerGroup)
	for g := range o.Groups {
		system := message{role: roleSystem, spans: []span{{block: textID(nsSharedPrefixSystem, o.Seed, g, 0), words: int32(o.SystemPromptTokens)}}}
		for q := range o.PromptsPerGroup {
			question := message{role: roleUser, spans: []span{{block: textID(nsSharedPrefixQuestion, o.Seed, g, q), words: int32(o.QuestionTokens)}}}
			req := newRequest(enc, []message{system, question}, o.OutputTokens)
			req.Group, req.Conversation = g, g*o.PromptsPerGroup+q
			reqs = append(reqs, req)
		}
	}
	if !o.Ordered {
		r.Shuffle(len(reqs), func(i, j int) { reqs[i], reqs[j] = reqs[j], reqs[i] })
	}
	name := fmt.Sprintf("sharedprefix(groups=%d per_group=%d system=%d question=%d seed=%d)",
		o.Groups, o.PromptsPerGroup, o.SystemPromptTokens, o.QuestionTokens, o.Seed)
	return finishSynthetic(name, reqs, o.Rate, r), nil
}
