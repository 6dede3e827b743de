package sim

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
)

func TestChatUsageAndCachedTokens(t *testing.T) {
	in, srv := startServer(t, nil)
	sys := msg{"system", words("s", 61)} // <|system|> + 61 + <|end|> + <|user|> = 64 shared tokens
	body1 := chatBody(t, 7, nil, sys, msg{"user", words("a", 20)})
	r := chat(t, srv.URL, body1)
	wantPrompt := 61 + 20 + 2*2 + 1
	if r.Usage.PromptTokens != wantPrompt || r.Usage.CompletionTokens != 7 || r.Usage.TotalTokens != wantPrompt+7 ||
		r.Usage.PromptTokensDetails.CachedTokens != 0 {
		t.Fatalf("first usage %+v, want prompt %d completion 7 cached 0", r.Usage, wantPrompt)
	}
	// The engine's own TTFT, at least the one prefill step it took.
	if r.Sim.EngineTTFTUs <= 0 {
		t.Fatalf("no engine TTFT after the usage: %+v", r.Sim)
	}
	if r.Object != "chat.completion" || r.Model != "m" || len(r.Choices) != 1 || r.Choices[0].Message.Role != "assistant" ||
		r.Choices[0].FinishReason != "length" || r.Choices[0].Message.Content != FillerText(7) {
		t.Fatalf("reply %+v", r)
	}
	if n := len(strings.Fields(r.Choices[0].Message.Content)); n != 7 {
		t.Fatalf("content has %d words, want 7", n)
	}
	// Same prompt again: all full blocks but the last.
	r = chat(t, srv.URL, body1)
	if got, want := r.Usage.PromptTokensDetails.CachedTokens, (wantPrompt-1)/16*16; got != want {
		t.Fatalf("repeat cached %d, want %d", got, want)
	}
	// Shared system prompt, different question: exactly the shared full blocks.
	r = chat(t, srv.URL, chatBody(t, 3, nil, sys, msg{"user", words("b", 20)}))
	if got := r.Usage.PromptTokensDetails.CachedTokens; got != 64 {
		t.Fatalf("shared-prefix cached %d, want 64", got)
	}
	// cache_salt isolates.
	r = chat(t, srv.URL, chatBody(t, 3, map[string]any{"cache_salt": "tenant"}, sys, msg{"user", words("a", 20)}))
	if got := r.Usage.PromptTokensDetails.CachedTokens; got != 0 {
		t.Fatalf("salted request cached %d, want 0", got)
	}
	st := in.Stats()
	if st.PrefixCacheQueries != uint64(4*wantPrompt) || st.PrefixCacheHits != uint64(80+64) || st.RequestsSucceeded != 4 ||
		st.GenerationTokens != 7+7+3+3 || st.PromptTokens != st.PrefixCacheQueries {
		t.Fatalf("stats %+v", st)
	}
}

func TestCompletionsEndpoint(t *testing.T) {
	_, srv := startServer(t, func(c *Config) { c.MaxOutputTokens = 5; c.DefaultMaxTokens = 3 })
	resp, b := post(t, srv.URL, CompletionPath, []byte(`{"model":"m","prompt":"a b c d","max_tokens":50}`), nil)
	var r chatReply
	if resp.StatusCode != 200 || json.Unmarshal(b, &r) != nil {
		t.Fatalf("status %d body %s", resp.StatusCode, b)
	}
	if r.Object != "text_completion" || r.Choices[0].Text != FillerText(5) || r.Usage.PromptTokens != 4 || r.Usage.CompletionTokens != 5 {
		t.Fatalf("capped completion %+v", r)
	}
	_, b = post(t, srv.URL, CompletionPath, []byte(`{"prompt":[1,2,3]}`), nil)
	r = chatReply{}
	if json.Unmarshal(b, &r) != nil || r.Usage.CompletionTokens != 3 || r.Usage.PromptTokens != 3 {
		t.Fatalf("default max tokens reply %s", b)
	}
}

