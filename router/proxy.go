package router

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/kvmesh/kvmesh/tree"
)

// statusAborted is what forward returns when the backend's answer broke
// off after its first byte reached the client: ServeHTTP then aborts the
// connection (panic with http.ErrAbortHandler, as httputil.ReverseProxy
// does) so the client sees a broken answer rather than a clean end.
const statusAborted = -1

// errHeaderTimeout is the cause of an attempt canceled because the backend
// sent no response headers within BackendHeaderTimeout.
var errHeaderTimeout = errors.New("backend sent no response headers in time")

// retryDrainTimeout bounds the draining of a 5xx answer that is retried
// elsewhere. An error body that is coming is read in far less; one that
// is not is not worth waiting for.
const retryDrainTimeout = time.Second

// errDrainTimeout is the cause of an attempt canceled because its 5xx
// answer, to be retried, did not drain within retryDrainTimeout.
var errDrainTimeout = errors.New("backend's error answer did not drain in time")

// outcome is how one attempt at a backend ended.
type outcome uint8

const (
	outDone       outcome = iota // an answer was sent to the client (any status)
	outRetry                     // failed before any byte reached the client; another backend may try
	outTimeout                   // no response headers in time: answered 504, not retried
	outClientGone                // the client canceled; nothing more to send
	outBroken                    // the backend's body failed after the first byte was sent
)

// attemptResult is what dispatch needs to know about one attempt.
type attemptResult struct {
	out     outcome
	status  int   // status sent to the client (outDone)
	ok      bool  // a 2xx answer copied completely
	err     error // why the attempt failed (outRetry)
	errKind errKind
	// answer is, for an attempt to be retried after a 5xx answer, that
	// whole answer when it was short enough to keep (proxy_kept.go).
	answer *keptAnswer
}

// forward sends the request to the decided backend and, while nothing has
// reached the client, retries on other backends after a connection failure
// or a 5xx answer. It returns the status sent to the client (499 when the
// client went away).
func (rt *Router) forward(w http.ResponseWriter, r *http.Request, st *reqState, ep Endpoint, start time.Time, d Decision) int {
	learnFirst := d.Learn
	learnAll := st.chain.Learn // a decision may learn part of it (Decision.LearnAbove)
	defer func() { st.chain.Learn = learnAll }()
	rt.outgoingHeader(st, r)
	var last attemptResult
	var kept *keptAnswer // the latest whole 5xx answer of an attempt retried
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			if r.Context().Err() != nil {
				// The client left while the last attempt failed (a 5xx
				// answer's drain ends with it): nobody waits for a retry,
				// and another backend must not be booked, or claim a
				// prompt, for it.
				rt.metrics.errors[errClientCanceled].Inc()
				return 499
			}
			st.chain.Learn = learnAll
			now := rt.now()
			rt.gather(st, st.model, now)
			if len(st.cands) == 0 {
				break
			}
			var status int
			if d, status = rt.decideAdmitted(w, r, st, ep, now, attempt); status != 0 {
				return status
			}
			d.Reason, d.Learn = ReasonRetry, learnFirst && d.Learn
			rt.metrics.retries.Inc()
		}
		b := st.backs[d.Index]
		matched := routedUnits(&st.cands[d.Index], &st.chain, d)
		rt.noteBelief(st, b, &st.cands[d.Index])
		rt.record(st, b, d, matched)
		st.chain.Learn = learnAbove(&st.learnBuf, learnAll, d.LearnAbove, rt.ix.Keyer().CheckpointBlocks())
		learn := d.Learn && st.routed && len(st.chain.Learn) > 0 && rt.admitLearn(st, st.cands[d.Index].Matched)
		st.confirm = nil
		if learn {
			rt.learnOn(b, &st.chain, rt.cfg.ProvisionalTTL)
			rt.metrics.learned[0].Inc()
			st.confirm = b
		}
		rt.orderPin(st, b, learnAll, st.cands[d.Index].Matched) // evictorder_route.go
		last = rt.runAttempt(w, r, st, b, d, matched, attempt >= rt.cfg.Retries || len(st.cands) <= 1, start, ep)
		rt.orderRelease(st, b, learnAll, last.out == outDone && last.ok)
		if learn && (last.out == outRetry || last.out == outDone && !last.ok) {
			// The lookup that routed the attempt is the one before its
			// learn: nothing gathers again before the next attempt.
			rt.retract(st, b, st.heldBefore(d.Index))
		}
		switch last.out {
		case outDone:
			if last.ok && learn {
				rt.learnOn(b, &st.chain, rt.cfg.ConfirmedTTL)
				rt.metrics.learned[1].Inc()
				rt.linkAfter(st, b, ep) // evictlinks.go
			}
			return last.status
		case outTimeout:
			return http.StatusGatewayTimeout
		case outClientGone:
			return 499
		case outBroken:
			return statusAborted
		}
		st.tried = append(st.tried, b.slot)
		if last.answer != nil {
			kept = last.answer
		}
		if attempt >= rt.cfg.Retries {
			break
		}
	}
	if kept != nil {
		// No attempt after it answered: the client gets the backend's own
		// error rather than the router's.
		rt.log.Warn().Err(last.err).Str("model", st.model).Int("status", kept.status).Msg("no backend could serve the request; passing on a backend's error answer")
		return rt.writeKept(w, st, kept)
	}
	e := NewAPIError(http.StatusBadGateway, "", "no backend could serve the request (%s)", transportReason(last.err))
	if last.err != nil {
		// The whole error names backend addresses: the log has it, the
		// client gets only its kind.
		rt.log.Warn().Err(last.err).Str("model", st.model).Msg("no backend could serve the request")
	}
	if last.err == nil {
		e = NewAPIError(http.StatusServiceUnavailable, "", "no backend in rotation serves model %q (each is ejected, drained or being removed)", st.model)
	}
	e.WriteTo(w)
	return e.Status
}

