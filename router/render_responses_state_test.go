package router

import (
	"bytes"
	"testing"
)

// A responses request that continues a stored response
// (previous_response_id) or conversation is prefilled after that
// response's whole conversation, which the body does not carry. Its
// rendering must not equal a fresh request with the same input: the claims
// one learns ("this backend holds RS user hi at position 0") would send the
// other to a backend that holds something else, and two continuations of
// different responses would share claims too.
func TestRenderResponsesStoredStateIsKeyed(t *testing.T) {
	fresh := mustRender(t, EndpointResponses, `{"model":"m","input":"hi"}`)
	cont := mustRender(t, EndpointResponses, `{"model":"m","input":"hi","previous_response_id":"resp_1"}`)
	other := mustRender(t, EndpointResponses, `{"model":"m","input":"hi","previous_response_id":"resp_2"}`)
	conv := mustRender(t, EndpointResponses, `{"model":"m","input":"hi","conversation":"conv_1"}`)
	convObj := mustRender(t, EndpointResponses, `{"model":"m","input":"hi","conversation":{"id":"conv_1"}}`)
	for _, c := range []struct {
		name string
		a, b *Prompt
	}{{"fresh/continued", fresh, cont}, {"two previous responses", cont, other}, {"fresh/conversation", fresh, conv},
		{"previous response/conversation", cont, conv}} {
		if bytes.HasPrefix(c.a.Units, c.b.Units) || bytes.HasPrefix(c.b.Units, c.a.Units) {
			t.Errorf("%s: %s and %s render alike (one a prefix of the other)", c.name, show(c.a.Units), show(c.b.Units))
		}
	}
	if !bytes.Equal(conv.Units, convObj.Units) {
		t.Errorf("conversation as id and as {id}: %s vs %s", show(conv.Units), show(convObj.Units))
	}
	// The stored state leads, as a preamble, so a continuation's own
	// messages still end at boundaries.
	if !cont.HasPreamble || cont.Messages() != 1 || cont.Ends[len(cont.Ends)-1] != len(cont.Units) {
		t.Errorf("continued: preamble %v, %d messages, ends %v of %d", cont.HasPreamble, cont.Messages(), cont.Ends, len(cont.Units))
	}
	// Null or empty is no stored state; chat requests ignore these fields.
	if p := mustRender(t, EndpointResponses, `{"model":"m","input":"hi","previous_response_id":null,"conversation":""}`); !bytes.Equal(p.Units, fresh.Units) {
		t.Errorf("null previous_response_id: %s", show(p.Units))
	}
	chat := `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
	if a, b := mustRender(t, EndpointChat, chat), mustRender(t, EndpointChat, chat[:len(chat)-1]+`,"previous_response_id":"r"}`); !bytes.Equal(a.Units, b.Units) {
		t.Errorf("chat with previous_response_id: %s", show(b.Units))
	}
	var p Prompt
	if err := Render(EndpointResponses, []byte(`{"model":"m","input":"hi","previous_response_id":7}`), &p); err == nil {
		t.Error("a numeric previous_response_id was accepted")
	}
}

func TestRenderResponsesStoredStateRepeatedIsRefused(t *testing.T) {
	var p Prompt
	for _, body := range []string{`{"model":"m","input":"hi","previous_response_id":"a","previous_response_id":"b"}`,
		`{"model":"m","input":"hi","conversation":"a","conversation":"b"}`} {
		if err := Render(EndpointResponses, []byte(body), &p); err == nil {
			t.Errorf("%s: accepted", body)
		}
	}
}
