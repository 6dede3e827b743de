package workload

import "fmt"

// CustomersOptions shape a multi-tenant assistant workload after llm-d's
// "KV-cache wins you can see" study (llm-d.ai blog, 2025-09-24: 150 enterprise
// customers, each with a 6,000-token context, 5 concurrent users per customer
// sending 1,200-token queries, Poisson load ramped from 3 to 60 QPS on 8 vLLM
// pods). That study ran inference-perf's shared_prefix data set with
// multi-turn off, so each of its 750 prompts was resent verbatim; here every
// query is new and each user's queries form a growing conversation (query,
// answer, next query appended), so a request reuses its customer's context
// and its own history, and nothing else.
type CustomersOptions struct {
	// Customers is the number of tenants, each with a context of its own.
	// Default 150 (the study's num_groups).
	Customers int
	// UsersPerCustomer is the number of users of each customer. Default 5
	// (the study's num_prompts_per_group).
	UsersPerCustomer int
	// ContextTokens is each customer's context (system prompt and
	// documents), the system message every one of its requests starts with.
	// Default 6000 (the study's system_prompt_len): 150 contexts are 900k
	// tokens, 73% of the study's fleet KV capacity and ~6x one pod's.
	ContextTokens int
	// QueryTokens is each user query's length. Default 1200 (the study's
	// question_len).
	QueryTokens int
	// MinAnswerTokens and MaxAnswerTokens bound each answer (max_tokens, and
	// the assistant message the user's next query follows), drawn uniformly.
	// Default 150-250: short assistant answers of ~200 tokens, which keep a
	// conversation's growth dominated by the queries (the study generated
	// 1,000 tokens it never replayed).
	MinAnswerTokens, MaxAnswerTokens int
	// MinTurns and MaxTurns bound the queries of one conversation, drawn
	// uniformly when it starts; after its last query the user starts a new
	// conversation on the same customer context. Default 4-8: prompts stay
	// under ~17k tokens (context + 8 queries and 7 answers), and users keep
	// opening fresh conversations however long the run.
	MinTurns, MaxTurns int
	// Requests is the number of requests. Default 3000: four queries per user
	// on average, ~5 minutes at the default rate.
	Requests int
	// Rate is the Poisson arrival rate in requests per second; 0 puts every
	// arrival at 0. Each request comes from a user drawn uniformly, so every
	// user is an independent Poisson source at Rate/(Customers x
	// UsersPerCustomer): at 750 users and 10/s a user's queries are ~75 s
	// apart (a few percent come within the few seconds the previous answer
	// takes; closed-loop replay keeps them in order). Default 10: ~95k prompt
	// tokens per second, most of which cache-blind routing prefills, ~70% of
	// what 8 simulated backends can (60 µs per token), while the infinite
	// cache reuses 83% of them. Raise it (the study went to 60) to find where
	// each arm saturates.
	Rate float64
	// Seed selects users, lengths, arrivals and text. Default 1.
	Seed uint64
	// Body sets model, streaming and ignore_eos.
	Body BodyOptions
}

// DefaultCustomersOptions returns the defaults documented on
// CustomersOptions.
func DefaultCustomersOptions() CustomersOptions {
	return CustomersOptions{
		Customers:        150,
		UsersPerCustomer: 5,
		ContextTokens:    6000,
		QueryTokens:      1200,
		MinAnswerTokens:  150,
		MaxAnswerTokens:  250,
		MinTurns:         4,
		MaxTurns:         8,
		Requests:         3000,
		Rate:             10,
		Seed:             1,
		Body:             DefaultBodyOptions(),
	}
}

// customersUser is one user's open conversation.
type customersUser struct {
	conv  int // conversation id, -1 before the first
	turn  int // queries sent in it
	turns int // queries it will have
	msgs  []message
}

