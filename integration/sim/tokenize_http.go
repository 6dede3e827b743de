package sim

import (
	"bytes"
	"net/http"
)

// handleTokenize serves POST /tokenize as vLLM does: a body with "messages"
// (the chat template applied) or "prompt" (a completions prompt) answers
// {"count": n, "max_model_len": m, "tokens": [...], "token_strs": null} with
// exactly the prompt tokens a generation request with the same body would
// be served from, so a router keying by them matches the engine's blocks.
func (in *Instance) handleTokenize(w http.ResponseWriter, r *http.Request) {
	body, aerr := readBody(w, r, in.cfg.MaxBodyBytes)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	ep := completionEndpoint
	if bytes.Contains(body.Bytes(), []byte(`"messages"`)) {
		ep = chatEndpoint
	}
	p := in.parsers.Get()
	req, aerr := in.dec.decode(p, body.Bytes(), ep, make([]uint32, 0, body.Len()/4+16))
	in.parsers.Put(p)
	putBody(body)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	writeJSON(w, http.StatusOK, struct {
		Count       int      `json:"count"`
		MaxModelLen int      `json:"max_model_len"`
		Tokens      []uint32 `json:"tokens"`
		TokenStrs   []string `json:"token_strs"`
	}{len(req.tokens), in.cfg.MaxModelLen, req.tokens, nil})
}
