package router

import (
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// RouteHeader is the response header that explains a routing decision:
//
//	x-kvmesh-route: backend=<name>; matched=<units>/<total>; reason=<reason>; policy=<name>[; held_ms=<ms>]
//
// backend is the configured backend name; matched is how much of the
// prompt (in units: bytes of the canonical rendering in byte mode, tokens
// in token mode) the chosen backend held according to the claims, over the
// prompt's length (0/0 for a request without a prompt); reason is one of
// the Reason names (prefix, miss, cost, load-override, replicate, retry,
// round-robin, random, least-loaded, hash, imbalance, forward); policy is
// the policy's name; held_ms, present only for a request the policy held
// at the router before deciding (kvmesh.hold_min_prompts), is how long,
// in milliseconds. Fields are separated by "; " and may gain new ones at
// the end: parse by name.
const RouteHeader = "X-Kvmesh-Route"

// appendRoute formats the x-kvmesh-route value.
func appendRoute(dst []byte, backend string, matched, total int, reason Reason, policy string, held time.Duration) []byte {
	dst = append(dst, "backend="...)
	dst = append(dst, backend...)
	dst = append(dst, "; matched="...)
	dst = strconv.AppendInt(dst, int64(matched), 10)
	dst = append(dst, '/')
	dst = strconv.AppendInt(dst, int64(total), 10)
	dst = append(dst, "; reason="...)
	dst = append(dst, reason.String()...)
	dst = append(dst, "; policy="...)
	dst = append(dst, policy...)
	if held > 0 {
		dst = append(dst, "; held_ms="...)
		dst = strconv.AppendFloat(dst, float64(held)/float64(time.Millisecond), 'f', 3, 64)
	}
	return dst
}

// hopHeaders are the hop-by-hop headers of RFC 9110 section 7.6.1 (and
// their common non-standard relatives): they describe one connection and
// are never forwarded.
var hopHeaders = []string{
	"Connection",
	"Proxy-Connection",
	"Keep-Alive",
	"Proxy-Authenticate",
	"Proxy-Authorization",
	"Te",
	"Trailer",
	"Transfer-Encoding",
	"Upgrade",
}

// copyEndToEnd copies the end-to-end headers of src into dst: everything
// but the hop-by-hop headers and those the Connection header names. The
// value slices are shared, not cloned: both callers copy from a header
// nobody modifies afterwards (the client's request, the backend's
// response), and neither modifies a copied slice in place (they replace or
// delete whole entries).
func copyEndToEnd(dst, src http.Header) {
	var named []string
	for _, v := range src["Connection"] {
		for _, f := range strings.Split(v, ",") {
			if f = strings.TrimSpace(f); f != "" {
				named = append(named, http.CanonicalHeaderKey(f))
			}
		}
	}
	for k, vv := range src {
		if isHop(k) || containsFold(named, k) {
			continue
		}
		dst[k] = vv
	}
}

func isHop(k string) bool {
	for _, h := range hopHeaders {
		if h == k {
			return true
		}
	}
	return false
}

func containsFold(list []string, k string) bool {
	for _, s := range list {
		if strings.EqualFold(s, k) {
			return true
		}
	}
	return false
}

// outgoingHeader builds, into st.outHeader (reused from request to
// request), the header of the request sent to a backend: the client's
// end-to-end headers, X-Forwarded-For extended with the client's address,
// and the ORCA format request unless the client sent its own. It is built
// once per request, whatever the number of attempts. st.orcaAdded says
// whether the ORCA request was added by the router (then the load report is
// removed from the answer: the client did not ask for it).
func (rt *Router) outgoingHeader(st *reqState, r *http.Request) http.Header {
	h := st.outHeader
	if h == nil {
		h = make(http.Header, len(r.Header)+2)
		st.outHeader = h
	}
	clear(h)
	copyEndToEnd(h, r.Header)
	if ip, _, err := net.SplitHostPort(r.RemoteAddr); err == nil && ip != "" {
		if prior := h["X-Forwarded-For"]; len(prior) > 0 {
			ip = strings.Join(prior, ", ") + ", " + ip
		}
		if st.xff == nil {
			st.xff = make([]string, 1)
		}
		st.xff[0] = ip
		h["X-Forwarded-For"] = st.xff[:1:1]
	}
	st.orcaAdded = false
	if rt.orcaFormat != nil && len(h[orcaRequestHeader]) == 0 {
		h[orcaRequestHeader] = rt.orcaFormat
		st.orcaAdded = true
	}
	return h
}
