package bench

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

const (
	roleEvent  = `data: {"id":"x","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}` + "\n\n"
	tokenEvent = `data: {"id":"x","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"alpha beta"}}]}` + "\n\n"
	usageEvent = `data: {"id":"x","choices":[],"usage":{"prompt_tokens":70,"total_tokens":72,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":64}}}` + "\n\n"
	doneEvent  = "data: [DONE]\n\n"
)

func readCanned(t *testing.T, stream string) (Sample, error) {
	t.Helper()
	var s Sample
	err := readStream(bufio.NewReaderSize(strings.NewReader(stream), 16), time.Now().Add(-time.Millisecond), &s)
	return s, err
}

func TestReadStream(t *testing.T) {
	s, err := readCanned(t, roleEvent+tokenEvent+usageEvent+doneEvent)
	if err != nil {
		t.Fatal(err)
	}
	if s.TTFT <= 0 || s.OutputTokens != 2 || s.CachedTokens != 64 || s.EngineTTFT != 0 {
		t.Errorf("sample = %+v, want TTFT > 0, 2 output tokens, 64 cached, no engine TTFT", s)
	}
	// The simulator's engine TTFT follows the usage (µs, simulated).
	s, err = readCanned(t, tokenEvent+`data: {"choices":[],"usage":{"prompt_tokens":70,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":64}},"kvmesh_sim":{"engine_ttft_us":1250}}`+"\n\n"+doneEvent)
	if err != nil || s.EngineTTFT != 1250*time.Microsecond || s.CachedTokens != 64 {
		t.Errorf("usage with the simulator's engine TTFT: %+v, %v", s, err)
	}

	// The role event's empty content is not the first token.
	s, err = readCanned(t, roleEvent+doneEvent)
	if err != nil || s.TTFT != 0 {
		t.Errorf("role-only stream: TTFT %v err %v, want no TTFT", s.TTFT, err)
	}
	// A stream cut before [DONE] is an error, as is an error event.
	if _, err := readCanned(t, roleEvent+tokenEvent); err == nil {
		t.Error("a stream without [DONE] was accepted")
	}
	if _, err := readCanned(t, tokenEvent+`data: {"error":{"message":"boom","code":500}}`+"\n\n"); err == nil {
		t.Error("an error event was accepted")
	}
	// vLLM ends a stream that failed after content with json.dumps output
	// (spaces after the colons) and then [DONE]: a failure either way.
	for _, ev := range []string{
		`data: {"error":{"message":"boom","code":500}}`,
		`data: {"error": {"message": "boom", "type": "InternalServerError", "code": 500}}`,
		"data: {\"error\" :\t{\"message\":\"boom\"}}",
	} {
		if _, err := readCanned(t, roleEvent+tokenEvent+ev+"\n\n"+doneEvent); err == nil {
			t.Errorf("an error event followed by [DONE] was accepted: %s", ev)
		}
	}
	// Neither an error member that is not an object nor the word inside
	// content is a failure.
	for _, ev := range []string{
		`data: {"choices":[{"delta":{"content":"an \"error\": {x}"}}]}`,
		`data: {"choices":[{"finish_reason":"error"}],"error": null}`,
	} {
		if _, err := readCanned(t, roleEvent+ev+"\n\n"+doneEvent); err != nil {
			t.Errorf("%s: %v", ev, err)
		}
	}
	// Usage is read with either spelling too.
	s, err = readCanned(t, tokenEvent+`data: {"choices": [], "usage": {"prompt_tokens": 70, "completion_tokens": 2, "prompt_tokens_details": {"cached_tokens": 64}}}`+"\n\n"+doneEvent)
	if err != nil || s.OutputTokens != 2 || s.CachedTokens != 64 || s.PromptTokens != 70 {
		t.Errorf("spaced usage: %+v, %v", s, err)
	}
	// Lines longer than the reader's buffer are reassembled.
	long := `data: {"choices":[{"delta":{"content":"` + strings.Repeat("w ", 5000) + `"}}]}` + "\n\n"
	s, err = readCanned(t, long+doneEvent)
	if err != nil || s.TTFT <= 0 {
		t.Errorf("long event: TTFT %v err %v", s.TTFT, err)
	}
}

// A non-streaming answer that is an error object fails, with or without
// spaces around the colon, and so does an empty one; one with usage is an
// answer.
func TestReadJSONErrors(t *testing.T) {
	for body, fails := range map[string]bool{
		`{"error":{"message":"boom"}}`:                               true,
		`{"error": {"message": "boom", "code": 400}}`:                true,
		`{"choices":[],"usage": {"completion_tokens": 3}}`:           false,
		`{"choices":[{"message":{"content":"error: {x}"}}]}`:         false,
		`{"error": {"message": "x"}, "usage": {"prompt_tokens": 1}}`: false,
		``:     true,
		" \n ": true,
	} {
		var s Sample
		err := readJSON(bufio.NewReader(strings.NewReader(body)), time.Now(), &s)
		if (err != nil) != fails {
			t.Errorf("readJSON(%s): err %v, want failure %v", body, err, fails)
		}
	}
}

