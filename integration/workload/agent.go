package workload

import (
	"fmt"
	"time"
)

// AgentOptions shape a coding-agent workload: a few dozen agents at work at
// once, each session one long context that grows at every step. A session
// starts with the agent's system prompt and tool definitions (the same for
// every session) and a task with the repository files the agent was given;
// at every step the model answers with a short action (a tool call), the
// tool's result (a file, a command's output, a diff) is appended, and the
// whole context is sent again. So ~95% of a prompt is the previous step's
// prompt, and prompts are ~100x the outputs.
type AgentOptions struct {
	// Agents is the number of sessions at work at once: when an agent's
	// session ends it starts a new one (a new task and repository), so the
	// load stays level however many requests are generated. Default 32: a
	// few dozen, four per backend of an 8-backend fleet.
	Agents int
	// Requests is the number of requests. Default 1000: ~4 minutes at the
	// default rate, ~45M prompt tokens, ~60 sessions (half of them joined
	// mid-way, see Agent).
	Requests int
	// SystemTokens is the agent's system prompt and tool definitions, the
	// system message every session starts with. Default 6000: a coding
	// agent's instructions plus a dozen tool schemas.
	SystemTokens int
	// MinRepositoryTokens and MaxRepositoryTokens bound the first user
	// message of a session (the task and the repository files the agent was
	// given), drawn uniformly. Default 2000-14000: sessions start at 8k-20k
	// tokens with the system message.
	MinRepositoryTokens, MaxRepositoryTokens int
	// MinSteps and MaxSteps bound the requests of a session, drawn uniformly.
	// Default 16-40: a task of a few dozen tool calls; contexts grow by
	// ~2.5k tokens a step, to ~80k by the end of a mean session.
	MinSteps, MaxSteps int
	// MinResultTokens and MaxResultTokens bound each tool result appended
	// after an action, drawn uniformly. Default 1000-3000: a file, a test
	// log, a diff.
	MinResultTokens, MaxResultTokens int
	// MinActionTokens and MaxActionTokens bound each step's output (its
	// max_tokens, and the assistant message the next step carries), drawn
	// uniformly. Default 100-800: short tool calls, so prompts (~45k tokens
	// on average) are ~100x the outputs (~450).
	MinActionTokens, MaxActionTokens int
	// MaxPromptTokens ends a session early, before a step whose prompt would
	// exceed it (where an agent would compact its context). Default 100000:
	// room for the output within a 128k-token context (kvmesh-sim's
	// MaxModelLen is 131,072).
	MaxPromptTokens int
	// PrefillTokenTime and DecodeTokenTime model how long a step takes to
	// answer when its previous step is cached: its new tokens are
	// prefilled, then its action decoded token by token. Defaults 60 µs and
	// 10 ms, kvmesh-sim's timing (60 µs per prefill token; a decode step is
	// 8 ms plus 66 µs per running sequence, and prefill chunks share it).
	PrefillTokenTime, DecodeTokenTime time.Duration
	// Rate is the mean arrival rate of all agents together, in requests per
	// second. Agents start as a Poisson process at Rate; an agent's next
	// request arrives when its previous one would have been answered (the
	// modelled time above) plus a think time (the tool running),
	// exponentially distributed with the mean that makes Agents agents send
	// Rate requests per second: Agents/Rate minus a step's expected answer
	// time. When that is negative the think time is 0 and the rate is what
	// the agents can send (~7/s at the other defaults). 0 puts every arrival at 0 (closed-loop replay,
	// which keeps each session's steps in order). Default 4: a step every 8 s
	// per agent, ~4.6 s of it answering and ~3.4 s running tools; cache-blind
	// routing then prefills most of ~180k prompt tokens per second, more than
	// 8 simulated backends can (~130k), while the previous steps hold ~95%
	// of them.
	Rate float64
	// Seed selects lengths, arrivals and text. Default 1.
	Seed uint64
	// Body sets model, streaming and ignore_eos.
	Body BodyOptions
}

// DefaultAgentOptions returns the defaults documented on AgentOptions.
func DefaultAgentOptions() AgentOptions {
	return AgentOptions{
		Agents:              32,
		Requests:            1000,
		SystemTokens:        6000,
		MinRepositoryTokens: 2000,
		MaxRepositoryTokens: 14000,
		MinSteps:            16,
		MaxSteps:            40,
		MinResultTokens:     1000,
		MaxResultTokens:     3000,
		MinActionTokens:     100,
		MaxActionTokens:     800,
		MaxPromptTokens:     100000,
		PrefillTokenTime:    60 * time.Microsecond,
		DecodeTokenTime:     10 * time.Millisecond,
		Rate:                4,
		Seed:                1,
		Body:                DefaultBodyOptions(),
	}
}

