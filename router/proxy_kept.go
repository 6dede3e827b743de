package router

import (
	"io"
	"net/http"
)

// maxKeptErrorBody bounds the 5xx answer body an attempt keeps for the
// client in case no other backend answers (keptAnswer). vLLM's and
// SGLang's error bodies are a few hundred bytes; the drain already reads
// this much to reuse the connection.
const maxKeptErrorBody = 64 << 10

// keptAnswer is a backend's whole 5xx answer to an attempt that was to be
// retried. When no later attempt answers (the others refused connections,
// or none was left to try), the client gets it instead of a bare 502: the
// engine's own message ("prompt too long for the KV cache", "CUDA out of
// memory") says more than the router can.
type keptAnswer struct {
	status int
	header http.Header // the backend's (Content-Encoding, Retry-After...)
	body   []byte
	// The attempt that got it, for the route header.
	b       *backend
	d       Decision
	matched int
}

// keepAnswer reads resp's body, up to maxKeptErrorBody, and returns it as
// a keptAnswer; nil when the body is longer or its read failed (it is then
// only drained: half an error document is worse than none).
func keepAnswer(resp *http.Response, b *backend, d Decision, matched int) *keptAnswer {
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxKeptErrorBody+1))
	if err != nil || len(body) > maxKeptErrorBody {
		return nil
	}
	return &keptAnswer{status: resp.StatusCode, header: resp.Header.Clone(), body: body, b: b, d: d, matched: matched}
}

// writeKept sends a kept answer to the client and returns its status.
func (rt *Router) writeKept(w http.ResponseWriter, st *reqState, k *keptAnswer) int {
	rt.answerHeader(w, st, k.header, k.b, k.d, k.matched)
	w.Header().Del("Content-Length") // the body's own, set by Write
	w.WriteHeader(k.status)
	_, _ = w.Write(k.body)
	return k.status
}
