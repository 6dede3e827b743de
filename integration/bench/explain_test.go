package bench

import (
	"context"
	"reflect"
	"strings"
	"testing"

	"github.com/kvmesh/kvmesh/integration/sim"
	"github.com/kvmesh/kvmesh/router"
)

// Through a real kvmesh router: after a prompt was answered by one
// backend, the router's view of that backend, asked for the same prompt,
// is a trusted match there, chosen, at the chosen cost; a backend that
// holds nothing has no match and costs more.
func TestExplainAtShowsTheHoldersClaims(t *testing.T) {
	cfg := DefaultConfig()
	cfg.TimeScale = 2000
	cfg.LagSampleEvery = 0
	arm, err := ParseArm(router.PolicyKVMesh)
	if err != nil {
		t.Fatal(err)
	}
	d, fleet, done := deployArm(t, &cfg, SimFleet(3, fastSimConfig()), arm)
	defer done()
	c := newHTTPClient(2)
	defer c.CloseIdleConnections()
	url := d.fronts[0] + sim.ChatPath
	body := chatBody(words("doc", 600), "a question", 2)
	var s Sample
	send(context.Background(), c, url, func(b []byte) []byte { return append(b, body...) }, nil, &s)
	if !s.OK() || s.Backend == "" {
		t.Fatalf("first request: %+v", s)
	}
	explain := explainAt(c, sim.ChatPath, fleet.Oracle())
	v := explain(url, body, s.Backend)
	if v == nil {
		t.Fatal("no view of the backend that answered")
	}
	if v.Chosen != s.Backend || v.Matched == 0 || v.Matched != v.Deepest || v.Cost != v.ChosenCost {
		t.Errorf("view of the holder %s = %+v, want it chosen on a trusted match at the deepest depth, at the chosen cost", s.Backend, v)
	}
	// Every candidate, with what the simulator says it holds: the holder
	// most of the prompt and a trusted match, the others nothing.
	if len(v.Candidates) != 3 || v.Units < len(body)/2 {
		t.Fatalf("candidates %+v, units %d: want the 3 backends and the prompt's length", v.Candidates, v.Units)
	}
	for _, cv := range v.Candidates {
		holds := cv.Backend == s.Backend
		if holds != (cv.HeldTokens > s.PromptTokens/2) || holds != (cv.MatchedUnits > 0) || (!holds && cv.HeldTokens != 0) {
			t.Errorf("candidate %+v (the holder is %s, prompt %d tokens): want the holder alone holding and matched", cv, s.Backend, s.PromptTokens)
		}
	}
	if w := explainAt(c, sim.ChatPath, nil)(url, body, s.Backend); w == nil || len(w.Candidates) != 3 || w.Candidates[0].HeldTokens != -1 {
		t.Errorf("view without a fleet to ask = %+v, want the candidates with held tokens unknown (-1)", w)
	}
	other := BackendName(0)
	if other == s.Backend {
		other = BackendName(1)
	}
	if w := explain(url, body, other); w == nil || w.Matched != 0 || w.Doubted != 0 || !(w.Cost > w.ChosenCost) {
		t.Errorf("view of %s, which holds nothing = %+v, want no claim and a higher cost", other, w)
	}
	if w := explain(url, body, "no-such-backend"); w != nil {
		t.Errorf("view of an unknown backend = %+v, want nil", w)
	}
	// A node that cannot explain (here: a path it does not serve) gives no
	// view rather than a wrong one.
	if w := explainAt(c, "/nowhere", nil)(d.fronts[0]+"/nowhere", body, s.Backend); w != nil {
		t.Errorf("view from a failed explanation = %+v, want nil", w)
	}
}

// The replay's hooks run in order, and Explain is told the backend that
// held the most of the prompt ("" when none held any).
func TestReplayBeforeHooks(t *testing.T) {
	rc := DefaultReplayConfig()
	if rc.before() != nil {
		t.Fatal("before() with no hooks is not nil")
	}
	var asked []string
	rc.Available = func([]byte) (int, string) { return 7, "b2" }
	rc.Explain = func(url string, _ []byte, holder string) *HolderView {
		asked = append(asked, url+" "+holder)
		return &HolderView{Matched: 3}
	}
	var s Sample
	rc.before()("http://x/v1/chat/completions", []byte("{}"), &s)
	if s.Available != 7 || s.AvailableAt != "b2" || s.Holder == nil || s.Holder.Matched != 3 || strings.Join(asked, ",") != "http://x/v1/chat/completions b2" {
		t.Errorf("sample %+v after the hooks, asked %v", s, asked)
	}
	rc.Available = func([]byte) (int, string) { return 0, "" }
	s = Sample{}
	rc.before()("http://x", nil, &s)
	if s.Holder == nil || strings.Join(asked, ",") != "http://x/v1/chat/completions b2,http://x " {
		t.Errorf("with no holder: sample %+v, asked %v; want Explain asked with holder \"\"", s, asked)
	}
}

// holderView takes the holder's claims and distances, and the chosen
// backend's trusted match, doubted and near claims and their distances,
// from an explanation.
func TestHolderViewCarriesDistances(t *testing.T) {
	fleet := 1.25
	ex := &router.RouteExplanation{Chosen: "b1", Deepest: 4, Units: 640, FleetLoad: &fleet, Candidates: []router.CandidateExplanation{
		{Backend: "b0", MatchedBlocks: 2, MatchedUnits: 128, DoubtedBlocks: 9, NearBlocks: 5, DoubtedBeyond: 1.4, DoubtWorth: 0.2, NearWorth: 0.4, Score: 30, Load: router.LoadJSON{PendingPrefillUnits: 50}},
		{Backend: "b1", MatchedBlocks: 4, MatchedUnits: 256, Beyond: 0.6, DoubtedBlocks: 6, DoubtedBeyond: 2.5, Score: 20, Chosen: true},
	}}
	v := holderView(ex, "b0")
	want := HolderView{Chosen: "b1", Deepest: 4, Matched: 2, Doubted: 9, DoubtedBeyond: 1.4, Near: 5, ChosenDoubted: 6, ChosenDoubtedBeyond: 2.5,
		ChosenMatched: 4, ChosenBeyond: 0.6, Cost: 30, ChosenCost: 20, Units: 640, FleetLoad: 1.25, Candidates: []CandidateView{
			{Backend: "b0", HeldTokens: -1, MatchedUnits: 128, DoubtedBlocks: 9, DoubtWorth: 0.2, NearWorth: 0.4, Score: 30, PendingUnits: 50},
			{Backend: "b1", HeldTokens: -1, MatchedUnits: 256, DoubtedBlocks: 6, Score: 20},
		}}
	if v == nil || !reflect.DeepEqual(*v, want) {
		t.Fatalf("holderView = %+v, want %+v", v, want)
	}
	if v := holderView(ex, "b7"); v != nil {
		t.Errorf("holderView of a backend not among the candidates = %+v, want nil", v)
	}
	if v := holderView(ex, ""); v == nil || v.Chosen != "b1" || v.Matched != 0 || len(v.Candidates) != 2 || v.ChosenCost != 20 {
		t.Errorf("holderView with no holder = %+v, want the chosen backend's and the candidates' view", v)
	}
}
