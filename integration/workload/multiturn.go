package workload

import (
	"fmt"
	"math"
)

// MultiTurnOptions shape a multi-turn chat workload after vLLM's multi-turn
// benchmark (vllm benchmarks/multi_turn/generate_multi_turn.json with
// bench_dataset.py), as summarised in FIELD-NOTES.
type MultiTurnOptions struct {
	// Conversations is the number of chat sessions. Default 24 (vLLM's
	// num_conversations).
	Conversations int
	// MinTurns and MaxTurns bound the requests per conversation, drawn
	// uniformly. Default 12-18 (vLLM's num_turns). Note: vLLM counts user and
	// assistant messages as turns, so its own runs have 6-9 requests per
	// conversation; set 6 and 9 to match that exactly. 12-18 requests gives
	// longer histories (up to ~7k tokens), which is what stresses prefix reuse.
	MinTurns, MaxTurns int
	// CommonPrefixTokens is a prefix every conversation starts with. Default
	// 500 (vLLM's common_prefix_num_tokens).
	CommonPrefixTokens int
	// ConversationPrefixTokens is the mean length of a per-conversation
	// context that follows the common prefix, drawn lognormal with median
	// 0.85 x mean and capped at ConversationPrefixMaxTokens. Default 1000 and
	// 5000 (vLLM's prefix_num_tokens: lognormal, average 1000, max 5000; 0.85
	// is vLLM's default median ratio).
	ConversationPrefixTokens    int
	ConversationPrefixMaxTokens int
	// MinUserTokens and MaxUserTokens bound each user turn, drawn uniformly.
	// Default 120-160 (vLLM's prompt_input num_tokens).
	MinUserTokens, MaxUserTokens int
	// MinAssistantTokens and MaxAssistantTokens bound each reply (max_tokens
	// of the request, and the assistant message replayed in the next turn).
	// Default 80-120 (vLLM's prompt_output num_tokens).
	MinAssistantTokens, MaxAssistantTokens int
	// Rate is the Poisson arrival rate in requests per second; 0 puts every
	// arrival at 0 (closed loop). Default 2: with 24 conversations a
	// conversation's turns arrive ~12 s apart, enough for a ~100-token reply.
	Rate float64
	// Seed selects lengths, interleaving, arrivals and text. Default 1.
	Seed uint64
	// Body sets model, streaming and ignore_eos.
	Body BodyOptions
}

// DefaultMultiTurnOptions returns the defaults documented on MultiTurnOptions.
func DefaultMultiTurnOptions() MultiTurnOptions {
	return MultiTurnOptions{
		Conversations:               24,
		MinTurns:                    12,
		MaxTurns:                    18,
		CommonPrefixTokens:          500,
		ConversationPrefixTokens:    1000,
		ConversationPrefixMaxTokens: 5000,
		MinUserTokens:               120,
		MaxUserTokens:               160,
		MinAssistantTokens:          80,
		MaxAssistantTokens:          120,
		Rate:                        2,
		Seed:                        1,
		Body:                        DefaultBodyOptions(),
	}
}

