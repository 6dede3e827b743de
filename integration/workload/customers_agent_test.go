package workload

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

// onDemand are the generators whose bodies are rendered when sent, at their
// defaults with a seed; small selects fewer requests.
var onDemand = map[string]func(seed uint64, small bool) (*Workload, error){
	"Customers": func(seed uint64, small bool) (*Workload, error) {
		o := DefaultCustomersOptions()
		o.Seed = seed
		if small {
			o.Requests = 200
		}
		return Customers(o)
	},
	"Agent": func(seed uint64, small bool) (*Workload, error) {
		o := DefaultAgentOptions()
		o.Seed = seed
		if small {
			o.Requests = 100
		}
		return Agent(o)
	},
}

// onDemandDigests pin the default workloads (arrival times, ids and bodies)
// like pinnedDigests; a deliberate change updates them, said in the commit.
var onDemandDigests = map[string]string{
	"Customers": "3e1a599a3622a141d186fa301a647dadb87e6ec121dd9b2ad341dfb6f49b6e4c",
	"Agent":     "013c4c923386a6d974bb4c23b9444ea44bcde37dea20fb51245dcae8882eeeea",
}

func mustOnDemand(t *testing.T, name string, seed uint64, small bool) *Workload {
	t.Helper()
	w, err := onDemand[name](seed, small)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return w
}