// validate reports the first invalid option.
func (o *AgentOptions) validate() error {
	c := optionChecker{gen: "Agent"}
	c.positive("Agents", o.Agents)
	c.ordered("Agents", "1<<20", o.Agents, maxRequests)
	c.positive("Requests", o.Requests)
	c.ordered("Requests", "1<<20", o.Requests, maxRequests)
	c.tokens("SystemTokens", o.SystemTokens)
	c.tokens("MinRepositoryTokens", o.MinRepositoryTokens)
	c.tokens("MaxRepositoryTokens", o.MaxRepositoryTokens)
	c.ordered("MinRepositoryTokens", "MaxRepositoryTokens", o.MinRepositoryTokens, o.MaxRepositoryTokens)
	c.positive("MinSteps", o.MinSteps)
	c.ordered("MinSteps", "MaxSteps", o.MinSteps, o.MaxSteps)
	c.ordered("MaxSteps", "1<<20", o.MaxSteps, maxRequests)
	c.tokens("MinResultTokens", o.MinResultTokens)
	c.tokens("MaxResultTokens", o.MaxResultTokens)
	c.ordered("MinResultTokens", "MaxResultTokens", o.MinResultTokens, o.MaxResultTokens)
	c.positive("MinActionTokens", o.MinActionTokens)
	c.tokens("MaxActionTokens", o.MaxActionTokens)
	c.ordered("MinActionTokens", "MaxActionTokens", o.MinActionTokens, o.MaxActionTokens)
	c.tokens("MaxPromptTokens", o.MaxPromptTokens)
	c.rate(o.Rate)
	c.body(o.Body)
	if c.err == nil && (o.PrefillTokenTime < 0 || o.PrefillTokenTime > time.Second || o.DecodeTokenTime < 0 || o.DecodeTokenTime > time.Minute) {
		c.err = fmt.Errorf("workload: Agent: PrefillTokenTime (%v) must be within 0-1s and DecodeTokenTime (%v) within 0-1m",
			o.PrefillTokenTime, o.DecodeTokenTime)
	}
	if first := o.SystemTokens + o.MaxRepositoryTokens + 2*tokensPerMessage + tokensGenPrompt; c.err == nil && first > o.MaxPromptTokens {
		c.err = fmt.Errorf("workload: Agent: a first step of up to %d tokens exceeds MaxPromptTokens (%d)", first, o.MaxPromptTokens)
	}
	return c.err
}

// expectedAnswer is the modelled answer time of a step, in seconds, averaged
// over a session of the mean length (early ends at MaxPromptTokens aside):
// the first step prefills its repository message (the shared system message
// is cached after the first session), a later one the previous action and
// its result.
func (o *AgentOptions) expectedAnswer() float64 {
	mean := func(lo, hi int) float64 { return float64(lo+hi) / 2 }
	steps := mean(o.MinSteps, o.MaxSteps)
	first := mean(o.MinRepositoryTokens, o.MaxRepositoryTokens) + tokensPerMessage + chatOverhead
	later := mean(o.MinActionTokens, o.MaxActionTokens) + mean(o.MinResultTokens, o.MaxResultTokens) + 2*tokensPerMessage
	// float64() stops FMA fusion (see Agent).
	fresh := (first + float64((steps-1)*later)) / steps
	return float64(fresh*o.PrefillTokenTime.Seconds()) + float64(mean(o.MinActionTokens, o.MaxActionTokens)*o.DecodeTokenTime.Seconds())
}

// agentSession is one session's steps and their modelled answer times.
type agentSession struct {
	reqs   []Request
	answer []float64 // seconds
	next   int       // the next step to send
}