// sseEvents reads a whole SSE body into its data payloads.
func sseEvents(t *testing.T, r io.Reader) []string {
	t.Helper()
	raw, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasSuffix(raw, []byte("\n\n")) {
		t.Fatalf("stream does not end with a blank line: %q", raw)
	}
	var out []string
	for _, ev := range strings.Split(strings.TrimSuffix(string(raw), "\n\n"), "\n\n") {
		if !strings.HasPrefix(ev, "data: ") || strings.Contains(ev, "\n") {
			t.Fatalf("malformed event %q", ev)
		}
		out = append(out, strings.TrimPrefix(ev, "data: "))
	}
	return out
}

type chunk struct {
	Object  string `json:"object"`
	Choices []struct {
		Delta struct {
			Role    *string `json:"role"`
			Content string  `json:"content"`
		} `json:"delta"`
		Text         string  `json:"text"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *usage   `json:"usage"`
	Sim   *simPart `json:"kvmesh_sim"`
}

func TestStreamingFormat(t *testing.T) {
	_, srv := startServer(t, nil)
	for _, withUsage := range []bool{false, true} {
		extra := map[string]any{"stream": true}
		if withUsage {
			extra["stream_options"] = map[string]any{"include_usage": true}
		}
		resp, err := http.Post(srv.URL+ChatPath, "application/json", bytes.NewReader(chatBody(t, 40, extra, msg{"user", "hello there"})))
		if err != nil {
			t.Fatal(err)
		}
		if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
			t.Fatalf("content type %q", ct)
		}
		evs := sseEvents(t, resp.Body)
		resp.Body.Close()
		if evs[len(evs)-1] != "[DONE]" {
			t.Fatalf("last event %q, want [DONE]", evs[len(evs)-1])
		}
		var text strings.Builder
		var sawUsage, sawFinish bool
		for i, ev := range evs[:len(evs)-1] {
			var c chunk
			if err := json.Unmarshal([]byte(ev), &c); err != nil {
				t.Fatalf("event %d %q: %v", i, ev, err)
			}
			if c.Object != "chat.completion.chunk" {
				t.Fatalf("object %q", c.Object)
			}
			if i == 0 && (len(c.Choices) != 1 || c.Choices[0].Delta.Role == nil || *c.Choices[0].Delta.Role != "assistant") {
				t.Fatalf("first event should carry the role: %s", ev)
			}
			if c.Usage != nil {
				sawUsage = true
				if len(c.Choices) != 0 || c.Usage.PromptTokens != 5 || c.Usage.CompletionTokens != 40 || c.Usage.TotalTokens != 45 ||
					c.Sim == nil || c.Sim.EngineTTFTUs <= 0 {
					t.Fatalf("usage event %s", ev)
				}
				continue
			}
			if sawFinish {
				t.Fatalf("content after finish_reason: %s", ev)
			}
			text.WriteString(c.Choices[0].Delta.Content)
			if fr := c.Choices[0].FinishReason; fr != nil {
				if *fr != "length" {
					t.Fatalf("finish_reason %q", *fr)
				}
				sawFinish = true
			}
		}
		if text.String() != FillerText(40) || !sawFinish || sawUsage != withUsage {
			t.Fatalf("include_usage=%v: text %q finish %v usage %v", withUsage, text.String(), sawFinish, sawUsage)
		}
	}
}

func TestStreamingCompletions(t *testing.T) {
	_, srv := startServer(t, nil)
	resp, err := http.Post(srv.URL+CompletionPath, "application/json",
		strings.NewReader(`{"prompt":"x y","max_tokens":9,"stream":true,"stream_options":{"include_usage":true}}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	evs := sseEvents(t, resp.Body)
	var text strings.Builder
	for _, ev := range evs[:len(evs)-2] {
		var c chunk
		if err := json.Unmarshal([]byte(ev), &c); err != nil || c.Object != "text_completion" {
			t.Fatalf("event %q: %v", ev, err)
		}
		text.WriteString(c.Choices[0].Text)
	}
	var last chunk
	if err := json.Unmarshal([]byte(evs[len(evs)-2]), &last); err != nil || last.Usage == nil || last.Usage.CompletionTokens != 9 {
		t.Fatalf("usage event %q", evs[len(evs)-2])
	}
	if text.String() != FillerText(9) || evs[len(evs)-1] != "[DONE]" {
		t.Fatalf("text %q, last %q", text.String(), evs[len(evs)-1])
	}
}

func TestORCAHeaders(t *testing.T) {
	_, srv := startServer(t, nil)
	body := chatBody(t, 2, nil, msg{"user", "hi"})
	textRe := regexp.MustCompile(`^TEXT named_metrics\.kv_cache_usage_perc=[0-9.e+-]+, named_metrics\.num_requests_waiting=[0-9]+\.0, named_metrics\.num_requests_running=[0-9]+\.0$`)
	for _, f := range []string{"TEXT", "text", " Text "} {
		resp, _ := post(t, srv.URL, ChatPath, body, map[string]string{ORCARequestHeader: f})
		if h := resp.Header.Get(ORCAResponseHeader); !textRe.MatchString(h) {
			t.Fatalf("format %q: header %q", f, h)
		}
	}
	resp, _ := post(t, srv.URL, ChatPath, body, map[string]string{ORCARequestHeader: "json"})
	h := resp.Header.Get(ORCAResponseHeader)
	var rep struct {
		NamedMetrics map[string]float64 `json:"named_metrics"`
	}
	if !strings.HasPrefix(h, `JSON {"named_metrics": {"kv_cache_usage_perc": `) || json.Unmarshal([]byte(strings.TrimPrefix(h, "JSON ")), &rep) != nil ||
		len(rep.NamedMetrics) != 3 {
		t.Fatalf("JSON header %q", h)
	}
	for _, hdr := range []map[string]string{nil, {ORCARequestHeader: "BIN"}} {
		if resp, _ := post(t, srv.URL, ChatPath, body, hdr); resp.Header.Get(ORCAResponseHeader) != "" {
			t.Fatalf("request header %v: unexpected report", hdr)
		}
	}
	// The report reflects the load: a long request running elsewhere.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	longReq, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+ChatPath,
		bytes.NewReader(chatBody(t, 60000, map[string]any{"stream": true}, msg{"user", words("w", 100)})))
	longResp, err := http.DefaultClient.Do(longReq)
	if err != nil {
		t.Fatal(err)
	}
	defer longResp.Body.Close()
	if _, err := bufio.NewReader(longResp.Body).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	resp, _ = post(t, srv.URL, ChatPath, body, map[string]string{ORCARequestHeader: "TEXT"})
	if h := resp.Header.Get(ORCAResponseHeader); !strings.Contains(h, "num_requests_running=1.0") || strings.Contains(h, "kv_cache_usage_perc=0.0,") {
		t.Fatalf("with one long request running: %q", h)
	}
	cancel()

	// Streaming: no report unless configured.
	stream := chatBody(t, 2, map[string]any{"stream": true}, msg{"user", "hi"})
	if resp, _ := post(t, srv.URL, ChatPath, stream, map[string]string{ORCARequestHeader: "TEXT"}); resp.Header.Get(ORCAResponseHeader) != "" {
		t.Fatal("streaming reply carried a load report by default")
	}
	_, srv2 := startServer(t, func(c *Config) { c.ORCAOnStreaming = true })
	if resp, _ := post(t, srv2.URL, ChatPath, stream, map[string]string{ORCARequestHeader: "TEXT"}); !textRe.MatchString(resp.Header.Get(ORCAResponseHeader)) {
		t.Fatalf("ORCAOnStreaming: header %q", resp.Header.Get(ORCAResponseHeader))
	}
}

