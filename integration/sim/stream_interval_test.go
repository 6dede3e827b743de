package sim

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// With StreamInterval k a streaming reply's events end at the first token,
// at multiples of k and at the last token: the text received after each
// event is the filler of one of those counts, and all of it arrives.
func TestStreamIntervalGathersTokens(t *testing.T) {
	const k, n = 8, 44
	// In real time (8 ms steps) the handler keeps up with the engine, so
	// an event per step would show as counts between the multiples.
	_, srv := startServer(t, func(c *Config) { c.StreamInterval, c.TimeScale = k, 1 })
	resp, err := http.Post(srv.URL+ChatPath, "application/json", bytes.NewReader(chatBody(t, n, map[string]any{"stream": true}, msg{"user", "hello there"})))
	if err != nil {
		t.Fatal(err)
	}
	evs := sseEvents(t, resp.Body)
	resp.Body.Close()
	allowed := map[string]int{FillerText(1): 1, FillerText(n): n}
	for m := k; m < n; m += k {
		allowed[FillerText(m)] = m
	}
	var text strings.Builder
	var counts []int
	for i, ev := range evs[:len(evs)-1] {
		var c chunk
		if err := json.Unmarshal([]byte(ev), &c); err != nil {
			t.Fatalf("event %d %q: %v", i, ev, err)
		}
		if len(c.Choices) == 0 || c.Choices[0].Delta.Content == "" {
			continue // the role, or a finish without text
		}
		text.WriteString(c.Choices[0].Delta.Content)
		m, ok := allowed[text.String()]
		if !ok {
			t.Fatalf("after event %d the text is %q: not the first token, a multiple of %d or all %d", i, text.String(), k, n)
		}
		counts = append(counts, m)
	}
	if len(counts) == 0 || counts[len(counts)-1] != n {
		t.Fatalf("token counts after each event %v, want the last to be %d", counts, n)
	}
	if len(counts) > 2+n/k {
		t.Fatalf("%d events with text, at most %d expected", len(counts), 2+n/k)
	}
}

func TestStreamIntervalValidated(t *testing.T) {
	cfg := DefaultConfig()
	cfg.StreamInterval = -1
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "StreamInterval") {
		t.Fatalf("Validate = %v, want a StreamInterval error", err)
	}
}
