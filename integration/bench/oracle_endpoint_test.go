package bench

import (
	"testing"

	"github.com/kvmesh/kvmesh/integration/sim"
	"github.com/kvmesh/kvmesh/router"
)

// The oracle must read a /v1/completions request as the engines do: as a
// text prompt. Read as a chat body it holds no messages, so the oracle saw
// no backend holding anything of it and routed completions blind.
func TestOracleSeesCompletionPrompts(t *testing.T) {
	insts := simInstances(t, "c", 3)
	doc := words("doc", 600)
	completion := func(q string) []byte {
		return []byte(`{"model":"kvmesh-sim","max_tokens":2,"prompt":"` + doc + " " + q + `"}`)
	}
	o, cands, _ := warmedOracle(t, insts, 1, sim.CompletionPath, completion("first"))
	body := completion("second")
	p := new(router.Prompt)
	if err := router.Render(router.EndpointCompletions, body, p); err != nil {
		t.Fatal(err)
	}
	unregister := o.register(router.EndpointCompletions, &oracleReq{body: body})
	defer unregister()
	scores := make([]float64, len(cands))
	d := o.Choose(&router.Request{Model: "kvmesh-sim", Prompt: p}, cands, scores)
	if d.Index != 1 || !(scores[1] < scores[0]) {
		t.Errorf("oracle chose %s (scores %v), want b1, the only backend holding the document", cands[d.Index].Name, scores)
	}
}
