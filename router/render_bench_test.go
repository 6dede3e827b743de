package router

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// chatBody builds a realistic chat request of about size bytes: a long
// system prompt and alternating user/assistant turns whose text carries
// newlines, quotes and non-ASCII characters (so the JSON has escapes).
func chatBody(size int) []byte {
	para := "The quick brown fox — «jumps» over the \"lazy\" dog.\nIt then\tsays: {\"ok\": true} and goes on; ünïcödé text follows. "
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

func BenchmarkRenderChat16K(b *testing.B) {
	body := chatBody(16 << 10)
	var p Prompt
	if err := Render(EndpointChat, body, &p); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if err := Render(EndpointChat, body, &p); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(p.Messages()), "msgs")
}