// MultiTurn generates multi-turn conversations. Request t of a conversation
// sends the whole history: a first user message (common prefix, the
// conversation's prefix and the first user turn), then alternating assistant
// replies and user turns, ending with user turn t. The reply to turn t is
// generated text of OutputTokens words that turn t+1 carries verbatim, so turn
// t+1's messages extend turn t's exactly.
//
// Turns of different conversations interleave in a uniformly random order
// that keeps each conversation's turns in sequence. Conversation and Group are
// the conversation index; Turn is the request's index within it.
func MultiTurn(o MultiTurnOptions) (*Workload, error) {
	c := optionChecker{gen: "MultiTurn"}
	c.positive("Conversations", o.Conversations)
	c.positive("MinTurns", o.MinTurns)
	c.ordered("MinTurns", "MaxTurns", o.MinTurns, o.MaxTurns)
	c.ordered("MaxTurns", "4096", o.MaxTurns, 4096)
	c.ordered("Conversations", "1<<20", o.Conversations, maxRequests)
	c.ordered("Conversations x MaxTurns", "1<<20", o.Conversations*o.MaxTurns, maxRequests)
	c.tokens("CommonPrefixTokens", o.CommonPrefixTokens)
	c.tokens("ConversationPrefixTokens", o.ConversationPrefixTokens)
	c.tokens("ConversationPrefixMaxTokens", o.ConversationPrefixMaxTokens)
	c.tokens("MinUserTokens", o.MinUserTokens)
	c.tokens("MaxUserTokens", o.MaxUserTokens)
	c.ordered("MinUserTokens", "MaxUserTokens", o.MinUserTokens, o.MaxUserTokens)
	c.positive("MinAssistantTokens", o.MinAssistantTokens)
	c.tokens("MaxAssistantTokens", o.MaxAssistantTokens)
	c.ordered("MinAssistantTokens", "MaxAssistantTokens", o.MinAssistantTokens, o.MaxAssistantTokens)
	c.rate(o.Rate)
	c.body(o.Body)
	if c.err != nil {
		return nil, c.err
	}
	r := newRNG(o.Seed)
	enc := newEncoding(o.Body)
	common := span{block: textID(nsMultiTurnCommon, o.Seed, 0, 0), words: int32(o.CommonPrefixTokens)}

	// Lognormal with median = 0.85 x mean: sigma^2 = 2 ln(mean/median).
	sigma := math.Sqrt(2 * math.Log(1/0.85))
	mu := math.Log(0.85 * float64(o.ConversationPrefixTokens))

	convs := make([][]Request, o.Conversations)
	total := 0
	for ci := range convs {
		turns := r.Range(o.MinTurns, o.MaxTurns)
		prefix := 0
		if o.ConversationPrefixTokens > 0 {
			// float64() stops FMA fusion, which would round differently on
			// some CPUs and change the workload.
			prefix = min(int(math.Round(math.Exp(mu+float64(sigma*r.Normal())))), o.ConversationPrefixMaxTokens)
		}
		// All turns share one backing array: turn t uses msgs[:2t+1].
		msgs := make([]message, 0, 2*turns)
		reqs := make([]Request, turns)
		for t := range turns {
			user := span{block: textID(nsMultiTurnUser, o.Seed, ci, t), words: int32(r.Range(o.MinUserTokens, o.MaxUserTokens))}
			if t == 0 {
				first := []span{common, {block: textID(nsMultiTurnConversation, o.Seed, ci, 0), words: int32(prefix)}, user}
				msgs = append(msgs, message{role: roleUser, spans: first})
			} else {
				msgs = append(msgs, message{role: roleUser, spans: []span{user}})
			}
			reply := r.Range(o.MinAssistantTokens, o.MaxAssistantTokens)
			reqs[t] = newRequest(enc, msgs[:len(msgs):len(msgs)], reply)
			reqs[t].Conversation, reqs[t].Group, reqs[t].Turn = ci, ci, t
			msgs = append(msgs, message{role: roleAssistant, spans: []span{{block: textID(nsMultiTurnAssistant, o.Seed, ci, t), words: int32(reply)}}})
		}
		convs[ci] = reqs
		total += turns
	}

	// Uniform random interleaving: pick the next conversation with
	// probability proportional to its remaining turns.
	out := make([]Request, 0, total)
	next := make([]int, len(convs))
	for left := total; left > 0; left-- {
		pick := r.IntN(left)
		for ci, reqs := range convs {
			rem := len(reqs) - next[ci]
			if pick < rem {
				out = append(out, reqs[next[ci]])
				next[ci]++
				break
			}
			pick -= rem
		}
	}
	name := fmt.Sprintf("multiturn(conversations=%d turns=%d-%d seed=%d)", o.Conversations, o.MinTurns, o.MaxTurns, o.Seed)
	return finishSynthetic(name, out, o.Rate, r), nil
}
