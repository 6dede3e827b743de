package router

import (
	"testing"
)

// BenchmarkPreparePrecise is the keying of a 16 KiB chat request in precise
// mode: render, build the /tokenize body, find the tokens, chain them from
// kvevents.Seed. "cached": the prompt's tokens are in the cache (a repeated
// prompt; a conversation's next turn costs the same through its previous
// turn's entry). "tokenized": every request asks the engine (a fake one on
// loopback answering with ~3,300 ids), the remote path's own cost.
func BenchmarkPreparePrecise(b *testing.B) {
	body := chatBody(16 << 10)
	for _, c := range []struct {
		name  string
		cache int
	}{{"cached", DefaultPreciseConfig().CacheTokens}, {"tokenized", 0}} {
		b.Run(c.name, func(b *testing.B) {
			eng := newTokenizingBackend(b, "a")
			eng.fakeBackend.models = []string{"meta-llama/Llama-3.1-8B-Instruct"}
			g := preciseRig(b, func(pc *PreciseConfig) { pc.CacheTokens = c.cache }, eng.fakeBackend)
			st := g.rt.getState()
			if aerr := g.rt.prepare(st, EndpointChat, body, ""); aerr != nil || st.chain.UnitsPerBlock != 16 {
				b.Fatalf("%v, %d units per block", aerr, st.chain.UnitsPerBlock)
			}
			g.rt.putState(st)
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				st := g.rt.getState()
				if aerr := g.rt.prepare(st, EndpointChat, body, ""); aerr != nil {
					b.Fatal(aerr)
				}
				g.rt.putState(st)
			}
			b.StopTimer()
			if g.counter("kvmesh_router_precise_fallbacks_total") != 0 {
				b.Fatal("fallbacks during the benchmark")
			}
		})
	}
}
