package router

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"
)

// errSlowBody is what a paced body read returns once the client has sent
// its body slower than Config.BodyMinRate allows.
var errSlowBody = errors.New("request body arrived too slowly")

// pacedBody reads a client's request body under a read deadline that grows
// with what has arrived: start + BodyReadTimeout + received/BodyMinRate,
// as Apache's mod_reqtimeout does. A client that stalls, or trickles bytes
// (slowloris), is cut off; one that sends steadily, however large the body,
// is not. It lives in reqState, so pacing allocates nothing.
type pacedBody struct {
	body  io.ReadCloser
	rc    *http.ResponseController
	start time.Time
	grace time.Duration
	rate  int64
	n     int64
}

func (p *pacedBody) Read(b []byte) (int, error) {
	deadline := p.start.Add(p.grace + time.Duration(float64(p.n)/float64(p.rate)*float64(time.Second)))
	if err := p.rc.SetReadDeadline(deadline); err != nil {
		return 0, err
	}
	n, err := p.body.Read(b)
	p.n += int64(n)
	if err != nil && errors.Is(err, os.ErrDeadlineExceeded) {
		err = errSlowBody
	}
	return n, err
}

func (p *pacedBody) Close() error { return p.body.Close() }

// readClientBody is readBody for a request on the API listener: the body
// is read under the pacing deadline (when the connection supports read
// deadlines). The deadline is lifted once the body is in, so a long
// answer is never cut by it. A slow body gets 408 and the connection is
// closed.
func (rt *Router) readClientBody(w http.ResponseWriter, st *reqState, r *http.Request) ([]byte, *APIError) {
	if r.Body == nil || r.Body == http.NoBody {
		return rt.readBody(st, r)
	}
	rc := http.NewResponseController(w)
	if err := rc.SetReadDeadline(time.Time{}); err != nil {
		body, aerr := rt.readBody(st, r) // no deadlines here (a test recorder): read as is
		return clientGone(r, body, aerr)
	}
	start := time.Now()
	st.pace = pacedBody{body: r.Body, rc: rc, start: start, grace: rt.cfg.BodyReadTimeout, rate: rt.cfg.BodyMinRate}
	orig := r.Body
	r.Body = &st.pace
	body, aerr := rt.readBody(st, r)
	r.Body = orig
	received := st.pace.n
	st.pace = pacedBody{}
	if aerr == nil {
		// The body is in: its deadline must not outlive it. net/http lifts
		// it when it sees the body's end, but not when a handler in front
		// of the router read the body first (r.Body is then its copy): the
		// read with which it watches the idle client would fail at the
		// deadline and cancel the request, mid-answer.
		_ = rc.SetReadDeadline(time.Time{})
	}
	if aerr == errBodyTooSlow {
		w.Header().Set("Connection", "close")
		return nil, &APIError{Status: http.StatusRequestTimeout, Type: TypeInvalidRequest, Code: "body_too_slow",
			Message: fmt.Sprintf("The request body arrived too slowly: %d bytes in %v; send at least %d bytes per second after the first %v.",
				received, time.Since(start).Round(time.Millisecond), rt.cfg.BodyMinRate, rt.cfg.BodyReadTimeout)}
	}
	return clientGone(r, body, aerr)
}

// errClientGoneMidBody answers a body whose read failed because the client
// closed its connection (net/http cancels the request's context then): it
// went away, which is no malformed request. 499, as for a client that
// leaves later, is what the metrics count; nobody reads the answer.
var errClientGoneMidBody = &APIError{Status: 499, Type: TypeInvalidRequest, Code: "client_closed_request",
	Message: "The client closed the connection before its request body was complete."}

// clientGone passes readBody's result on, with a read that failed because
// the client went away (not for the body's size or pace) as
// errClientGoneMidBody.
func clientGone(r *http.Request, body []byte, aerr *APIError) ([]byte, *APIError) {
	if aerr != nil && aerr.Status == http.StatusBadRequest && r.Context().Err() != nil {
		return nil, errClientGoneMidBody
	}
	return body, aerr
}

// errBodyTooSlow is what readBody returns when the body's reader failed
// with errSlowBody; readClientBody answers it with the details.
var errBodyTooSlow = &APIError{Status: http.StatusRequestTimeout, Type: TypeInvalidRequest, Code: "body_too_slow",
	Message: "The request body arrived too slowly."}
