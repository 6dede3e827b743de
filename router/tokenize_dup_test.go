package router

import (
	"errors"
	"testing"
)

// A tokenize option repeated in the body (add_generation_prompt,
// add_special_tokens...) is not sent to /tokenize: the engine keeps the
// last copy, the tokenize request would carry the first, and the tokens
// keyed and cached for the prompt would not be the ones prefilled (with a
// generation prompt or without it). Such a request is keyed by bytes.
func TestAppendTokenizeBodyRefusesRepeatedOptions(t *testing.T) {
	for _, c := range []struct {
		ep   Endpoint
		body string
	}{
		{EndpointChat, `{"model":"m","messages":[{"role":"user","content":"hi"}],"add_generation_prompt":false,"add_generation_prompt":true}`},
		{EndpointChat, `{"model":"m","add_special_tokens":true,"messages":[{"role":"user","content":"hi"}],"add_special_tokens":false}`},
		{EndpointChat, `{"model":"m","messages":[{"role":"user","content":"hi"}],"continue_final_message":false,"continue_final_message":true}`},
		{EndpointChat, `{"model":"m","messages":[{"role":"user","content":"hi"}],"mm_processor_kwargs":{},"mm_processor_kwargs":{"a":1}}`},
		{EndpointCompletions, `{"model":"m","prompt":"a b","add_special_tokens":false,"add_special_tokens":true}`},
	} {
		out, _, err := appendTokenizeBody([]byte("p"), c.ep, []byte(c.body))
		if !errors.Is(err, errTokenizeUnsupported) || string(out) != "p" {
			t.Errorf("%s: built %s, %v; want errTokenizeUnsupported", c.body, out, err)
		}
	}
	// Each option once still tokenizes.
	if _, _, err := appendTokenizeBody(nil, EndpointChat, []byte(`{"model":"m","messages":[],"add_generation_prompt":true,"add_special_tokens":false}`)); err != nil {
		t.Fatal(err)
	}
}
