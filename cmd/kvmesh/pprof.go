package main

import (
	"net/http"
	"net/http/pprof"
	"strconv"

	"github.com/kvmesh/kvmesh/router"
)

// mountPprof serves Go's runtime profiles on the admin listener under
// /debug/pprof/ when on (listen.admin_pprof, --admin-pprof): goroutine
// dumps, heap and allocation profiles, CPU profiles and execution traces of
// a running node, for `go tool pprof http://HOST:9090/debug/pprof/heap`.
// Off, the paths answer a JSON 404 saying how to turn them on.
//
// /debug/pprof/cmdline is never served: it prints the process's
// arguments, which may hold a secret (--gossip-key).
func mountPprof(admin *http.ServeMux, on bool) {
	if !on {
		admin.HandleFunc("/debug/pprof/", func(w http.ResponseWriter, r *http.Request) {
			e := router.NewAPIError(http.StatusNotFound, "", "profiling is off on this node (start it with --admin-pprof, listen.admin_pprof: true)")
			e.Code = "pprof_off"
			e.WriteTo(w)
		})
		return
	}
	admin.HandleFunc("GET /debug/pprof/", boundSeconds(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/debug/pprof/cmdline" {
			e := router.NewAPIError(http.StatusNotFound, "", "the command line is not served: it may hold secrets")
			e.Code = "not_served"
			e.WriteTo(w)
			return
		}
		// The index, and every named profile (heap, goroutine, allocs,
		// block, mutex...); with ?seconds= a named one is the difference
		// over that time, bounded like a CPU profile's.
		pprof.Index(w, r)
	}))
	admin.HandleFunc("GET /debug/pprof/profile", boundSeconds(pprof.Profile))
	admin.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
	admin.HandleFunc("GET /debug/pprof/trace", boundSeconds(pprof.Trace))
}

// maxProfileSeconds bounds ?seconds= of a CPU profile or a trace (one runs
// at a time, and a forgotten day-long one would refuse every other) and of
// a named profile's difference (heap?seconds=): each holds a connection that
// long, past the admin listener's write timeout.
const maxProfileSeconds = 600

// boundSeconds refuses a ?seconds= that is not a whole number of seconds
// in [1, maxProfileSeconds] (pprof's own default, 30 s without one).
func boundSeconds(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if v := r.URL.Query().Get("seconds"); v != "" {
			if n, err := strconv.Atoi(v); err != nil || n < 1 || n > maxProfileSeconds {
				e := router.NewAPIError(http.StatusBadRequest, "seconds", "seconds must be a whole number from 1 to %d, got %q", maxProfileSeconds, v)
				e.WriteTo(w)
				return
			}
		}
		h(w, r)
	}
}
