package router

import (
	"bytes"
	"sync/atomic"
)

// bodyLease lends a pooled request state's body buffer to the transport.
//
// http.RoundTripper may read and close a request body in another goroutine
// after RoundTrip returned (an answer that comes before the body is sent:
// the transport goes on writing it); callers reusing the body "must arrange
// to wait for the Close call". So each attempt's reader counts as open until
// the transport closes it, and the buffer goes back to the pool only when
// none is open; otherwise it is left to the readers (and the collector).
//
// The zero value is ready; the counter is allocated once per pooled state,
// and again only after a buffer was left behind.
type bodyLease struct {
	// open counts the readers lent over the current buffer and not closed
	// yet. Those of a buffer left behind keep the counter they were made
	// with, so they never count against the next buffer.
	open *atomic.Int32
}

// reader returns a new reader over b, the state's body, counted open until
// closed. It is called by the goroutine that owns the state (for GetBody,
// within RoundTrip).
func (l *bodyLease) reader(b []byte) *leasedBody {
	if l.open == nil {
		l.open = new(atomic.Int32)
	}
	l.open.Add(1)
	r := &leasedBody{open: l.open}
	r.Reset(b)
	return r
}

// reclaim returns body for reuse when every reader lent over it was
// closed, and nil otherwise (a reader may still read it: the buffer is
// left to it, and the next request gets a new one).
func (l *bodyLease) reclaim(body []byte) []byte {
	if l.open == nil || l.open.Load() == 0 {
		return body
	}
	l.open = nil
	return nil
}

// busy reports whether a reader lent over the current buffer is still
// open: the transport may still be writing that attempt's request.
func (l *bodyLease) busy() bool { return l.open != nil && l.open.Load() > 0 }

// outgoingBusy reports whether the transport may still read the parts of
// a request st sent (header, URL, X-Forwarded-For): a reader over its body
// is still open (the transport closes it once it has written the request),
// or it had no body, so no Close tells when its write ended.
func (st *reqState) outgoingBusy() bool { return st.sentBare || st.lease.busy() }

// leaveOutgoing leaves the outgoing request's parts to the transport: the
// next use makes new ones.
func (st *reqState) leaveOutgoing() {
	st.outHeader, st.xff, st.outURL, st.outReq = nil, nil, nil, nil
}

// ownOutgoing makes the outgoing request's parts safe to change for the
// next attempt of the same request: when the last attempt's request may
// still be read by the transport, they become copies (its header's values
// included) and the old ones are left to it.
func (st *reqState) ownOutgoing() {
	if st.outHeader == nil || !st.outgoingBusy() {
		return
	}
	h := st.outHeader.Clone()
	st.leaveOutgoing()
	st.outHeader = h
	st.sentBare = false
}

// leasedBody is a request body over bytes a bodyLease lent. Close marks the
// transport done with them; the bytes must not be read after it.
type leasedBody struct {
	bytes.Reader
	open   *atomic.Int32
	closed atomic.Bool
}

func (r *leasedBody) Close() error {
	if r.closed.CompareAndSwap(false, true) {
		r.open.Add(-1)
	}
	return nil
}