// newSession builds session id's recipe. Its lengths come from an rng of its
// own, so a session's content does not depend on the arrival draws (Rate).
func (o *AgentOptions) newSession(id int, enc *encoding, system message) *agentSession {
	r := newRNG(mix(o.Seed, uint64(id)))
	steps := r.Range(o.MinSteps, o.MaxSteps)
	repo := span{block: textID(nsAgentRepository, o.Seed, id, 0), words: int32(r.Range(o.MinRepositoryTokens, o.MaxRepositoryTokens))}
	// Every step shares one backing array: step t uses msgs[:2t+2].
	msgs := append(make([]message, 0, 2*steps+2), system, message{role: roleUser, spans: []span{repo}})
	s := &agentSession{reqs: make([]Request, 0, steps), answer: make([]float64, 0, steps)}
	prev := 0
	for t := range steps {
		if t > 0 {
			action := span{block: textID(nsAgentAction, o.Seed, id, t-1), words: int32(s.reqs[t-1].OutputTokens)}
			result := span{block: textID(nsAgentResult, o.Seed, id, t), words: int32(r.Range(o.MinResultTokens, o.MaxResultTokens))}
			if prev+int(action.words+result.words)+2*tokensPerMessage > o.MaxPromptTokens {
				break
			}
			msgs = append(msgs, message{role: roleAssistant, spans: []span{action}}, message{role: roleUser, spans: []span{result}})
		}
		out := r.Range(o.MinActionTokens, o.MaxActionTokens)
		req := newRequest(enc, msgs[:len(msgs):len(msgs)], out)
		req.Conversation, req.Group, req.Turn = id, id, t
		fresh := req.PromptTokens - prev
		if t == 0 {
			fresh -= o.SystemTokens
		}
		s.reqs = append(s.reqs, req)
		// float64() stops FMA fusion (see Agent).
		s.answer = append(s.answer, float64(float64(fresh)*o.PrefillTokenTime.Seconds())+float64(float64(out)*o.DecodeTokenTime.Seconds()))
		prev = req.PromptTokens
	}
	return s
}

// agentSlot is one agent: its current session and when its next request
// arrives (seconds).
type agentSlot struct {
	s  *agentSession
	at float64
}

// Agent generates Requests requests from Agents agents. Step 0 of a session
// sends the system message (shared by every session) and a user message
// (the task and repository files); step t > 0 sends step t-1's messages
// followed by step t-1's action (an assistant message of its OutputTokens
// words) and a user message holding the tool's result. Conversation and
// Group are the session (numbered as sessions start); Turn is the step.
// Requests are in arrival order (see Rate), the agents' steps interleaved;
// at Rate 0 a session's steps come after every session's earlier steps.
// Each agent's first session is joined at a random step (its first request
// has Turn > 0 and no cached history), as when measuring agents already at
// work; later sessions start at step 0.
//
// Bodies are rendered on demand (about 245 MB at the defaults; see
// Workload.Materialize).
func Agent(o AgentOptions) (*Workload, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	r := newRNG(o.Seed)
	enc := newEncoding(o.Body)
	system := message{role: roleSystem, spans: []span{{block: textID(nsAgentSystem, o.Seed, 0, 0), words: int32(o.SystemTokens)}}}
	think := 0.0
	if o.Rate > 0 {
		think = max(float64(o.Agents)/o.Rate-o.expectedAnswer(), 0)
	}
	sessions := 0
	slots := make([]agentSlot, o.Agents)
	start := 0.0
	for a := range slots {
		if a > 0 && o.Rate > 0 {
			start += r.Exp() / o.Rate
		}
		// The agents were already at work: each first session is joined at
		// a random step, so the load (and prompt lengths) are level from
		// the start instead of ramping up over a session's length.
		slots[a] = agentSlot{s: o.newSession(sessions, enc, system), at: start}
		slots[a].s.next = r.IntN(len(slots[a].s.reqs))
		sessions++
	}
	out := make([]Request, 0, o.Requests)
	for len(out) < o.Requests {
		// The agent whose request comes first; ties (Rate 0) go to the
		// earlier step, then the earlier session.
		k := 0
		for a := 1; a < len(slots); a++ {
			x, y := &slots[a], &slots[k]
			xr, yr := &x.s.reqs[x.s.next], &y.s.reqs[y.s.next]
			if x.at < y.at || x.at == y.at && (xr.Turn < yr.Turn || xr.Turn == yr.Turn && xr.Conversation < yr.Conversation) {
				k = a
			}
		}
		slot := &slots[k]
		req := slot.s.reqs[slot.s.next]
		req.At = time.Duration(slot.at * float64(time.Second))
		out = append(out, req)
		if o.Rate > 0 {
			// float64() stops FMA fusion, which would round differently on
			// some CPUs and change the workload.
			slot.at += slot.s.answer[slot.s.next] + float64(think*r.Exp())
		}
		if slot.s.next++; slot.s.next == len(slot.s.reqs) {
			slot.s = o.newSession(sessions, enc, system)
			sessions++
		}
	}
	name := fmt.Sprintf("agent(agents=%d requests=%d steps=%d-%d rate=%g seed=%d)", o.Agents, o.Requests, o.MinSteps, o.MaxSteps, o.Rate, o.Seed)
	w := &Workload{Name: name, Requests: out}
	w.summarize()
	return w, nil
}