// confirmClaims learns the claims of an attempt at ConfirmedTTL when its
// answer's first byte arrives: the backend has prefilled the prompt, so
// its blocks are in the cache, and held there while the answer is
// generated. Waiting for the answer's end instead would let the
// provisional claims expire under a long answer (ProvisionalTTL 30 s;
// Mooncake's answers at 3x its rate take up to 50 s), and a request
// sharing the prefix would not find the backend that holds it. The claims
// are learnt again when the answer ends, stamping the prefix's last use.
//
// An answer that breaks off after its first byte, or whose client goes
// away, keeps its claims confirmed: its prefill was done all the same.
func (rt *Router) confirmClaims(st *reqState) {
	if b := st.confirm; b != nil {
		st.confirm = nil
		rt.learnOn(b, &st.chain, rt.cfg.ConfirmedTTL)
		rt.metrics.learned[2].Inc()
	}
}

// learnOn records that b holds ch's prefixes, unless b's name has left
// the router: its id may since name another backend.
func (rt *Router) learnOn(b *backend, ch *tree.Chain, ttl time.Duration) {
	if !b.gone.Load() {
		rt.learner.Learn(ch, b.id, ttl)
	}
}

// routedUnits is the match a route was made on, in units (x-kvmesh-route,
// metrics): the policy's own, the trusted match, or for a route on a
// doubted claim (reason doubt) that claim's depth.
func routedUnits(c *Candidate, ch *tree.Chain, d Decision) int {
	if d.OwnMatch {
		return d.Matched
	}
	if d.Reason == ReasonDoubt {
		return c.ClaimedUnits(ch)
	}
	return c.MatchedUnits(ch)
}

// record counts and logs a decision.
func (rt *Router) record(st *reqState, b *backend, d Decision, matched int) {
	rt.metrics.decisionByWhy[d.Reason].Inc()
	total := st.chain.Units
	if st.routed && d.Reason != ReasonRetry {
		rt.routed.Add(1)
		rt.routedUnits.Add(uint64(max(total, 0)))
	}
	if st.routed {
		ratio := 0.0
		if total > 0 {
			ratio = float64(matched) / float64(total)
		}
		rt.metrics.matchedRatio.Observe(ratio)
	}
	rt.log.Debug().Str("backend", b.name).Str("reason", d.Reason.String()).Int("matched", matched).
		Int("total", total).Str("policy", rt.policy.Name()).Str("model", st.model).Msg("route")
}