// Customers generates Requests queries. Each comes from a user drawn
// uniformly; it sends the user's conversation so far: a system message (the
// customer's context), then alternating user queries and assistant answers,
// ending with the new query. An answer is generated text of the previous
// request's OutputTokens words, so a conversation's request t+1 extends
// request t exactly. Group is the customer; Conversation numbers the
// conversations in order of their first query (a user has several over a
// long run); Turn is the query's index within its conversation.
//
// Bodies are rendered on demand (about 155 MB at the defaults; see
// Workload.Materialize).
func Customers(o CustomersOptions) (*Workload, error) {
	c := optionChecker{gen: "Customers"}
	c.positive("Customers", o.Customers)
	c.positive("UsersPerCustomer", o.UsersPerCustomer)
	c.ordered("Customers", "1<<20", o.Customers, maxRequests)
	c.ordered("UsersPerCustomer", "1<<20", o.UsersPerCustomer, maxRequests)
	c.ordered("Customers x UsersPerCustomer", "1<<20", o.Customers*o.UsersPerCustomer, maxRequests)
	c.tokens("ContextTokens", o.ContextTokens)
	c.tokens("QueryTokens", o.QueryTokens)
	c.positive("MinAnswerTokens", o.MinAnswerTokens)
	c.tokens("MaxAnswerTokens", o.MaxAnswerTokens)
	c.ordered("MinAnswerTokens", "MaxAnswerTokens", o.MinAnswerTokens, o.MaxAnswerTokens)
	c.positive("MinTurns", o.MinTurns)
	c.ordered("MinTurns", "MaxTurns", o.MinTurns, o.MaxTurns)
	c.ordered("MaxTurns", "4096", o.MaxTurns, 4096)
	c.positive("Requests", o.Requests)
	c.ordered("Requests", "1<<20", o.Requests, maxRequests)
	c.rate(o.Rate)
	c.body(o.Body)
	if c.err == nil && int64(o.ContextTokens)+int64(o.MaxTurns)*int64(o.QueryTokens+o.MaxAnswerTokens) > maxGeneratedTokens {
		c.err = fmt.Errorf("workload: Customers: a conversation of MaxTurns (%d) queries exceeds %d tokens", o.MaxTurns, maxGeneratedTokens)
	}
	if c.err != nil {
		return nil, c.err
	}
	r := newRNG(o.Seed)
	enc := newEncoding(o.Body)
	contexts := make([]message, o.Customers)
	for g := range contexts {
		contexts[g] = message{role: roleSystem, spans: []span{{block: textID(nsCustomersContext, o.Seed, g, 0), words: int32(o.ContextTokens)}}}
	}
	users := make([]customersUser, o.Customers*o.UsersPerCustomer)
	for i := range users {
		users[i].conv = -1
	}
	convs := 0
	reqs := make([]Request, o.Requests)
	for i := range reqs {
		ui := r.IntN(len(users))
		u, customer := &users[ui], ui/o.UsersPerCustomer
		if u.conv < 0 || u.turn == u.turns {
			u.conv, u.turn, u.turns = convs, 0, r.Range(o.MinTurns, o.MaxTurns)
			convs++
			// Every request of the conversation shares this backing array:
			// request t uses msgs[:2t+2].
			u.msgs = append(make([]message, 0, 2*u.turns+1), contexts[customer])
		}
		query := span{block: textID(nsCustomersQuery, o.Seed, u.conv, u.turn), words: int32(o.QueryTokens)}
		u.msgs = append(u.msgs, message{role: roleUser, spans: []span{query}})
		answer := r.Range(o.MinAnswerTokens, o.MaxAnswerTokens)
		reqs[i] = newRequest(enc, u.msgs[:len(u.msgs):len(u.msgs)], answer)
		reqs[i].Group, reqs[i].Conversation, reqs[i].Turn = customer, u.conv, u.turn
		u.msgs = append(u.msgs, message{role: roleAssistant, spans: []span{{block: textID(nsCustomersAnswer, o.Seed, u.conv, u.turn), words: int32(answer)}}})
		u.turn++
	}
	name := fmt.Sprintf("customers(customers=%d users=%d context=%d query=%d requests=%d rate=%g seed=%d)",
		o.Customers, o.UsersPerCustomer, o.ContextTokens, o.QueryTokens, o.Requests, o.Rate, o.Seed)
	return finishOnDemand(name, reqs, o.Rate, r), nil
}
