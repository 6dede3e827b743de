package router

import (
	"errors"
	"testing"
)

// Every object whose members Render reads refuses a repeated key, not only
// messages and parts: the top-level members rendered into the preamble or
// as a message (tools, chat_template, instructions...), a tool call, its
// function, a deprecated function_call and an image_url object. A backend
// keeps the last copy, Render the first, so without it two requests the
// engine prefills differently share their claims (and one request's claims
// name a prompt its backend never saw).
func TestRenderRefusesRepeatedKeysEverywhereRead(t *testing.T) {
	cases := []struct {
		ep   Endpoint
		body string
		want string // the error's param
	}{
		{EndpointChat, `{"model":"m","tools":[{"name":"a"}],"messages":[{"role":"user","content":"x"}],"tools":[{"name":"b"}]}`, "tools"},
		{EndpointChat, `{"model":"m","chat_template":"A","chat_template":"B","messages":[{"role":"user","content":"x"}]}`, "chat_template"},
		{EndpointChat, `{"model":"m","chat_template_kwargs":{"x":1},"chat_template_kwargs":{"x":2},"messages":[{"role":"user","content":"x"}]}`, "chat_template_kwargs"},
		{EndpointChat, `{"model":"m","tools":[],"tools":[{"name":"b"}],"messages":[{"role":"user","content":"x"}]}`, "tools"}, // an empty first copy too
		{EndpointChat, `{"model":"m","t\u006fols":[{"name":"a"}],"tools":[{"name":"b"}],"messages":[{"role":"user","content":"x"}]}`, "tools"},
		{EndpointResponses, `{"model":"m","instructions":"be brief","instructions":"be long","input":"hi"}`, "instructions"},
		{EndpointResponses, `{"model":"m","tools":[{"name":"a"}],"tools":[{"name":"b"}],"input":"hi"}`, "tools"},
		{EndpointChat, `{"model":"m","messages":[{"role":"assistant","tool_calls":[{"id":"c1","id":"c2","function":{"name":"f","arguments":"{}"}}]}]}`, "messages[0].tool_calls[0].id"},
		{EndpointChat, `{"model":"m","messages":[{"role":"assistant","tool_calls":[{"id":"c1","function":{"name":"f","arguments":"{}","arguments":"{\"x\":1}"}}]}]}`, "messages[0].tool_calls[0].function.arguments"},
		{EndpointChat, `{"model":"m","messages":[{"role":"assistant","function_call":{"name":"f","name":"g","arguments":"{}"}}]}`, "messages[0].function_call.name"},
		{EndpointChat, `{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"http://a/1.png","url":"http://a/2.png"}}]}]}`, "messages[0].content[0].image_url.url"},
	}
	for i, c := range cases {
		var p Prompt
		err := Render(c.ep, []byte(c.body), &p)
		var ae *APIError
		if !errors.As(err, &ae) || ae.Status != 400 || ae.Param != c.want || ae.Code != "duplicate_member" {
			t.Errorf("case %d: %v (param %q), want a 400 duplicate_member naming %s", i, err, paramOf(ae), c.want)
		}
	}
	// Repeated keys Render does not read stay the backend's business.
	var p Prompt
	if err := Render(EndpointChat, []byte(`{"model":"m","temperature":1,"temperature":0,"messages":[{"role":"user","content":"x"}]}`), &p); err != nil {
		t.Fatalf("a repeated unrendered member: %v", err)
	}
}

func paramOf(ae *APIError) string {
	if ae == nil {
		return ""
	}
	return ae.Param
}