// outgoingRequest builds the request for one attempt at b from the
// pieces kept in st (the URL, the header built by outgoingHeader, a
// template request): only the context-carrying copy and the body reader
// are new, and no URL is parsed.
func (st *reqState) outgoingRequest(ctx context.Context, r *http.Request, b *backend) *http.Request {
	if st.outURL == nil {
		st.outURL, st.outReq = new(url.URL), new(http.Request)
	}
	u := st.outURL
	*u = b.url
	if u.Path == "" {
		u.Path, u.RawPath = r.URL.Path, r.URL.RawPath
	} else {
		u.Path = b.url.Path + r.URL.Path
		if r.URL.RawPath != "" {
			u.RawPath = b.url.EscapedPath() + r.URL.RawPath
		}
	}
	u.RawQuery = r.URL.RawQuery
	*st.outReq = http.Request{Method: r.Method, URL: u, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: st.outHeader, Host: u.Host}
	st.sentBare = len(st.body) == 0
	if len(st.body) > 0 {
		// A fresh reader per attempt: after an early answer the transport
		// may still be reading an earlier attempt's body, and the buffer
		// goes back to the pool only once every reader was closed.
		st.outReq.Body = st.lease.reader(st.body)
		st.outReq.ContentLength = int64(len(st.body))
		if st.getBody == nil {
			st.getBody = func() (io.ReadCloser, error) { return st.lease.reader(st.body), nil }
		}
		st.outReq.GetBody = st.getBody
	}
	return st.outReq.WithContext(ctx)
}

// attempt sends the request to b once. last says no retry can follow: a
// 5xx answer is then passed to the client instead of being retried.
func (rt *Router) attempt(w http.ResponseWriter, r *http.Request, st *reqState, b *backend, d Decision, matched int, last bool, start time.Time, ep Endpoint) attemptResult {
	ctx, cancel := context.WithCancelCause(r.Context())
	defer cancel(nil)
	timer := time.AfterFunc(rt.cfg.BackendHeaderTimeout, func() { cancel(errHeaderTimeout) })
	out := st.outgoingRequest(ctx, r, b)

	b.inFlight.Add(1)
	defer b.inFlight.Add(-1)
	// The prefill this attempt queues at b, until its first answer byte.
	var pending pendingPrefill
	if st.routed {
		now := rt.now()
		uncached := st.uncached(&st.cands[d.Index])
		pending = b.addPendingAs(uncached, st.chain.Units, silentAnswer(&st.prompt), now)
		if rt.linkedBooking(st, b) {
			b.queue.routedOn(pending.seq, &st.chain, st.cands[d.Index].Matched, float64(st.chain.Units-uncached))
		}
		b.countArrival(uncached, st.chain.Units, now, &rt.cfg.KVMesh)
		if cfg := &rt.cfg.Belief; st.depthEdge {
			upt := rt.unitsPerToken()
			b.belief.afterBooking(now.UnixMilli(), rt.meshWritten(b), st.pinnedAt(b, now.UnixMilli(), upt), upt, cfg.DoubtBeyond, cfg.DoubtNear)
		}
	}
	defer func() {
		if pending.b != nil { // no first byte came
			pending.release(rt.now(), false)
		}
	}()
	resp, err := rt.transport.RoundTrip(out)
	stopped := timer.Stop()
	if err == nil && !stopped { // the timer fired as the answer arrived: the body is canceled too
		resp.Body.Close()
		err = errHeaderTimeout
	}
	if err != nil {
		switch {
		case r.Context().Err() != nil:
			rt.metrics.errors[errClientCanceled].Inc()
			return attemptResult{out: outClientGone}
		case context.Cause(ctx) == errHeaderTimeout || errors.Is(err, errHeaderTimeout):
			rt.metrics.errors[errBackendTimeout].Inc()
			rt.markFailure(b, errBackendTimeout, false, errHeaderTimeout.Error())
			e := &APIError{Status: http.StatusGatewayTimeout, Type: TypeTimeout,
				Message: "backend " + b.name + " sent no response headers within " + rt.cfg.BackendHeaderTimeout.String()}
			rt.setRoute(w, st, b, d, matched)
			e.WriteTo(w)
			return attemptResult{out: outTimeout}
		}
		rt.metrics.errors[errBackendConnect].Inc()
		rt.markFailure(b, errBackendConnect, false, err.Error())
		return attemptResult{out: outRetry, err: err, errKind: errBackendConnect}
	}
	defer resp.Body.Close()
	now := rt.now()
	rt.observeORCA(b, resp.Header, now)
	if resp.StatusCode >= 500 {
		rt.metrics.errors[errBackend5xx].Inc()
		rt.markFailure(b, errBackend5xx, false, "answered "+resp.Status)
		if !last {
			// Draining lets the connection be reused, but only while it is
			// quick: a backend that sent its headers and stalls would hold
			// the retry forever (the header timer is stopped), so the
			// attempt is canceled after retryDrainTimeout, which closes the
			// connection and ends the read.
			// The answer is kept, should no later attempt answer.
			drain := time.AfterFunc(retryDrainTimeout, func() { cancel(errDrainTimeout) })
			answer := keepAnswer(resp, b, d, matched)
			drain.Stop()
			return attemptResult{out: outRetry, err: errors.New("backend " + b.name + " answered " + resp.Status), errKind: errBackend5xx, answer: answer}
		}
	} else {
		rt.markSuccess(b, false)
	}

	// Commit: from here on the client sees this backend's answer.
	rt.answerHeader(w, st, resp.Header, b, d, matched)
	w.WriteHeader(resp.StatusCode)
	sse := strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream")
	stream := st.prompt.Stream || resp.ContentLength < 0 || sse
	st.usage.start(sse)
	if resp.StatusCode/100 != 2 {
		st.confirm = nil // an error answer computed nothing to confirm
		// Nor did it prefill: its quick first byte must not teach the rate.
		pending.release(now, false)
	}
	idle := newIdleWatch(rt.cfg.BackendStreamIdleTimeout, func() { cancel(errStreamIdle) })
	rerr, werr := rt.copyBody(w, resp.Body, st, stream, start, ep, &pending, idle)
	idle.stop()
	if rerr != nil && context.Cause(ctx) == errStreamIdle {
		rerr = errStreamIdle
	}
	switch {
	case werr != nil || (rerr != nil && r.Context().Err() != nil):
		rt.metrics.errors[errClientCanceled].Inc()
		return attemptResult{out: outClientGone}
	case rerr != nil:
		rt.metrics.errors[errStreamBroken].Inc()
		rt.markFailure(b, errStreamBroken, false, rerr.Error())
		rt.log.Warn().Str("backend", b.name).Err(rerr).Msg("backend answer broke off after the first byte; not retried")
		return attemptResult{out: outBroken}
	}
	rt.forwardTrailers(w, st, b, resp.Trailer)
	ok := resp.StatusCode/100 == 2
	if ok && resp.Header.Get("Content-Encoding") == "" {
		if prompt, cached, found := rt.countUsage(b, &st.usage); found {
			rt.learnFromAnswer(b, st, d, prompt, cached)
		}
	}
	return attemptResult{out: outDone, status: resp.StatusCode, ok: ok}
}