func TestHasContentAndIntAfter(t *testing.T) {
	for ev, want := range map[string]bool{
		`{"delta":{"content":""}}`:    false,
		`{"delta":{"content":"a"}}`:   true,
		`{"choices":[{"text":"b"}]}`:  true,
		`{"choices":[{"text":""}]}`:   false,
		`{"delta":{"role":"x"}}`:      false,
		`{"delta":{"content":"\"q"}}`: true,
	} {
		if got := hasContent([]byte(ev)); got != want {
			t.Errorf("hasContent(%s) = %v, want %v", ev, got, want)
		}
	}
	if got := intAfter([]byte(`"completion_tokens": 123,`), completionKy); got != 123 {
		t.Errorf("intAfter = %d, want 123", got)
	}
	if got := intAfter([]byte(`"x":1`), completionKy); got != 0 {
		t.Errorf("intAfter without the key = %d, want 0", got)
	}
}

func TestParseRoute(t *testing.T) {
	b, r, m := parseRoute("backend=b3; matched=640/9000; reason=prefix; policy=kvmesh")
	if b != "b3" || r != "prefix" || m != 640.0/9000 {
		t.Errorf("parseRoute = %q, %q, %v", b, r, m)
	}
	if b, r, m := parseRoute(""); b != "" || r != "" || m != 0 {
		t.Errorf("parseRoute(\"\") = %q, %q, %v", b, r, m)
	}
	for _, bad := range []string{"matched=5", "matched=-1/4", "matched=1/0", "matched=x/4"} {
		if _, _, m := parseRoute(bad); m != 0 {
			t.Errorf("parseRoute(%q) matched %v, want 0", bad, m)
		}
	}
	if got := parseHeld("backend=b3; matched=640/9000; reason=prefix; policy=kvmesh; held_ms=12.500"); got != 12500*time.Microsecond {
		t.Errorf("parseHeld = %v, want 12.5ms", got)
	}
	for _, bad := range []string{"backend=b3; reason=prefix", "held_ms=-3", "held_ms=x", "held_ms=NaN", "held_ms=1e300"} {
		if got := parseHeld(bad); got != 0 {
			t.Errorf("parseHeld(%q) = %v, want 0", bad, got)
		}
	}
}

func TestSendClassifiesAnswers(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		switch string(body) {
		case "stream":
			w.Header().Set("Content-Type", "text/event-stream")
			w.Header().Set("X-Kvmesh-Route", "backend=b1; matched=0/10; reason=miss; policy=kvmesh")
			io.WriteString(w, roleEvent+tokenEvent+usageEvent+doneEvent)
		case "json":
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"choices":[{"message":{"content":"hi"}}],"usage":{"completion_tokens":5,"prompt_tokens_details":{"cached_tokens":16}}}`)
		default:
			http.Error(w, "nope", http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	c := newHTTPClient(4)
	defer c.CloseIdleConnections()
	render := func(s string) func([]byte) []byte { return func(b []byte) []byte { return append(b, s...) } }

	var s Sample
	send(context.Background(), c, srv.URL, render("stream"), nil, &s)
	if !s.OK() || s.Status != 200 || s.OutputTokens != 2 || s.Backend != "b1" || s.Reason != "miss" || s.TTFT <= 0 || s.E2E < s.TTFT {
		t.Errorf("stream sample = %v", &s)
	}
	s = Sample{}
	send(context.Background(), c, srv.URL, render("json"), nil, &s)
	if !s.OK() || s.OutputTokens != 5 || s.CachedTokens != 16 || s.TTFT <= 0 {
		t.Errorf("json sample = %v", &s)
	}
	s = Sample{}
	send(context.Background(), c, srv.URL, render("other"), nil, &s)
	if s.OK() || s.Err != "http-503" || s.Status != 503 {
		t.Errorf("error sample = %v", &s)
	}
	s = Sample{}
	send(context.Background(), c, "http://127.0.0.1:1", render("x"), nil, &s)
	if s.Err != "transport" {
		t.Errorf("refused connection: err %q, want transport", s.Err)
	}
}

// A client spreading one connection's worth of concurrency over several
// hosts keeps an idle connection to each: it must not close one host's to
// keep another's and dial on every request (which made the direct arm's c1
// baseline slower than the proxies in front of the same backends).
func TestClientKeepsAConnectionPerHost(t *testing.T) {
	var dials [2]atomic.Int32
	var urls [2]string
	for i := range urls {
		srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, roleEvent+tokenEvent+usageEvent+doneEvent)
		}))
		srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
			if st == http.StateNew {
				dials[i].Add(1)
			}
		}
		srv.Start()
		t.Cleanup(srv.Close)
		urls[i] = srv.URL
	}
	c := newHTTPClient(1)
	defer c.CloseIdleConnections()
	render := func(b []byte) []byte { return append(b, "{}"...) }
	const n = 20
	for i := range n {
		var s Sample
		send(context.Background(), c, urls[i%2], render, nil, &s)
		if !s.OK() {
			t.Fatalf("request %d: %v", i, &s)
		}
	}
	if a, b := dials[0].Load(), dials[1].Load(); a+b > 2 {
		t.Errorf("%d requests alternating over 2 hosts at concurrency 1 dialled %d+%d connections, want one per host", n, a, b)
	}
}
