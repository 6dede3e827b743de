package bench

import "github.com/kvmesh/kvmesh/integration/sim"

// promptParser is an OracleBackend that answers for a body parsed once
// (*sim.Instance does): asking a fleet's eight backends what they hold of a
// request then tokenizes it once, not eight times. Before this, measuring
// reach (availableIn, on the load generator's path before every send) was
// a fifth of a run's CPU on the agent workload.
type promptParser interface {
	ParsePrompt(body []byte, endpoint string, dst *sim.Prompt) error
	CachedPromptTokens(p *sim.Prompt) int
}

// promptMatch asks backends what they hold of one body (CachedPrefix),
// parsing it at most once for all the backends that are promptParsers.
// Not safe for concurrent use; release it when done.
type promptMatch struct {
	body     []byte
	endpoint string
	p        *sim.Prompt
	err      error
}

func newPromptMatch(body []byte, endpoint string) promptMatch {
	return promptMatch{body: body, endpoint: endpoint}
}

// at is b.CachedPrefix(body, endpoint).
func (m *promptMatch) at(b OracleBackend) (cached, prompt int, err error) {
	pp, ok := b.(promptParser)
	if !ok {
		return b.CachedPrefix(m.body, m.endpoint)
	}
	if m.p == nil {
		m.p = sim.GetPrompt()
		m.err = pp.ParsePrompt(m.body, m.endpoint, m.p)
	}
	if m.err != nil {
		return 0, 0, m.err
	}
	return pp.CachedPromptTokens(m.p), m.p.Tokens(), nil
}

// release returns the parsed prompt's buffers.
func (m *promptMatch) release() {
	if m.p != nil {
		m.p.Release()
	}
	m.p = nil
}

// held is at(b) for a request whose body the oracle has (ok false when it
// has none, the endpoint is not one the engines generate on, or b could
// not say): the one question both oracle policies ask of each candidate.
func (m *promptMatch) held(b OracleBackend) (cached, prompt int, ok bool) {
	if m.endpoint == "" {
		return 0, 0, false
	}
	cached, prompt, err := m.at(b)
	return cached, prompt, err == nil
}
