package router

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/valyala/fastjson"
)

// scanned feeds answer to a scanner in pieces of size chunk; parseAll
// turns the skipping of lines off.
func scanned(answer string, sse, parseAll bool, chunk int) *usageScanner {
	s := &usageScanner{parseAll: parseAll}
	s.start(sse)
	for len(answer) > 0 {
		n := min(chunk, len(answer))
		s.write([]byte(answer[:n]))
		answer = answer[n:]
	}
	return s
}

// scanUsage is the usage counts a scanner fed answer in pieces of size
// chunk reads.
func scanUsage(answer string, sse bool, chunk int) (prompt, cached int64, ok bool) {
	return scanned(answer, sse, false, chunk).usageCounts()
}

func TestUsageScanner(t *testing.T) {
	const report = `{"prompt_tokens":40,"completion_tokens":1,"prompt_tokens_details":{"cached_tokens":7}}`
	type usageCase struct {
		name           string
		answer         string
		sse            bool
		prompt, cached int64
		ok             bool
	}
	cases := []usageCase{
		{"json", `{"id":"x","choices":[{"message":{"content":"hi"}}],"usage":` + report + `}`, false, 40, 7, true},
		{"json, usage first", `{"usage":` + report + `, "choices":[]}` + "\n", false, 40, 7, true},
		{"responses API", `{"output":[],"usage":{"input_tokens":12,"input_tokens_details":{"cached_tokens":8}}}`, false, 12, 8, true},
		{"no cached count", `{"usage":{"prompt_tokens":40}}`, false, 0, 0, false},
		{"usage null", `{"usage":null}`, false, 0, 0, false},
		{"truncated answer", `{"choices":[],"usage":` + report, false, 0, 0, false},
		// The model's output quotes a usage report: inside a JSON string its
		// quotes are escaped, and the real report is elsewhere.
		{"report in the output", `{"choices":[{"message":{"content":"{\"usage\":{\"prompt_tokens\":999,\"prompt_tokens_details\":{\"cached_tokens\":999}}}"}}],"usage":` + report + `}`, false, 40, 7, true},
		{"only in the output", `{"choices":[{"message":{"content":"\"cached_tokens\": 999, \"prompt_tokens\": 999"}}]}`, false, 0, 0, false},
		{"nested usage key", `{"choices":[{"usage":{"prompt_tokens_details":{"cached_tokens":5}}}]}`, false, 0, 0, false},
		{"not an object", `[{"usage":` + report + `}]`, false, 0, 0, false},
		{"sse final usage event", "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}],\"usage\":null}\n\ndata: {\"choices\":[],\"usage\":" + report + "}\n\ndata: [DONE]\n\n", true, 40, 7, true},
		{"sse crlf", "data:{\"choices\":[]}\r\n\r\ndata: {\"usage\":" + report + "}\r\n\r\ndata: [DONE]\r\n\r\n", true, 40, 7, true},
		{"sse last report wins", "data: {\"usage\":{\"prompt_tokens\":1,\"prompt_tokens_details\":{\"cached_tokens\":1}}}\n\ndata: {\"usage\":" + report + "}\n\n", true, 40, 7, true},
		{"sse report in a delta", "data: {\"choices\":[{\"delta\":{\"content\":\"\\\"usage\\\":{\\\"cached_tokens\\\":3}\"}}]}\n\ndata: [DONE]\n\n", true, 0, 0, false},
		{"sse comment and event lines", ": ping\nevent: x\nid: 1\ndata: {\"usage\":" + report + "}\n\n", true, 40, 7, true},
		{"sse truncated event", "data: {\"usage\":" + report + "\n\n", true, 0, 0, false},
		// Deltas with "usage":null are skipped whole; a null member does not
		// hide a report after it in the same event.
		{"sse null deltas", "data: {\"choices\":[],\"usage\" : null }\n\ndata: {\"usage\":null,\"x\":1}\n\n", true, 0, 0, false},
		{"sse null then report", "data: {\"usage\":null,\"usage\":" + report + "}\n\n", true, 40, 7, true},
		{"sse usage as a value", "data: {\"a\":\"usage\",\"usage\":" + report + "}\n\n", true, 40, 7, true},
	}
	// Lines longer than the scanner holds while a read splits them: the
	// report first, then a long delta; a long null delta, then the report.
	long := strings.Repeat("a", maxPendingLine+700)
	cases = append(cases,
		usageCase{"sse report before a long delta", "data: {\"usage\":" + report + ",\"choices\":[{\"delta\":{\"content\":\"" + long + "\"}}]}\n\n", true, 40, 7, true},
		usageCase{"sse long null delta", "data: {\"choices\":[{\"delta\":{\"content\":\"" + long + "\"}}],\"usage\":null}\n\ndata: {\"usage\":" + report + "}\n\n", true, 40, 7, true},
	)
	for _, c := range cases {
		for _, chunk := range []int{1, 3, 7, 1000, 4096} {
			prompt, cached, ok := scanUsage(c.answer, c.sse, chunk)
			if ok != c.ok || prompt != c.prompt || cached != c.cached {
				t.Errorf("%s (chunks of %d): got %d/%d %v, want %d/%d %v", c.name, chunk, prompt, cached, ok, c.prompt, c.cached, c.ok)
			}
		}
	}
	// A usage object too large to be one is ignored.
	big := `{"usage":{"prompt_tokens":1,"prompt_tokens_details":{"cached_tokens":1},"x":"` + strings.Repeat("a", maxUsageBytes) + `"}}`
	if _, _, ok := scanUsage(big, false, 512); ok {
		t.Error("an oversized usage object was read")
	}
}

