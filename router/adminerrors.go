package router

import (
	"net/http"
	"strings"
)

// adminErrors serves mux with its own refusals in the JSON the rest of the
// admin listener answers: http.ServeMux writes a path it has no handler
// for (404) and a method a path does not take (405, with Allow) as plain
// text, and so does the cross-origin protection (403).
func adminErrors(mux *http.ServeMux) http.Handler {
	cop := http.NewCrossOriginProtection()
	cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		e := NewAPIError(http.StatusForbidden, "", "cross-origin request refused: the admin endpoints take no requests from web pages of other origins")
		e.Code = "cross_origin"
		e.WriteTo(w)
	}))
	return cop.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h, pattern := mux.Handler(r)
		if pattern != "" {
			mux.ServeHTTP(w, r) // the mux itself: it sets the path's wildcards
			return
		}
		// No handler for it: find out which refusal the mux would give
		// (and its Allow header) without its text body.
		rec := &statusOnly{header: http.Header{}}
		h.ServeHTTP(rec, r)
		status := rec.status
		if status != http.StatusNotFound && status != http.StatusMethodNotAllowed {
			h.ServeHTTP(w, r) // a redirect to the cleaned path, say: as the mux answers it
			return
		}
		if allow := rec.header.Get("Allow"); allow != "" {
			w.Header().Set("Allow", allow)
		}
		msg := "no admin endpoint at " + r.URL.Path
		if status == http.StatusMethodNotAllowed {
			msg = "method " + r.Method + " is not allowed on " + r.URL.Path + " (allowed: " + strings.ReplaceAll(rec.header.Get("Allow"), ",", ", ") + ")"
		}
		NewAPIError(status, "", "%s", msg).WriteTo(w)
	}))
}

// statusOnly is a ResponseWriter that keeps a handler's status and header
// and drops its body.
type statusOnly struct {
	header http.Header
	status int
}

func (s *statusOnly) Header() http.Header { return s.header }
func (s *statusOnly) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return len(b), nil
}
func (s *statusOnly) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
}
