package workload

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// simBody is what a reference reader needs from a chat body.
type simBody struct {
	Model    string `json:"model"`
	Messages []struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	} `json:"messages"`
	MaxTokens     *int  `json:"max_tokens"`
	Stream        *bool `json:"stream"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	IgnoreEOS *bool `json:"ignore_eos"`
}

// simPromptTokens is an independent reference for kvmesh-sim's rule: the
// prompt after the chat template is "<|role|> content <|end|>" per message
// plus one generation-prompt token, tokenized on whitespace.
func simPromptTokens(body []byte) (int, simBody, error) {
	var b simBody
	if err := json.Unmarshal(body, &b); err != nil {
		return 0, b, err
	}
	var sb strings.Builder
	for _, m := range b.Messages {
		if strings.Contains(m.Content, "<|") {
			return 0, b, fmt.Errorf("content contains a template marker")
		}
		fmt.Fprintf(&sb, "<|%s|> %s <|end|>\n", m.Role, m.Content)
	}
	sb.WriteString("<|assistant|>")
	return len(strings.Fields(sb.String())), b, nil
}

// checkRequest asserts that r's body is valid JSON that the reference counts
// at r.PromptTokens tokens, with max_tokens = r.OutputTokens, and that
// BodyLen, BodyBytes and AppendBody agree.
func checkRequest(t *testing.T, r *Request) simBody {
	t.Helper()
	body := r.BodyBytes()
	if got := r.AppendBody(nil); string(got) != string(body) {
		t.Fatalf("AppendBody differs from BodyBytes")
	}
	if r.BodyLen() != len(body) {
		t.Fatalf("BodyLen %d, body is %d bytes", r.BodyLen(), len(body))
	}
	n, b, err := simPromptTokens(body)
	if err != nil {
		t.Fatalf("body: %v\n%.300s", err, body)
	}
	if n != r.PromptTokens {
		t.Fatalf("reference counts %d prompt tokens, request says %d", n, r.PromptTokens)
	}
	if b.MaxTokens == nil || *b.MaxTokens != r.OutputTokens {
		t.Fatalf("max_tokens %v, want %d", b.MaxTokens, r.OutputTokens)
	}
	if len(b.Messages) != r.NumMessages() {
		t.Fatalf("%d messages, NumMessages() says %d", len(b.Messages), r.NumMessages())
	}
	return b
}

func TestBodyEncodingOptions(t *testing.T) {
	msgs := []message{
		{role: roleSystem, spans: []span{{block: 1, words: 7}}},
		{role: roleUser, spans: []span{{block: 2, words: 3}, {block: 3, words: 0}, {block: 4, words: 5}}},
		{role: roleAssistant, spans: nil},
		{role: roleUser, spans: []span{{block: 5, words: 1}}},
	}
	for _, o := range []BodyOptions{
		{Model: "m", Stream: true},
		{Model: "m", Stream: false},
		{Model: `we"ird\ mödel` + "\n", Stream: true, IgnoreEOS: true},
	} {
		r := newRequest(newEncoding(o), msgs, 42)
		if want := 7 + 3 + 5 + 1 + 2*4 + 1; r.PromptTokens != want {
			t.Fatalf("PromptTokens %d, want %d", r.PromptTokens, want)
		}
		b := checkRequest(t, &r)
		if b.Model != o.Model {
			t.Errorf("model %q, want %q", b.Model, o.Model)
		}
		if b.Stream == nil || *b.Stream != o.Stream {
			t.Errorf("stream %v, want %v", b.Stream, o.Stream)
		}
		if o.Stream != (b.StreamOptions != nil && b.StreamOptions.IncludeUsage) {
			t.Errorf("stream_options.include_usage must be present exactly when streaming (stream=%v)", o.Stream)
		}
		if o.IgnoreEOS != (b.IgnoreEOS != nil && *b.IgnoreEOS) {
			t.Errorf("ignore_eos %v, want %v", b.IgnoreEOS, o.IgnoreEOS)
		}
		if b.Messages[2].Content != "" || b.Messages[2].Role != "assistant" {
			t.Errorf("empty assistant message rendered as %+v", b.Messages[2])
		}
		// Spans join with exactly one space; no leading or trailing space.
		want := Words(2, 3) + " " + Words(4, 5)
		if b.Messages[1].Content != want {
			t.Errorf("content %q, want %q", b.Messages[1].Content, want)
		}
	}
}

func TestRoleString(t *testing.T) {
	for r, want := range map[role]string{roleSystem: "system", roleUser: "user", roleAssistant: "assistant", 9: "role(9)"} {
		if r.String() != want {
			t.Errorf("%d.String() = %q, want %q", r, r.String(), want)
		}
	}
}

func TestDecimalLen(t *testing.T) {
	for _, v := range []int{0, 1, 9, 10, 99, 100, 12345, -1, -10, 1 << 40} {
		if got, want := decimalLen(v), len(fmt.Sprint(v)); got != want {
			t.Errorf("decimalLen(%d) = %d, want %d", v, got, want)
		}
	}
}