// digest hashes every request's arrival (ms), ids and lengths, and the body
// of every 16th request (all of them render to 400 MB, slow under -race; the
// text of a block id never changes, so a sample over every conversation's
// lengths and ids still pins the workload).
func digest(w *Workload) string {
	h := sha256.New()
	var buf []byte
	for i := range w.Requests {
		r := &w.Requests[i]
		fmt.Fprintf(h, "%d %d %d %d %d %d\n", r.At/time.Millisecond, r.Conversation, r.Group, r.Turn, r.PromptTokens, r.OutputTokens)
		if i%16 == 0 {
			buf = r.AppendBody(buf[:0])
			h.Write(buf)
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}

func TestOnDemandDeterministic(t *testing.T) {
	for name := range onDemand {
		t.Run(name, func(t *testing.T) {
			a, b, c := mustOnDemand(t, name, 1, true), mustOnDemand(t, name, 1, true), mustOnDemand(t, name, 2, true)
			if len(a.Requests) != len(b.Requests) || a.Name != b.Name || digest(a) != digest(b) {
				t.Fatal("same options, different workloads")
			}
			if bytes.Equal(a.Requests[0].BodyBytes(), c.Requests[0].BodyBytes()) || digest(a) == digest(c) {
				t.Fatal("a different seed gave the same workload")
			}
		})
	}
}

// At defaults: bodies are left to render on demand, sampled bodies are valid
// and counted exactly, the summary adds up, arrivals are ordered, and the
// workload matches its pinned digest.
func TestOnDemandDefaults(t *testing.T) {
	for name := range onDemand {
		t.Run(name, func(t *testing.T) {
			w := mustOnDemand(t, name, 1, false)
			var prompt, output int64
			for i := range w.Requests {
				r := &w.Requests[i]
				if r.Body != nil {
					t.Fatal("bodies are rendered on demand")
				}
				if i%128 == 0 {
					if b := checkRequest(t, r); b.Model != "kvmesh-sim" || b.Stream == nil || !*b.Stream {
						t.Fatalf("default body options not applied: model %q stream %v", b.Model, b.Stream)
					}
				}
				prompt += int64(r.PromptTokens)
				output += int64(r.OutputTokens)
				if i > 0 && r.At < w.Requests[i-1].At {
					t.Fatalf("arrivals out of order at %d", i)
				}
			}
			if prompt != w.PromptTokens || output != w.OutputTokens || w.Span != w.Requests[len(w.Requests)-1].At {
				t.Fatalf("summary %d/%d/%v, recount %d/%d", w.PromptTokens, w.OutputTokens, w.Span, prompt, output)
			}
			if got := digest(w); got != onDemandDigests[name] {
				t.Errorf("%s default workload digest %s, pinned %s", name, got, onDemandDigests[name])
			}
			t.Logf("%s: %d requests, %d conversations, %d groups, %d prompt tokens (max %d), input:output %.0f, span %v",
				w.Name, len(w.Requests), w.Conversations, w.Groups, w.PromptTokens, w.MaxPromptTokens,
				float64(w.PromptTokens)/float64(w.OutputTokens), w.Span)
		})
	}
}

// conversations splits w by Conversation, in arrival order, checking that
// each conversation's turns are consecutive.
func conversations(t *testing.T, w *Workload) map[int][]*Request {
	t.Helper()
	convs := make(map[int][]*Request)
	for i := range w.Requests {
		r := &w.Requests[i]
		if prev := convs[r.Conversation]; len(prev) > 0 && r.Turn != prev[len(prev)-1].Turn+1 {
			t.Fatalf("conversation %d: turn %d after turn %d", r.Conversation, r.Turn, prev[len(prev)-1].Turn)
		}
		convs[r.Conversation] = append(convs[r.Conversation], r)
	}
	if len(convs) != w.Conversations {
		t.Fatalf("%d conversations, summary says %d", len(convs), w.Conversations)
	}
	return convs
}

// checkExtends checks that cur's messages are prev's, then prev's reply (an
// assistant message of prev.OutputTokens words), then one user message of
// lo-hi words; and that cur's body starts with prev's up to its last message.
// It returns cur's parsed body.
func checkExtends(t *testing.T, prev, cur *Request, lo, hi int) simBody {
	t.Helper()
	_, pb, _ := simPromptTokens(prev.BodyBytes())
	cb := checkRequest(t, cur)
	n := len(pb.Messages)
	if len(cb.Messages) != n+2 || !slices.Equal(pb.Messages, cb.Messages[:n]) {
		t.Fatalf("conversation %d turn %d does not extend turn %d", cur.Conversation, cur.Turn, prev.Turn)
	}
	reply, next := cb.Messages[n], cb.Messages[n+1]
	if reply.Role != "assistant" || len(strings.Fields(reply.Content)) != prev.OutputTokens {
		t.Fatalf("reply %s of %d words, want %d", reply.Role, len(strings.Fields(reply.Content)), prev.OutputTokens)
	}
	if words := len(strings.Fields(next.Content)); next.Role != "user" || words < lo || words > hi {
		t.Fatalf("appended %s message of %d words, want %d-%d", next.Role, words, lo, hi)
	}
	pbody := prev.BodyBytes()
	if cut := bytes.LastIndex(pbody, []byte(`],"max_tokens"`)); !bytes.HasPrefix(cur.BodyBytes(), pbody[:cut]) {
		t.Fatal("body does not extend the previous one byte for byte")
	}
	return cb
}

// reuseShare is the token-weighted share of each non-first request's prompt
// that is its conversation's previous prompt.
func reuseShare(w *Workload) float64 {
	last := make(map[int]int)
	var prev, cur int64
	for i := range w.Requests {
		r := &w.Requests[i]
		if p, ok := last[r.Conversation]; ok {
			prev += int64(p)
			cur += int64(r.PromptTokens)
		}
		last[r.Conversation] = r.PromptTokens
	}
	return float64(prev) / float64(cur)
}

func TestCustomersShape(t *testing.T) {
	o := DefaultCustomersOptions()
	w, err := Customers(o)
	if err != nil {
		t.Fatal(err)
	}
	if len(w.Requests) != 3000 || w.Groups != 150 {
		t.Fatalf("%d requests, %d customers", len(w.Requests), w.Groups)
	}
	convs := conversations(t, w)
	contexts := make(map[int]string)
	checked := 0
	for c, reqs := range convs {
		if reqs[0].Turn != 0 || len(reqs) > o.MaxTurns {
			t.Fatalf("conversation %d: starts at turn %d, %d turns", c, reqs[0].Turn, len(reqs))
		}
		for ti, r := range reqs {
			if r.Group != reqs[0].Group {
				t.Fatalf("conversation %d changes customer", c)
			}
			// Lengths: context, ti queries and answers, the new query,
			// template tokens.
			want := o.ContextTokens + (ti+1)*o.QueryTokens + 2*(2*ti+2) + 1
			for _, p := range reqs[:ti] {
				want += p.OutputTokens
			}
			if r.PromptTokens != want || r.OutputTokens < o.MinAnswerTokens || r.OutputTokens > o.MaxAnswerTokens {
				t.Fatalf("conversation %d turn %d: %d/%d tokens, want %d prompt", c, ti, r.PromptTokens, r.OutputTokens, want)
			}
		}
		if checked < 16 { // bodies are checked for a sample (slow under -race)
			checked++
			_, b, _ := simPromptTokens(reqs[0].BodyBytes())
			if len(b.Messages) != 2 || b.Messages[0].Role != "system" || len(strings.Fields(b.Messages[1].Content)) != o.QueryTokens {
				t.Fatalf("conversation %d turn 0: %d messages", c, len(b.Messages))
			}
			if ctx, ok := contexts[reqs[0].Group]; ok && ctx != b.Messages[0].Content {
				t.Fatalf("customer %d has two contexts", reqs[0].Group)
			}
			contexts[reqs[0].Group] = b.Messages[0].Content
			for ti := 1; ti < len(reqs); ti++ {
				checkExtends(t, reqs[ti-1], reqs[ti], o.QueryTokens, o.QueryTokens)
			}
		}
	}
	if len(contexts) < 12 {
		t.Fatalf("only %d customers sampled", len(contexts))
	}
	seen := make(map[string]bool)
	for _, ctx := range contexts {
		if seen[ctx[:200]] {
			t.Fatal("two customers share their context's start")
		}
		seen[ctx[:200]] = true
	}
	// Interleaving: the first 100 requests come from ~100 users.
	early := make(map[int]bool)
	for _, r := range w.Requests[:100] {
		early[r.Conversation] = true
	}
	if len(early) < 85 {
		t.Fatalf("first 100 requests come from only %d conversations", len(early))
	}
	if mean := w.Span.Seconds() / float64(len(w.Requests)-1); math.Abs(mean-1/o.Rate) > 0.1/o.Rate {
		t.Fatalf("mean inter-arrival %.3fs, want %.3fs", mean, 1/o.Rate)
	}
	// The bound: a query hits its customer's context (once any user of the
	// customer has sent one) and its own conversation so far; answers and
	// new queries miss.
	b := w.PrefixCacheBound(16)
	share := reuseShare(w)
	if b.HitRate() < 0.80 || b.HitRate() > 0.86 || share < 0.83 || share > 0.90 {
		t.Fatalf("bound %.4f (want 0.80-0.86), previous-turn share %.4f (want 0.83-0.90)", b.HitRate(), share)
	}
	t.Logf("bound %.4f, working set %d blocks, previous-turn share %.4f, %d conversations, max prompt %d",
		b.HitRate(), b.UniqueBlocks, share, w.Conversations, w.MaxPromptTokens)
}

func TestAgentShape(t *testing.T) {
	o := DefaultAgentOptions()
	w, err := Agent(o)
	if err != nil {
		t.Fatal(err)
	}
	if len(w.Requests) != o.Requests {
		t.Fatalf("%d requests", len(w.Requests))
	}
	convs := conversations(t, w)
	joined := 0
	for s, reqs := range convs {
		if s >= o.Agents && reqs[0].Turn != 0 {
			t.Fatalf("session %d (not a first session) starts at step %d", s, reqs[0].Turn)
		}
		if reqs[0].Turn > 0 {
			joined++
		}
		if first := reqs[0].PromptTokens; reqs[0].Turn == 0 && (first < o.SystemTokens+o.MinRepositoryTokens+5 || first > o.SystemTokens+o.MaxRepositoryTokens+5) {
			t.Fatalf("session %d step 0: %d tokens", s, first)
		}
		for ti, r := range reqs {
			if r.Group != s || r.PromptTokens > o.MaxPromptTokens || r.OutputTokens < o.MinActionTokens || r.OutputTokens > o.MaxActionTokens {
				t.Fatalf("session %d step %d: group %d, %d/%d tokens", s, r.Turn, r.Group, r.PromptTokens, r.OutputTokens)
			}
			// A step adds the previous action, a result and two messages.
			if ti > 0 {
				if added := r.PromptTokens - reqs[ti-1].PromptTokens - reqs[ti-1].OutputTokens - 4; added < o.MinResultTokens || added > o.MaxResultTokens {
					t.Fatalf("session %d step %d adds a result of %d tokens", s, r.Turn, added)
				}
			}
		}
	}
	if joined < o.Agents/2 || w.Conversations < 2*o.Agents-8 {
		t.Fatalf("%d sessions joined mid-way of %d", joined, w.Conversations)
	}
	// Pacing: a step arrives after its previous step's modelled answer time;
	// the agents together send ~Rate requests per second; at most Agents
	// sessions are under way at once.
	for _, reqs := range convs {
		for ti := 1; ti < len(reqs); ti++ {
			p, r := reqs[ti-1], reqs[ti]
			answer := time.Duration(p.OutputTokens) * o.DecodeTokenTime
			if ti >= 2 { // p's new tokens are known
				answer += time.Duration(p.PromptTokens-reqs[ti-2].PromptTokens) * o.PrefillTokenTime
			}
			if gap := r.At - p.At; gap < answer-time.Microsecond {
				t.Fatalf("session %d step %d arrives %v after step %d, before its answer (%v)", r.Conversation, r.Turn, gap, p.Turn, answer)
			}
		}
	}
	if rate := float64(len(w.Requests)-1) / w.Span.Seconds(); math.Abs(rate-o.Rate) > 0.15*o.Rate {
		t.Fatalf("aggregate rate %.2f/s, want ~%g", rate, o.Rate)
	}
	open := 0
	for i := range w.Requests {
		r := &w.Requests[i]
		if reqs := convs[r.Conversation]; r == reqs[0] {
			open++
		}
		if open > o.Agents {
			t.Fatalf("%d sessions under way at request %d", open, i)
		}
		if reqs := convs[r.Conversation]; r == reqs[len(reqs)-1] {
			open--
		}
	}
	// ~95% of a prompt is the previous step's; prompts are ~100x outputs.
	ratio := float64(w.PromptTokens) / float64(w.OutputTokens)
	b := w.PrefixCacheBound(16)
	share := reuseShare(w)
	if share < 0.93 || share > 0.97 || ratio < 80 || ratio > 125 || b.HitRate() < 0.89 || b.HitRate() > 0.95 {
		t.Fatalf("previous-step share %.4f (want 0.93-0.97), input:output %.0f (want 80-125), bound %.4f (want 0.89-0.95)", share, ratio, b.HitRate())
	}
	t.Logf("bound %.4f, working set %d blocks, previous-step share %.4f, input:output %.0f, %d sessions (%d joined mid-way), mean prompt %d, max %d",
		b.HitRate(), b.UniqueBlocks, share, ratio, w.Conversations, joined, w.PromptTokens/int64(len(w.Requests)), w.MaxPromptTokens)

	// Rate 0: every arrival at 0, each session's steps in order (closed-loop
	// replay), earlier steps first; content does not depend on the rate.
	o.Rate, o.Requests = 0, 300
	w0, err := Agent(o)
	if err != nil {
		t.Fatal(err)
	}
	conversations(t, w0)
	for i := range w0.Requests {
		if w0.Requests[i].At != 0 {
			t.Fatal("rate 0: arrivals must be at 0")
		}
	}
	if first := convs[3][0]; first.Turn == 0 {
		var same *Request
		for i := range w0.Requests {
			if r := &w0.Requests[i]; r.Conversation == 3 && r.Turn == 0 {
				same = r
			}
		}
		if same == nil || !bytes.Equal(same.BodyBytes(), first.BodyBytes()) {
			t.Fatal("session content depends on the rate")
		}
	}
}

// Bodies, at a tenth of the default lengths (full-size bodies are slow to
// parse under -race): every step of every session extends the previous one
// byte for byte, all sessions share the system message.
func TestAgentBodies(t *testing.T) {
	o := DefaultAgentOptions()
	o.Requests = 400
	o.SystemTokens, o.MinRepositoryTokens, o.MaxRepositoryTokens = 600, 200, 1400
	o.MinResultTokens, o.MaxResultTokens, o.MinActionTokens, o.MaxActionTokens = 100, 300, 10, 80
	o.MaxPromptTokens = 8000
	w, err := Agent(o)
	if err != nil {
		t.Fatal(err)
	}
	var system string
	for s, reqs := range conversations(t, w) {
		b := checkRequest(t, reqs[0])
		if b.Messages[0].Role != "system" || len(strings.Fields(b.Messages[0].Content)) != o.SystemTokens {
			t.Fatalf("session %d: no %d-word system message", s, o.SystemTokens)
		}
		if system != "" && b.Messages[0].Content != system {
			t.Fatal("sessions have different system messages")
		}
		system = b.Messages[0].Content
		if reqs[0].Turn == 0 && len(b.Messages) != 2 {
			t.Fatalf("session %d step 0: %d messages", s, len(b.Messages))
		}
		if reqs[0].Turn > 0 && len(b.Messages) != 2+2*reqs[0].Turn {
			t.Fatalf("session %d joined at step %d: %d messages", s, reqs[0].Turn, len(b.Messages))
		}
		for ti := 1; ti < len(reqs); ti++ {
			checkExtends(t, reqs[ti-1], reqs[ti], o.MinResultTokens, o.MaxResultTokens)
		}
	}
	if w.MaxPromptTokens > o.MaxPromptTokens {
		t.Fatalf("a prompt of %d tokens, above MaxPromptTokens", w.MaxPromptTokens)
	}
}

func TestCustomersAgentOptionErrors(t *testing.T) {
	cu := func(f func(*CustomersOptions)) error {
		o := DefaultCustomersOptions()
		f(&o)
		_, err := Customers(o)
		return err
	}
	ag := func(f func(*AgentOptions)) error {
		o := DefaultAgentOptions()
		f(&o)
		_, err := Agent(o)
		return err
	}
	bad := map[string]error{
		"cu customers":  cu(func(o *CustomersOptions) { o.Customers = 0 }),
		"cu users":      cu(func(o *CustomersOptions) { o.UsersPerCustomer = -1 }),
		"cu overflow":   cu(func(o *CustomersOptions) { o.Customers, o.UsersPerCustomer = 1<<62, 4 }),
		"cu answers":    cu(func(o *CustomersOptions) { o.MinAnswerTokens = 300 }),
		"cu no answer":  cu(func(o *CustomersOptions) { o.MinAnswerTokens = 0 }),
		"cu turns":      cu(func(o *CustomersOptions) { o.MinTurns, o.MaxTurns = 3, 2 }),
		"cu requests":   cu(func(o *CustomersOptions) { o.Requests = 0 }),
		"cu long":       cu(func(o *CustomersOptions) { o.MaxTurns, o.QueryTokens = 4096, 1<<20 }),
		"cu rate":       cu(func(o *CustomersOptions) { o.Rate = math.Inf(1) }),
		"cu model":      cu(func(o *CustomersOptions) { o.Body = BodyOptions{} }),
		"ag agents":     ag(func(o *AgentOptions) { o.Agents = 0 }),
		"ag requests":   ag(func(o *AgentOptions) { o.Requests = 1 << 30 }),
		"ag steps":      ag(func(o *AgentOptions) { o.MinSteps = 0 }),
		"ag results":    ag(func(o *AgentOptions) { o.MinResultTokens = 4000 }),
		"ag actions":    ag(func(o *AgentOptions) { o.MinActionTokens = 0 }),
		"ag first step": ag(func(o *AgentOptions) { o.MaxPromptTokens = 10000 }),
		"ag timing":     ag(func(o *AgentOptions) { o.DecodeTokenTime = -1 }),
		"ag rate":       ag(func(o *AgentOptions) { o.Rate = -2 }),
	}
	for name, err := range bad {
		if err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if err := ag(func(o *AgentOptions) { o.Rate = 1000 }); err != nil {
		t.Fatalf("a rate beyond what the agents can send is not an error: %v", err)
	}
}
