package router

import (
	"strings"
	"testing"
)

// A body nested past the parser's depth gets a short 400: the parser's
// message repeated a prefix per level (14 KB for 300 levels).
func TestDeepBodyErrorIsShort(t *testing.T) {
	body := `{"model":"m","messages":[{"role":"user","content":` + strings.Repeat("[", 400) + strings.Repeat("]", 400) + `}]}`
	var p Prompt
	err := Render(EndpointChat, []byte(body), &p)
	if err == nil {
		t.Fatal("a body nested 400 deep rendered")
	}
	if len(err.Error()) > 600 || !strings.Contains(err.Error(), "depth") {
		t.Fatalf("%d bytes: %.200s", len(err.Error()), err.Error())
	}
}
