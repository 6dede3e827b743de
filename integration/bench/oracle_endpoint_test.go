package bench

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/kvmesh/kvmesh/integration/sim"
	"github.com/kvmesh/kvmesh/router"
)

// The oracle must read a /v1/completions request as the engines do: as a
// text prompt. Read as a chat body it holds no messages, so the oracle saw
// no backend holding anything of it and routed completions blind.
func TestOracleSeesCompletionPrompts(t *testing.T) {
	var insts []*sim.Instance
	for i := range 3 {
		c := fastSimConfig()
		c.Name = fmt.Sprint("c", i)
		in, err := sim.New(c)
		if err != nil {
			t.Fatal(err)
		}
		defer in.Close()
		insts = append(insts, in)
	}
	doc := words("doc", 600)
	completion := func(q string) []byte {
		return []byte(`{"model":"kvmesh-sim","max_tokens":2,"prompt":"` + doc + " " + q + `"}`)
	}
	rec := httptest.NewRecorder()
	insts[1].ServeHTTP(rec, httptest.NewRequest(http.MethodPost, sim.CompletionPath, strings.NewReader(string(completion("first")))))
	if rec.Code != http.StatusOK {
		t.Fatalf("warming: %d %s", rec.Code, rec.Body)
	}
	backends := map[string]OracleBackend{}
	cands := make([]router.Candidate, len(insts))
	for i, in := range insts {
		backends[BackendName(i)] = in
		cands[i] = router.Candidate{Name: BackendName(i), Slot: i, Weight: 1}
	}
	o := NewOracle(router.DefaultKVMeshConfig(), backends)
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