// silentAnswer says p's answer comes whole after its generation (it does
// not stream), so its first byte does not mark the end of its prefill
// (prefillQueue). An embedding has no generation: its answer follows its
// prefill.
func silentAnswer(p *Prompt) bool {
	return !p.Stream && p.Endpoint != EndpointEmbeddings
}

// answerHeader sets the client's answer headers from a backend's: its
// end-to-end ones, less the ORCA report the router asked for, and the
// route header.
func (rt *Router) answerHeader(w http.ResponseWriter, st *reqState, from http.Header, b *backend, d Decision, matched int) {
	h := w.Header()
	copyEndToEnd(h, from)
	if st.orcaAdded {
		delete(h, orcaResponseHeader)
		delete(h, orcaResponseBin)
	}
	rt.setRoute(w, st, b, d, matched)
}

// forwardTrailers passes the backend's trailers (known once its body was
// read to the end) to the client as the answer's, less hop-by-hop ones;
// an ORCA load report among them is read as one in the headers is, and
// kept from a client that did not ask for it. The server sends them after
// the body when the answer is chunked (or over HTTP/2).
func (rt *Router) forwardTrailers(w http.ResponseWriter, st *reqState, b *backend, tr http.Header) {
	if len(tr) == 0 {
		return
	}
	rt.observeORCA(b, tr, rt.now())
	h := w.Header()
	for k, vv := range tr {
		if len(vv) == 0 || isHop(k) || st.orcaAdded && (k == orcaResponseHeader || k == orcaResponseBin) {
			continue
		}
		h[http.TrailerPrefix+k] = vv
	}
}

// setRoute sets the x-kvmesh-route header for b.
func (rt *Router) setRoute(w http.ResponseWriter, st *reqState, b *backend, d Decision, matched int) {
	total := 0
	if st.routed {
		total = st.chain.Units
	}
	st.route = appendRoute(st.route[:0], b.name, matched, total, d.Reason, rt.policy.Name(), st.heldFor)
	w.Header()[RouteHeader] = []string{string(st.route)}
}

