package workload

// groupedSpec is the shape SharedPrefix and LongDocument share: groups of
// requests that share a prefix, each request ending with a question of its
// own. Only where the shared text goes differs (a system message, or the
// start of the user message), which messages builds.
type groupedSpec struct {
	gen                      string // generator name, for errors
	groupsName, perGroupName string // option names, for errors
	prefixName               string
	groups, perGroup         int
	prefixTokens             int
	questionTokens           int
	outputTokens             int
	rate                     float64
	seed                     uint64
	ordered                  bool
	body                     BodyOptions
	// messages builds request (g, q)'s messages.
	messages func(g, q int) []message
}

// grouped validates the options and generates groups x perGroup requests,
// shuffled unless ordered, with Poisson arrivals at rate. Group is the group;
// Conversation is unique per request; Turn is 0.
func grouped(s groupedSpec, name string) (*Workload, error) {
	c := optionChecker{gen: s.gen}
	c.positive(s.groupsName, s.groups)
	c.positive(s.perGroupName, s.perGroup)
	c.ordered(s.groupsName, "1<<20", s.groups, maxRequests)
	c.ordered(s.perGroupName, "1<<20", s.perGroup, maxRequests)
	c.ordered(s.groupsName+" x "+s.perGroupName, "1<<20", s.groups*s.perGroup, maxRequests)
	c.tokens(s.prefixName, s.prefixTokens)
	c.tokens("QuestionTokens", s.questionTokens)
	c.positive("OutputTokens", s.outputTokens)
	c.tokens("OutputTokens", s.outputTokens)
	c.rate(s.rate)
	c.body(s.body)
	if c.err != nil {
		return nil, c.err
	}
	r := newRNG(s.seed)
	enc := newEncoding(s.body)
	reqs := make([]Request, 0, s.groups*s.perGroup)
	for g := range s.groups {
		for q := range s.perGroup {
			req := newRequest(enc, s.messages(g, q), s.outputTokens)
			req.Group, req.Conversation = g, g*s.perGroup+q
			reqs = append(reqs, req)
		}
	}
	if !s.ordered {
		r.Shuffle(len(reqs), func(i, j int) { reqs[i], reqs[j] = reqs[j], reqs[i] })
	}
	return finishSynthetic(name, reqs, s.rate, r), nil
}