// FuzzUsageScanner: on any answer the scanner does not panic, and for a
// JSON object that fastjson accepts it finds exactly the top-level "usage"
// object fastjson sees (the last one, if the key repeats), fed in any
// chunking.
func FuzzUsageScanner(f *testing.F) {
	f.Add(`{"usage":{"prompt_tokens":4,"prompt_tokens_details":{"cached_tokens":2}}}`, uint8(3))
	f.Add(`{"a":"\"usage\":{}","usage":{"x":[1,{"y":"}"}]}}`, uint8(1))
	f.Add("data: {\"usage\":{\"input_tokens\":4,\"input_tokens_details\":{\"cached_tokens\":2}}}\n\n", uint8(5))
	f.Add(`{"usage":{},"usage":null}`, uint8(2))
	f.Add("data: {\"usage\":null}\ndata: {\"usage\" :null ,\"usage\":{\"a\":1}}\r\n", uint8(4))
	f.Fuzz(func(t *testing.T, answer string, chunk uint8) {
		step := int(chunk%16) + 1
		// Skipping the lines that cannot hold a usage object, whole or
		// split between writes, keeps the report parsing every line keeps.
		want := scanned(answer, true, true, len(answer)+1).last
		for _, n := range []int{len(answer) + 1, step, 1} {
			if got := scanned(answer, true, false, n).last; !bytes.Equal(got, want) {
				t.Fatalf("%q in pieces of %d: kept %q, parsing every line %q", answer, n, got, want)
			}
		}
		for _, sse := range []bool{false, true} {
			s := scanned(answer, sse, false, step)
			s.usageCounts()
			if sse || len(s.last) > maxUsageBytes {
				continue
			}
			var p fastjson.Parser
			v, err := p.Parse(answer)
			if err != nil || v.Type() != fastjson.TypeObject {
				continue
			}
			o, _ := v.Object()
			var want *fastjson.Value
			o.Visit(func(k []byte, v *fastjson.Value) {
				if string(k) == "usage" {
					want = v
				}
			})
			if want == nil || want.Type() != fastjson.TypeObject || len(want.String()) > maxUsageBytes/2 {
				continue // absent, not an object, or near the size bound (the raw text may exceed it)
			}
			if len(s.last) == 0 {
				t.Fatalf("%q: usage %s not found", answer, want)
			}
			var q fastjson.Parser
			got, err := q.ParseBytes(s.last)
			if err != nil || got.String() != want.String() {
				t.Fatalf("%q: got usage %q, want %s", s.last, got, want)
			}
		}
	})
}