// copyBody copies the backend's answer to the client, flushing after each
// read when it streams, and feeds it to st.usage. The first byte
// read releases the attempt's pending prefill: the backend has produced a
// token, so its prefill is done. rerr is a failure reading the backend,
// werr one writing the client.
func (rt *Router) copyBody(w http.ResponseWriter, body io.Reader, st *reqState, stream bool, start time.Time, ep Endpoint, pending *pendingPrefill, idle *idleWatch) (rerr, werr error) {
	rc := http.NewResponseController(w)
	first := true
	dl := writeDeadline{rc: rc, timeout: rt.cfg.ClientWriteTimeout}
	defer dl.clear()
	for {
		n, err := body.Read(st.buf)
		if n > 0 {
			idle.heard()
			if first {
				first = false
				now := rt.now()
				pending.release(now, true)
				st.orderPinNow() // evictorder_route.go
				rt.modelMetricsFor(st.model).firstBytes(labelOf(ep)).Observe(now.Sub(start).Seconds())
			}
			st.usage.write(st.buf[:n])
			dl.extend()
			if _, werr = w.Write(st.buf[:n]); werr != nil {
				return nil, werr
			}
			if stream {
				if werr = rc.Flush(); werr != nil && !errors.Is(werr, http.ErrNotSupported) {
					return nil, werr
				}
			}
			rt.confirmClaims(st) // after the first bytes went out: the client does not wait for it
		}
		if err == io.EOF {
			return nil, nil
		}
		if err != nil {
			return err, nil
		}
	}
}

// writeDeadline keeps a deadline on the writes of an answer to its client
// (Config.ClientWriteTimeout): a write blocked that long means the client
// stopped reading. It is moved forward at most every quarter of the
// timeout, so a client gets between 3/4 of it and all of it, and a
// stream's many small writes do not each reset the connection's timer.
type writeDeadline struct {
	rc      *http.ResponseController
	timeout time.Duration
	set     time.Time // when the deadline was last moved (zero: never)
}

func (d *writeDeadline) extend() {
	if d.timeout <= 0 {
		return
	}
	now := time.Now()
	if !d.set.IsZero() && now.Sub(d.set) < d.timeout/4 {
		return
	}
	if d.rc.SetWriteDeadline(now.Add(d.timeout)) == nil {
		d.set = now
	}
}

// clear lifts the deadline once the answer is written: the connection may
// carry the client's next request.
func (d *writeDeadline) clear() {
	if !d.set.IsZero() {
		_ = d.rc.SetWriteDeadline(time.Time{})
	}
}

// transportReason is what a client is told of a failed attempt: the kind
// of failure, never the addresses or ports inside the transport's error.
func transportReason(err error) string {
	var ne net.Error
	switch {
	case err == nil:
		return "no attempt made"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "the backend closed the connection"
	case errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "canceled"
	}
	return "backend error"
}

// errStreamIdle ends an answer whose backend went silent after its
// headers for Config.BackendStreamIdleTimeout.
var errStreamIdle = errors.New("backend sent nothing for backend_stream_idle_timeout")

// idleWatch calls fire once no byte has been heard for timeout. A read
// only stores the time: the timer, armed once, looks at it when it runs
// and is armed again for what is left, so a stream's many reads each cost
// a clock reading, not a timer reset.
type idleWatch struct {
	timeout time.Duration
	base    time.Time
	last    atomic.Int64 // ns since base of the last byte heard
	done    atomic.Bool
	t       atomic.Pointer[time.Timer] // the timer armed last
	fire    func()
}

// newIdleWatch arms a watch; a timeout of 0 returns nil (never fires; a
// nil watch's methods do nothing).
func newIdleWatch(timeout time.Duration, fire func()) *idleWatch {
	if timeout <= 0 {
		return nil
	}
	d := &idleWatch{timeout: timeout, base: time.Now(), fire: fire}
	d.arm(timeout)
	return d
}

func (d *idleWatch) arm(after time.Duration) { d.t.Store(time.AfterFunc(after, d.check)) }

func (d *idleWatch) check() {
	if d.done.Load() {
		return
	}
	quiet := time.Since(d.base) - time.Duration(d.last.Load())
	if left := d.timeout - quiet; left > 0 {
		d.arm(left)
		return
	}
	d.fire()
}

func (d *idleWatch) heard() {
	if d != nil {
		d.last.Store(int64(time.Since(d.base)))
	}
}

// stop ends the watch (a timer armed meanwhile finds it done).
func (d *idleWatch) stop() {
	if d != nil {
		d.done.Store(true)
		if t := d.t.Load(); t != nil {
			t.Stop()
		}
	}
}
