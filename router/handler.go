package router

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/valyala/fastjson"
)

// endpointNone marks a forwarded request, which has no prompt.
const endpointNone Endpoint = 255

// ServeHTTP is the OpenAI-compatible API:
//
//   - POST /v1/chat/completions, /v1/completions, /v1/responses and
//     /v1/embeddings are rendered, keyed and routed by the policy;
//   - GET /v1/models answers the union of the models of the backends in
//     rotation, GET /v1/models/{id} one of them;
//   - other paths under Config.ForwardPaths are forwarded to the least
//     loaded backend in rotation that serves the body's "model" (any
//     backend when there is none);
//   - paths under Config.ForwardDeny get 403;
//   - anything else gets 404.
//
// Errors are OpenAI-style JSON bodies: 400 malformed request, 404 unknown
// model or path, 405 wrong method, 413 body too large, 502 every attempt
// failed, 503 no backend in rotation serves the model, 504 backend timeout.
// When a backend's answer breaks off after its first byte was sent (the
// request is never retried then), ServeHTTP panics with
// http.ErrAbortHandler, which net/http turns into a silently aborted
// connection, so the client sees a broken answer rather than a clean end.
func (rt *Router) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := rt.now()
	if rt.otel != nil {
		r = rt.startRequestSpan(r) // tracing.go
	}
	path := r.URL.Path
	var status int
	var model *modelMetrics // the request metrics' model ("other" if nil)
	label := epOther
	switch ep, routed := EndpointForPath(path); {
	case hasDotSegment(path):
		// Checked before the forwarding allowlist: /v1/../sim/fault starts
		// with /v1/ but names a path the allowlist hides.
		status = rt.fail(w, errBadRequest, &APIError{Status: http.StatusBadRequest, Type: TypeInvalidRequest, Code: "invalid_path",
			Message: "The request path " + strconv.Quote(clip(path)) + " has a '.' or '..' segment; send the path without them."})
	case routed:
		label = labelOf(ep)
		if r.Method != http.MethodPost {
			status = methodNotAllowed(w, http.MethodPost)
			break
		}
		status = rt.serveRouted(w, r, ep, start, &model)
	case path == "/v1/models":
		label = epModels
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			status = methodNotAllowed(w, "GET, HEAD")
			break
		}
		status = rt.serveModels(w)
	case strings.HasPrefix(path, "/v1/models/") && (r.Method == http.MethodGet || r.Method == http.MethodHead):
		label = epModels
		status = rt.serveModel(w, strings.TrimPrefix(path, "/v1/models/"))
	case rt.forwardable(path) && rt.denied(path):
		status = rt.fail(w, errForbiddenPath, &APIError{Status: http.StatusForbidden, Type: TypeInvalidRequest, Code: "path_not_forwarded",
			Message: "The router does not forward " + clip(path) + ": it changes one backend's state (router.forward_deny); call each backend directly."})
	case rt.forwardable(path):
		status = rt.serveForward(w, r, start, &model)
	default:
		rt.metrics.errors[errPathNotFound].Inc()
		e := &APIError{Status: http.StatusNotFound, Type: TypeNotFound, Code: "unknown_url",
			Message: "Unknown request URL: " + r.Method + " " + clip(path) + "."}
		e.WriteTo(w)
		status = e.Status
	}
	if rt.otel != nil {
		rt.endRequestSpan(r, label, status)
	}
	if status == statusAborted {
		rt.metrics.request(label, model, http.StatusBadGateway, rt.now().Sub(start))
		panic(http.ErrAbortHandler)
	}
	rt.metrics.request(label, model, status, rt.now().Sub(start))
}

// hasDotSegment reports whether a request path (as decoded by net/http)
// has a "." or ".." segment, with '/' or '\\' as separators, also after
// one more round of percent-decoding (for a backend that decodes twice).
// Such paths are refused, never cleaned: a client of an OpenAI API has no
// reason to send one.
func hasDotSegment(path string) bool {
	for round := 0; round < 2; round++ {
		for rest := path; rest != ""; {
			i := strings.IndexAny(rest, "/\\")
			seg := rest
			if i >= 0 {
				seg, rest = rest[:i], rest[i+1:]
			} else {
				rest = ""
			}
			if seg == "." || seg == ".." {
				return true
			}
		}
		if !strings.Contains(path, "%") {
			return false
		}
		p, err := url.PathUnescape(path)
		if err != nil {
			return false
		}
		path = p
	}
	return false
}

func methodNotAllowed(w http.ResponseWriter, allow string) int {
	w.Header().Set("Allow", allow)
	e := NewAPIError(http.StatusMethodNotAllowed, "", "Method not allowed; use %s.", allow)
	e.WriteTo(w)
	return e.Status
}

func (rt *Router) forwardable(path string) bool {
	for _, p := range rt.cfg.ForwardPaths {
		if strings.HasPrefix(path, p) {
			return true
		}
	}
	return false
}

// denied says whether path is one of Config.ForwardDeny's.
func (rt *Router) denied(path string) bool {
	for _, p := range rt.cfg.ForwardDeny {
		if strings.HasPrefix(path, p) {
			return true
		}
	}
	return false
}

