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
	name := fmt.Sprintf("sharedprefix(groups=%d per_group=%d system=%d question=%d seed=%d)",
		o.Groups, o.PromptsPerGroup, o.SystemPromptTokens, o.QuestionTokens, o.Seed)
	return grouped(groupedSpec{
		gen: "SharedPrefix", groupsName: "Groups", perGroupName: "PromptsPerGroup", prefixName: "SystemPromptTokens",
		groups: o.Groups, perGroup: o.PromptsPerGroup, prefixTokens: o.SystemPromptTokens, questionTokens: o.QuestionTokens,
		outputTokens: o.OutputTokens, rate: o.Rate, seed: o.Seed, ordered: o.Ordered, body: o.Body,
		messages: func(g, q int) []message {
			system := message{role: roleSystem, spans: []span{{block: textID(nsSharedPrefixSystem, o.Seed, g, 0), words: int32(o.SystemPromptTokens)}}}
			question := message{role: roleUser, spans: []span{{block: textID(nsSharedPrefixQuestion, o.Seed, g, q), words: int32(o.QuestionTokens)}}}
			return []message{system, question}
		},
	}, name)
}