func TestORCAFormatMatchesVLLM(t *testing.T) {
	if got, want := formatORCA(orcaText, 0.4, 0, 2), "TEXT named_metrics.kv_cache_usage_perc=0.4, named_metrics.num_requests_waiting=0.0, named_metrics.num_requests_running=2.0"; got != want {
		t.Errorf("TEXT:\n got %s\nwant %s", got, want)
	}
	if got, want := formatORCA(orcaJSON, 0.4, 0, 2), `JSON {"named_metrics": {"kv_cache_usage_perc": 0.4, "num_requests_waiting": 0.0, "num_requests_running": 2.0}}`; got != want {
		t.Errorf("JSON:\n got %s\nwant %s", got, want)
	}
	// Python repr(float) reference values.
	tenth, fifth := 0.1, 0.2 // variables: constant arithmetic would be exact
	for v, want := range map[float64]string{
		0: "0.0", 1: "1.0", 3: "3.0", 0.4: "0.4", tenth + fifth: "0.30000000000000004", 1e-4: "0.0001", 1e-5: "1e-05",
		1.0 / 27000: "3.7037037037037037e-05", 1e16: "1e+16", 123456789012345.0: "123456789012345.0", 1.5e300: "1.5e+300",
	} {
		if got := string(appendPyFloat(nil, v)); got != want {
			t.Errorf("pyFloat(%v) = %s, want %s", v, got, want)
		}
	}
}

