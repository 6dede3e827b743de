package router

import (
	"errors"
	"strconv"
	"strings"
	"testing"
)

type failingTokenizer struct{}

func (failingTokenizer) Tokenize(string, []byte, []int, []uint32, []int) ([]uint32, []int, error) {
	return nil, nil, errors.New("no vocabulary")
}

// With a Tokenizer the keys are token blocks: the route header counts
// tokens, a conversation's next turn still matches, and prompts given as
// ids are read as ids.
func TestTokenMode(t *testing.T) {
	g := newRig(t, func(_ *Config, d *Deps) { d.Tokenizer = WordTokenizer{} }, fourBackends(t)...)
	sys := longText("system", 3000)
	_, r1, _ := g.call("POST", "/v1/chat/completions", chat("m1", sys, "hello there"))
	_, total, _ := strings.Cut(routeField(r1, "matched"), "/")
	n, _ := strconv.Atoi(total)
	var p Prompt
	if err := Render(EndpointChat, []byte(chat("m1", sys, "hello there")), &p); err != nil {
		t.Fatal(err)
	}
	toks, _, _ := WordTokenizer{}.Tokenize("m1", p.Units, p.Ends, nil, nil)
	if n != len(toks) || n >= len(p.Units)/2 {
		t.Fatalf("route total %d, want the %d word tokens (rendering is %d bytes)", n, len(toks), len(p.Units))
	}
	_, r2, _ := g.call("POST", "/v1/chat/completions", chat("m1", sys, "hello there", "hi", "more"))
	if routeField(r2, "reason") != "prefix" || routeField(r2, "backend") != routeField(r1, "backend") {
		t.Fatalf("turn 2 %q after %q", r2, r1)
	}
	ids := make([]string, 100)
	for i := range ids {
		ids[i] = strconv.Itoa(1000 + i)
	}
	_, r3, _ := g.call("POST", "/v1/completions", `{"model":"m1","prompt":[`+strings.Join(ids, ",")+`]}`)
	if routeField(r3, "matched") != "0/100" {
		t.Fatalf("a prompt of 100 ids: %q", r3)
	}
}

func TestTokenizerFailureFallsBackToBytes(t *testing.T) {
	g := newRig(t, func(_ *Config, d *Deps) { d.Tokenizer = failingTokenizer{} }, newFakeBackend(t, "a"))
	body := `{"model":"m1","prompt":"` + longText("p", 300) + `"}`
	status, route, _ := g.call("POST", "/v1/completions", body)
	if status != 200 || !strings.HasSuffix(routeField(route, "matched"), "/"+strconv.Itoa(len(longText("p", 300)))) {
		t.Fatalf("%d %q: want byte-mode units", status, route)
	}
	if g.counter("kvmesh_router_errors_total", "kind", "tokenize") != 1 {
		t.Error("tokenizer failure not counted")
	}
}