// TestUsageOnlyFromTheReport: through the proxy, an answer that mentions
// cached_tokens anywhere but in its top-level usage object (plain text, a
// nested object) counts nothing; the old scan of the answer's last bytes
// counted both.
func TestUsageOnlyFromTheReport(t *testing.T) {
	a := newFakeBackend(t, "a")
	answers := []struct{ ctype, body string }{
		{"text/plain", `the log says "prompt_tokens": 100, "cached_tokens": 90`},
		{"application/json", `{"choices":[{"message":{"content":"hi"},"usage":{"prompt_tokens":100,"prompt_tokens_details":{"cached_tokens":90}}}]}`},
		{"application/json", `{"choices":[],"usage":{"prompt_tokens":10,"prompt_tokens_details":{"cached_tokens":4}}}`},
	}
	next := 0
	a.setHook(func(w http.ResponseWriter, r *http.Request, body []byte) {
		w.Header().Set("Content-Type", answers[next].ctype)
		_, _ = io.WriteString(w, answers[next].body)
	})
	g := newRig(t, nil, a)
	for next = range answers {
		if code, _, body := g.call("POST", "/v1/chat/completions", chat("m1", "s", "hello")); code != 200 {
			t.Fatalf("answer %d: %d %s", next, code, body)
		}
	}
	if got := g.counter("kvmesh_router_backend_cached_tokens_total", "backend", "a"); got != 4 {
		t.Errorf("cached tokens %v, want 4 (only the last answer's report)", got)
	}
	if got := g.counter("kvmesh_router_backend_prompt_tokens_total", "backend", "a"); got != 10 {
		t.Errorf("prompt tokens %v, want 10", got)
	}
}

// BenchmarkUsageScanner is the per-answer cost of finding the usage report
// in a streamed answer of 200 token deltas (each with "usage":null, as
// vLLM streams with include_usage) and the final report: read an event at
// a time, as an engine flushes them, in 512-byte pieces that split a third
// of the events, and parsing every line (what the scanner did before it
// skipped the deltas).
func BenchmarkUsageScanner(b *testing.B) {
	var sb strings.Builder
	var events []int // where each event ends
	for i := 0; i < 200; i++ {
		sb.WriteString(`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":" token"},"finish_reason":null}],"usage":null}` + "\n\n")
		events = append(events, sb.Len())
	}
	sb.WriteString(`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":4000,"completion_tokens":200,"total_tokens":4200,"prompt_tokens_details":{"cached_tokens":3000}}}` + "\n\ndata: [DONE]\n\n")
	events = append(events, sb.Len())
	answer := []byte(sb.String())
	in512 := func(yield func([]byte)) {
		for p := answer; len(p) > 0; p = p[min(len(p), 512):] {
			yield(p[:min(len(p), 512)])
		}
	}
	for _, c := range []struct {
		name     string
		parseAll bool
		pieces   func(yield func(p []byte))
	}{
		{"events", false, func(yield func([]byte)) {
			at := 0
			for _, end := range events {
				yield(answer[at:end])
				at = end
			}
		}},
		{"512B", false, in512},
		{"512B-parse-all", true, in512},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(answer)))
			b.ReportAllocs()
			s := usageScanner{parseAll: c.parseAll}
			write := s.write
			for b.Loop() {
				s.start(true)
				c.pieces(write)
				if _, cached, ok := s.usageCounts(); !ok || cached != 3000 {
					b.Fatal("usage not found")
				}
			}
		})
	}
}

func TestNoUsageObject(t *testing.T) {
	for line, want := range map[string]bool{
		``: true,
		`{"choices":[{"delta":{"content":"a"}}]}`: true,
		`{"usage":null}`:                true,
		`{"usage" :	null ,"id":"x"}`:    true,
		`{"c":"\"usage\":{}"}`:          true, // escaped quotes: not the key usageDoc matches
		`{"usage":{"prompt_tokens":1}}`: false,
		`{"usage":null,"usage":{}}`:     false,
		`{"usage":nullx}`:               false,
		`{"usage":null`:                 false, // the member's end is not in the line
		`{"a":"usage"}`:                 false, // conservative: left to usageDoc
		`{"usage"`:                      false,
	} {
		if got := noUsageObject([]byte(line)); got != want {
			t.Errorf("noUsageObject(%q) = %v, want %v", line, got, want)
		}
	}
	for p, want := range map[string]int{"": -1, "abc": -1, "a\nb": 1, "a\r\nb": 1, "ab\n\r": 2, "\r": 0} {
		if got := indexLineEnd([]byte(p)); got != want {
			t.Errorf("indexLineEnd(%q) = %d, want %d", p, got, want)
		}
	}
}
