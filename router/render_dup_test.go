package router

import (
	"errors"
	"strings"
	"testing"
)

// A rendered object that repeats a key is refused: the backend's parser
// keeps the last copy where the router's keeps the first, so the prompt
// keyed here would not be the one the engine prefills.
func TestRenderRefusesRepeatedKeys(t *testing.T) {
	cases := []struct {
		ep   Endpoint
		body string
		want string // the error's param
	}{
		{EndpointChat, `{"model":"m","messages":[{"role":"user","content":"a long prompt","content":"hi"}]}`, "messages[0].content"},
		{EndpointChat, `{"model":"m","messages":[{"role":"system","content":"s"},{"role":"user","role":"assistant","content":"x"}]}`, "messages[1].role"},
		{EndpointChat, `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"A","text":"B"}]}]}`, "messages[0].content[0].text"},
		{EndpointResponses, `{"model":"m","input":[{"type":"message","role":"user","content":"a","content":"b"}]}`, "input[0].content"},
		{EndpointChat, `{"model":"m","messages":[{"role":"user","content":"a","\u0063ontent":"b"}]}`, "messages[0].content"}, // spelled with an escape
	}
	for i, c := range cases {
		var p Prompt
		err := Render(c.ep, []byte(c.body), &p)
		var ae *APIError
		if !errors.As(err, &ae) || ae.Status != 400 || ae.Param != c.want || ae.Code != "duplicate_member" || !strings.Contains(ae.Message, "duplicate key") {
			t.Errorf("case %d: %v, want a 400 naming %s", i, err, c.want)
		}
	}
	// Distinct keys, many of them, still render (the sorted path).
	var sb strings.Builder
	sb.WriteString(`{"model":"m","messages":[{"role":"user","content":"x"`)
	for i := 0; i < 40; i++ {
		sb.WriteString(`,"k` + string(rune('a'+i%26)) + string(rune('a'+i/26)) + `":1`)
	}
	sb.WriteString(`}]}`)
	var p Prompt
	if err := Render(EndpointChat, []byte(sb.String()), &p); err != nil {
		t.Fatalf("40 distinct keys: %v", err)
	}
	if err := Render(EndpointChat, []byte(strings.Replace(sb.String(), `"kb`, `"ka`, 1)), &p); err == nil {
		t.Fatal("a repeated key among 40 was not found")
	}
}
