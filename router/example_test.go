package router_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvmesh/kvmesh/router"
	"github.com/kvmesh/kvmesh/tree"
)

// A single kvmesh node in front of one vLLM-compatible backend: the second
// turn of a conversation goes where the first went, by prefix.
func ExampleNew() {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"object":"chat.completion","choices":[{"message":{"role":"assistant","content":"Hello!"}}]}`)
	}))
	defer backend.Close()

	cfg := router.DefaultConfig()
	cfg.Backends = []router.BackendConfig{{Name: "gpu-0", URL: backend.URL, Models: []string{"llama"}}}
	ix, err := tree.New(tree.DefaultConfig())
	if err != nil {
		panic(err)
	}
	rt, err := router.New(cfg, router.Deps{Index: ix, Registerer: prometheus.NewRegistry()})
	if err != nil {
		panic(err)
	}
	defer rt.Close()
	// The serve command calls rt.Start(ctx) for probes, scrapes and model
	// discovery, serves rt on the API listener and rt.AdminHandler() (with
	// promhttp's /metrics) on the admin one.

	system := strings.Repeat("You are a careful assistant who answers in one short sentence. ", 4)
	for _, body := range []string{
		`{"model":"llama","messages":[{"role":"system","content":"` + system + `"},{"role":"user","content":"Hi"}]}`,
		`{"model":"llama","messages":[{"role":"system","content":"` + system + `"},{"role":"user","content":"Hi"},{"role":"assistant","content":"Hello!"},{"role":"user","content":"Bye"}]}`,
	} {
		req := httptest.NewRequest("POST", "/v1/chat/completions", strings.NewReader(body))
		w := httptest.NewRecorder()
		rt.ServeHTTP(w, req)
		route := w.Header().Get(router.RouteHeader)
		fmt.Println(w.Code, route[:strings.Index(route, "; matched")], route[strings.Index(route, "; reason"):])
	}
	// Output:
	// 200 backend=gpu-0 ; reason=miss; policy=kvmesh
	// 200 backend=gpu-0 ; reason=prefix; policy=kvmesh
}