func TestMalformedRequests(t *testing.T) {
	_, srv := startServer(t, func(c *Config) { c.MaxBodyBytes = 4096; c.MaxModelLen = 64; c.CacheBlocks = 8 })
	for _, tc := range []struct {
		path, body string
		status     int
	}{
		{ChatPath, `{"messages":`, 400},
		{ChatPath, `not json`, 400},
		{ChatPath, ``, 400},
		{ChatPath, `{"messages":[{"role":"user","content":"x"}],"model":"gpt-9"}`, 404},
		{ChatPath, `{"messages":[{"role":"user","content":"x"}],"max_tokens":-3}`, 400},
		{ChatPath, `{"messages":[{"role":"user","content":"x"}],"max_tokens":100}`, 400}, // context length
		{ChatPath, `{"messages":[{"role":"user","content":"` + strings.Repeat("x ", 3000) + `"}]}`, 413},
		{"/v1/nothing", `{}`, 404},
	} {
		resp, b := post(t, srv.URL, tc.path, []byte(tc.body), nil)
		if resp.StatusCode != tc.status {
			t.Errorf("%s %.60s: status %d, want %d (%s)", tc.path, tc.body, resp.StatusCode, tc.status, b)
			continue
		}
		var e struct {
			Error struct {
				Message string  `json:"message"`
				Type    string  `json:"type"`
				Param   *string `json:"param"`
				Code    int     `json:"code"`
			} `json:"error"`
		}
		if err := json.Unmarshal(b, &e); err != nil || e.Error.Message == "" || e.Error.Type == "" || e.Error.Code != tc.status {
			t.Errorf("%s %.60s: error body %s", tc.path, tc.body, b)
		}
	}
	// Wrong method.
	resp, err := http.Get(srv.URL + ChatPath)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET %s: %d", ChatPath, resp.StatusCode)
	}
}

func TestRequestTooBigForCacheIsRejected(t *testing.T) {
	_, srv := startServer(t, func(c *Config) { c.CacheBlocks = 4 }) // 64 tokens
	resp, b := post(t, srv.URL, CompletionPath, []byte(`{"prompt":"`+words("w", 60)+`","max_tokens":10}`), nil)
	if resp.StatusCode != 400 || !strings.Contains(string(b), "KV blocks") {
		t.Fatalf("status %d %s", resp.StatusCode, b)
	}
	resp, _ = post(t, srv.URL, CompletionPath, []byte(`{"prompt":"`+words("w", 60)+`","max_tokens":4}`), nil)
	if resp.StatusCode != 200 {
		t.Fatalf("a request that fits exactly got %d", resp.StatusCode)
	}
}

