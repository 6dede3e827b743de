package sim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// testConfig is a small, fast configuration: 1000x time scale.
func testConfig() Config {
	c := DefaultConfig()
	c.Name = "test"
	c.Models = []string{"m"}
	c.CacheBlocks = 4096
	c.TimeScale = 1000
	return c
}

// startServer serves a new instance on a loopback httptest server.
func startServer(t testing.TB, mutate func(*Config)) (*Instance, *httptest.Server) {
	t.Helper()
	cfg := testConfig()
	if mutate != nil {
		mutate(&cfg)
	}
	in, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(in)
	t.Cleanup(func() {
		in.Close()
		srv.Close()
	})
	return in, srv
}

// words returns n distinct-ish words with the given prefix.
func words(prefix string, n int) string {
	var b strings.Builder
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%s%d", prefix, i)
	}
	return b.String()
}

type msg struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// chatBody renders a chat request.
func chatBody(t testing.TB, maxTokens int, extra map[string]any, msgs ...msg) []byte {
	t.Helper()
	m := map[string]any{"model": "m", "messages": msgs, "max_tokens": maxTokens}
	for k, v := range extra {
		m[k] = v
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

type usage struct {
	PromptTokens        int `json:"prompt_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	TotalTokens         int `json:"total_tokens"`
	PromptTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

type chatReply struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Model   string `json:"model"`
	Choices []struct {
		Index   int `json:"index"`
		Message struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		} `json:"message"`
		Text         string `json:"text"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
	Usage usage   `json:"usage"`
	Sim   simPart `json:"kvmesh_sim"`
}

// simPart is the simulator's own figures after a reply's usage.
type simPart struct {
	EngineTTFTUs int64 `json:"engine_ttft_us"`
}

// post sends body to path and returns the response with its body read.
func post(t testing.TB, url, path string, body []byte, hdr map[string]string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

// chat sends a non-streaming chat request that must succeed.
func chat(t testing.TB, url string, body []byte) chatReply {
	t.Helper()
	resp, b := post(t, url, ChatPath, body, nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	var r chatReply
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("reply %q: %v", b, err)
	}
	return r
}

// waitFor polls cond until it holds or 30 s pass. It is a liveness bound,
// not a timing assertion: generous, since only broken code reaches it and a
// loaded machine running -race may stall for seconds.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// histogram returns a histogram's sample count and sum from a registry.
func histogram(t testing.TB, reg prometheus.Gatherer, name string) (uint64, float64) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			h := mf.GetMetric()[0].GetHistogram()
			return h.GetSampleCount(), h.GetSampleSum()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0, 0
}

func approx(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

// --- manual engine: steps driven by the test, no goroutine, no sleeping ---

type manual struct {
	*engine
	ttfts []float64
	e2es  []float64
}

func newManual(t testing.TB, mutate func(*Config)) *manual {
	t.Helper()
	cfg := testConfig()
	if mutate != nil {
		mutate(&cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	m := &manual{}
	m.engine = newEngine(&cfg, cfg.Logger, engineHooks{
		ttft: func(s float64) { m.ttfts = append(m.ttfts, s) },
		e2e:  func(s float64) { m.e2es = append(m.e2es, s) },
	})
	return m
}

// step runs one engine step (if there is work) and reports whether it did.
func (m *manual) step() bool {
	idle := len(m.running) == 0 && m.waiting.len() == 0
	m.drain(idle, m.v)
	if len(m.running) == 0 && m.waiting.len() == 0 {
		m.publish()
		return false
	}
	dt := m.schedule()
	m.v += dt
	m.apply()
	m.publish()
	return true
}

// runUntilIdle steps until nothing is left and returns the step count.
func (m *manual) runUntilIdle(t testing.TB) int {
	t.Helper()
	n := 0
	for m.step() {
		n++
		if n > 1e6 {
			t.Fatal("engine does not converge")
		}
	}
	return n
}

// add submits a sequence of the given tokens.
func (m *manual) add(t testing.TB, toks []uint32, maxOut int, seed uint64) *seq {
	t.Helper()
	req := request{tokens: append([]uint32(nil), toks...), seed: seed}
	s := newSeq(uint64(len(m.ttfts)+1), &req, maxOut, m.cfg.BlockSize)
	if err := m.submit(s); err != nil {
		t.Fatal(err)
	}
	return s
}

// seqTokens returns n token ids unique to tag.
func seqTokens(tag string, n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = TokenID(fmt.Sprintf("%s%d", tag, i))
	}
	return out
}

func concat(parts ...[]uint32) []uint32 {
	var out []uint32
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}
