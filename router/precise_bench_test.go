package router

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/kvmesh/kvmesh/tree"
)

// BenchmarkPreparePrecise is the keying of a 16 KiB chat request in precise
// mode: render, build the /tokenize body, find the tokens, chain them from
// kvevents.Seed. "cached": the prompt's tokens are in the cache (a repeated
// prompt; a conversation's next turn costs the same through its previous
// turn's entry). "tokenized": every request asks the engine, a minimal
// server on loopback answering ~3,300 ids from memory, so what is measured
// is the router's side of the call (plus net/http's on both ends: the
// allocation count includes the server's).
func BenchmarkPreparePrecise(b *testing.B) {
	body := chatBody(16 << 10)
	toks := engineTokens(b, body)
	answer, _ := json.Marshal(map[string]any{"count": len(toks), "max_model_len": 131072, "tokens": toks, "token_strs": nil})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header()["Content-Type"] = []string{"application/json"}
		_, _ = w.Write(answer)
	}))
	defer srv.Close()
	for _, c := range []struct {
		name  string
		cache int
	}{{"cached", DefaultPreciseConfig().CacheTokens}, {"tokenized", 0}} {
		b.Run(c.name, func(b *testing.B) {
			cfg := DefaultConfig()
			cfg.Backends = []BackendConfig{{Name: "a", URL: srv.URL, Models: []string{"meta-llama/Llama-3.1-8B-Instruct"}}}
			tc := tree.DefaultConfig()
			tc.Capacity = 1 << 16
			ix, _ := tree.New(tc)
			pc := DefaultPreciseConfig()
			pc.Backends, pc.CacheTokens, pc.TokenizeTimeout = []string{"a"}, c.cache, 5*time.Second
			rt, err := New(cfg, Deps{Index: ix, Precise: &pc})
			if err != nil {
				b.Fatal(err)
			}
			defer rt.Close()
			rt.backends()[0].healthy.Store(true)
			st := rt.getState()
			if aerr := rt.prepare(st, EndpointChat, body, ""); aerr != nil || st.chain.UnitsPerBlock != 16 {
				b.Fatalf("%v, %d units per block", aerr, st.chain.UnitsPerBlock)
			}
			rt.putState(st)
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				st := rt.getState()
				if aerr := rt.prepare(st, EndpointChat, body, ""); aerr != nil || st.chain.UnitsPerBlock != 16 {
					b.Fatal("not keyed precisely")
				}
				rt.putState(st)
			}
		})
	}
}