// fail counts an error of kind and writes e.
func (rt *Router) fail(w http.ResponseWriter, kind errKind, e *APIError) int {
	rt.metrics.errors[kind].Inc()
	e.WriteTo(w)
	return e.Status
}

// serveRouted handles a request with a prompt: read, render, key, look up,
// choose, forward. It sets *model to the model's request metrics once the
// body names one.
func (rt *Router) serveRouted(w http.ResponseWriter, r *http.Request, ep Endpoint, start time.Time, model **modelMetrics) int {
	if rt.adm.nodeCap > 0 { // admission.go: before the body is read
		if status := rt.enterNode(w, r); status != 0 {
			return status
		}
		defer rt.adm.leaveNode()
	}
	st := rt.getState()
	defer rt.putState(st)
	body, aerr := rt.readClientBody(w, st, r)
	if aerr != nil {
		return rt.fail(w, kindOf(aerr), aerr)
	}
	t0 := rt.now()
	if aerr = rt.prepare(st, ep, body, rt.tenant(r)); aerr != nil {
		return rt.fail(w, kindOf(aerr), aerr)
	}
	*model = rt.modelMetricsFor(st.model)
	now := rt.now()
	rt.lookup(st, now)
	if !rt.gather(st, st.model, now) {
		aerr := rt.modelMissing(st.model)
		return rt.fail(w, kindOf(aerr), aerr)
	}
	if len(st.cands) == 0 {
		return rt.fail(w, errNoBackend, NewAPIError(http.StatusServiceUnavailable, "",
			"no backend in rotation serves model %q (each is ejected, drained or being removed); try again shortly", st.model))
	}
	d, status := rt.decideHolding(w, r, st, ep, now)
	if status != 0 {
		return status
	}
	rt.metrics.decisionTime.Observe((rt.now().Sub(t0) - st.heldFor).Seconds())
	return rt.forward(w, r, st, ep, start, d)
}

// serveForward handles a path without a prompt: it is sent, unchanged, to
// the least loaded backend in rotation serving the body's model, if the
// body names one. It sets *model as serveRouted does.
func (rt *Router) serveForward(w http.ResponseWriter, r *http.Request, start time.Time, model **modelMetrics) int {
	if rt.adm.nodeCap > 0 {
		if status := rt.enterNode(w, r); status != 0 {
			return status
		}
		defer rt.adm.leaveNode()
	}
	st := rt.getState()
	defer rt.putState(st)
	body, aerr := rt.readClientBody(w, st, r)
	if aerr != nil {
		return rt.fail(w, kindOf(aerr), aerr)
	}
	st.model, aerr = modelOf(body, rt.cfg.MaxModelBytes)
	if aerr != nil {
		return rt.fail(w, errLimit, aerr)
	}
	*model = rt.modelMetricsFor(st.model)
	now := rt.now()
	if !rt.gather(st, st.model, now) {
		aerr := rt.modelMissing(st.model)
		return rt.fail(w, kindOf(aerr), aerr)
	}
	if len(st.cands) == 0 {
		return rt.fail(w, errNoBackend, NewAPIError(http.StatusServiceUnavailable, "", "no backend is in rotation (each is ejected, drained or being removed); try again shortly"))
	}
	d, status := rt.decideAdmitted(w, r, st, endpointNone, now, 0)
	if status != 0 {
		return status
	}
	return rt.forward(w, r, st, endpointNone, start, d)
}

// tenant returns the tenant header's first value.
func (rt *Router) tenant(r *http.Request) string {
	if v := r.Header[rt.tenantHeader]; len(v) > 0 {
		return v[0]
	}
	return ""
}

func kindOf(e *APIError) errKind {
	switch {
	case e.Code == "model_not_found":
		return errModelNotFound
	case e.Code == "models_unknown":
		return errNoBackend
	case e.Code == "string_above_max_length" || e.Code == "array_above_max_length" || e.Code == "too_many_json_values":
		return errLimit
	case e == errClientGoneMidBody:
		return errClientCanceled
	case e.Status == http.StatusRequestTimeout:
		return errKindSlowBody
	case e.Status == http.StatusRequestEntityTooLarge:
		return errTooLarge
	}
	return errBadRequest
}

var jsonParsers fastjson.ParserPool

// modelOf returns the "model" member of a JSON object body, or "", and
// the error for a model longer than limit bytes. It skims the body instead
// of parsing it: a forwarded body is otherwise never parsed, and must cost
// no more than its bytes. As in admit, a model too long even unescaped
// (overLimit) is refused before it is unescaped.
func modelOf(body []byte, limit int) (string, *APIError) {
	s := skimBody(body, "", "")
	if s.dup == "model" {
		// The backend may read another copy than the one the router
		// chose the backend by (Python's json keeps the last).
		return "", dupMember(s.dup)
	}
	if !s.ok || s.model == nil {
		return "", nil
	}
	if overLimit(s.model, s.modelEsc, limit) {
		return "", errStringTooLong("model", len(s.model), limit)
	}
	m, _ := unescape(s.model, s.modelEsc)
	if len(m) > limit {
		return "", errStringTooLong("model", len(m), limit)
	}
	return m, nil
}