func TestModelsHealthMetrics(t *testing.T) {
	in, srv := startServer(t, func(c *Config) { c.Models = []string{"a", "b"} })
	resp, err := http.Get(srv.URL + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	var models struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&models); err != nil || len(models.Data) != 2 || models.Data[0].ID != "a" || models.Data[1].ID != "b" {
		t.Fatalf("models %+v %v", models, err)
	}
	resp.Body.Close()
	if resp, err := http.Get(srv.URL + "/health"); err != nil || resp.StatusCode != 200 {
		t.Fatalf("health %v %v", resp, err)
	}

	chat(t, srv.URL, []byte(`{"model":"b","messages":[{"role":"user","content":"`+words("x", 40)+`"}],"max_tokens":4}`))
	resp, err = http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	text, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	st := in.Stats()
	want := map[string]float64{
		"vllm:prefix_cache_queries_total": float64(st.PrefixCacheQueries),
		"vllm:prefix_cache_hits_total":    0,
		"vllm:prompt_tokens_total":        43,
		"vllm:generation_tokens_total":    4,
		"vllm:request_success_total":      1,
		"vllm:num_requests_running":       0,
		"vllm:num_requests_waiting":       0,
		"vllm:kv_cache_usage_perc":        0,
	}
	found := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(text))
	for sc.Scan() {
		line := sc.Text()
		for name, v := range want {
			if strings.HasPrefix(line, name+"{") {
				if !strings.Contains(line, `model_name="a"`) {
					t.Errorf("%s lacks model_name: %s", name, line)
				}
				var got float64
				if err := json.Unmarshal([]byte(line[strings.LastIndexByte(line, ' ')+1:]), &got); err != nil || got != v {
					t.Errorf("%s = %v, want %v", line, got, v)
				}
				found[name] = true
			}
		}
	}
	for _, name := range []string{"vllm:time_to_first_token_seconds_count", "vllm:e2e_request_latency_seconds_count"} {
		if !strings.Contains(string(text), name+"{") {
			t.Errorf("metrics lack %s", name)
		}
	}
	if len(found) != len(want) || st.PrefixCacheQueries != 43 {
		t.Fatalf("found %v of %d metrics; queries %d", found, len(want), st.PrefixCacheQueries)
	}
	if n, sum := histogram(t, in.Registry(), "vllm:time_to_first_token_seconds"); n != 1 || sum <= 0 {
		t.Fatalf("TTFT histogram count %d sum %v", n, sum)
	}
}

func TestClientCancelFreesSequence(t *testing.T) {
	for _, streaming := range []bool{true, false} {
		in, srv := startServer(t, func(c *Config) { c.TimeScale = 10 })
		ctx, cancel := context.WithCancel(context.Background())
		body := chatBody(t, 50000, map[string]any{"stream": streaming}, msg{"user", words("w", 100)})
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+ChatPath, bytes.NewReader(body))
		done := make(chan struct{})
		go func() {
			defer close(done)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return
			}
			if streaming {
				br := bufio.NewReader(resp.Body)
				_, _ = br.ReadString('\n') // first event: the request is running
				cancel()
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}()
		if !streaming {
			waitFor(t, "request to run", func() bool { return in.Stats().GenerationTokens > 0 })
			cancel()
		}
		<-done
		waitFor(t, "cancel to reach the engine", func() bool {
			st := in.Stats()
			return st.RequestsCancelled == 1 && st.Running == 0 && st.KVCacheUsage == 0
		})
		if st := in.Stats(); st.RequestsSucceeded != 0 || st.GenerationTokens >= 50000 {
			t.Fatalf("streaming=%v: cancelled request ran on: %+v", streaming, st)
		}
	}
}
