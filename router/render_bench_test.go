package router

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// Text used to build benchmark conversations. prose is chat-like English
// with markdown (a newline every ~80 bytes, some quotes, some non-ASCII);
// dense is code-like, with an escape every ~20 bytes of JSON.
const (
	prose = "Sure! Here is a short summary of the **main points** you asked about:\n\n" +
		"1. The cache is keyed by the prompt's prefix, so requests that share a system prompt reuse work.\n" +
		"2. Routing to the replica that holds the prefix saves the prefill, which dominates time to first token.\n" +
		"3. Load still matters: a \"hot\" replica with a long queue can be slower than a cold, idle one.\n\n" +
		"In short — prefer affinity, but not at any price. Let me know if you'd like a deeper dive.\n"
	dense = "The quick brown fox — «jumps» over the \"lazy\" dog.\nIt then\tsays: {\"ok\": true} and goes on; ünïcödé text follows. "
)

// chatBody builds a chat request of about size bytes: a ~3 KiB system
// prompt, then alternating user/assistant turns of ~1.2 KiB.
func chatBody(size int) []byte { return chatBodyOf(size, prose) }

func chatBodyOf(size int, para string) []byte {
	sys := strings.Repeat(para, 3000/len(para)+1)
	type msg struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	}
	msgs := []msg{{"system", sys}}
	turn := 0
	for {
		role := "user"
		if turn%2 == 1 {
			role = "assistant"
		}
		msgs = append(msgs, msg{role, fmt.Sprintf("turn %d: %s", turn, strings.Repeat(para, 1200/len(para)+1))})
		turn++
		b, _ := json.Marshal(map[string]any{"model": "meta-llama/Llama-3.1-8B-Instruct", "messages": msgs, "stream": true, "max_tokens": 512})
		if len(b) >= size {
			return b
		}
	}
}

// BenchmarkRenderChat16K: a 16 KiB chat body of prose, a system prompt and ~10 turns.
func BenchmarkRenderChat16K(b *testing.B) { benchRender(b, EndpointChat, chatBody(16<<10)) }

// BenchmarkRenderChat16KDense: the same size in code-like text, where JSON
// escapes are four times as frequent.
func BenchmarkRenderChat16KDense(b *testing.B) {
	benchRender(b, EndpointChat, chatBodyOf(16<<10, dense))
}

func BenchmarkRenderCompletionsTokens(b *testing.B) {
	ids := make([]int, 4096)
	for i := range ids {
		ids[i] = (i * 7919) % 128000
	}
	body, _ := json.Marshal(map[string]any{"model": "m", "prompt": ids})
	benchRender(b, EndpointCompletions, body)
}

func benchRender(b *testing.B, ep Endpoint, body []byte) {
	var p Prompt
	if err := Render(ep, body, &p); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if err := Render(ep, body, &p); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(p.Messages()), "msgs")
}
