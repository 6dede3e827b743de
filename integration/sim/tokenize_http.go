package sim

import (
	"bytes"
	"net/http"
	"strconv"
	"sync"
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
	bp := tokenizeAnswers.Get().(*[]byte)
	*bp = appendTokenizeAnswer((*bp)[:0], req.tokens, in.cfg.MaxModelLen)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(*bp)
	if cap(*bp) <= 4<<20 {
		tokenizeAnswers.Put(bp)
	}
}

// tokenizeAnswers pools the answers' buffers: a long prompt's is a few
// hundred kilobytes, and every request of a precise or eviction-link arm
// asks for one.
var tokenizeAnswers = sync.Pool{New: func() any { return new([]byte) }}

// appendTokenizeAnswer writes vLLM's /tokenize answer, the same JSON
// encoding/json made of it, without reflection: a benchmark arm asks for a
// prompt's tokens on every request, and the answer's encoding was a tenth
// of the process's CPU on the customers workload.
func appendTokenizeAnswer(b []byte, toks []uint32, maxModelLen int) []byte {
	b = append(b, `{"count":`...)
	b = strconv.AppendInt(b, int64(len(toks)), 10)
	b = append(b, `,"max_model_len":`...)
	b = strconv.AppendInt(b, int64(maxModelLen), 10)
	b = append(b, `,"tokens":[`...)
	for i, t := range toks {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendUint(b, uint64(t), 10)
	}
	return append(b, "],\"token_strs\":null}\n"...)
}
