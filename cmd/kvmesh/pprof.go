package main

import (
	"net/http"
	"net/http/pprof"

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
	admin.HandleFunc("GET /debug/pprof/", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/debug/pprof/cmdline" {
			e := router.NewAPIError(http.StatusNotFound, "", "the command line is not served: it may hold secrets")
			e.Code = "not_served"
			e.WriteTo(w)
			return
		}
		pprof.Index(w, r) // the index, and every named profile (heap, goroutine, allocs, block, mutex...)
	})
	admin.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	admin.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
	admin.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
}
