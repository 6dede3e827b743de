package bench

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

func TestParseArm(t *testing.T) {
	for spec, want := range map[string]Arm{
		"kvmesh":               {Name: "kvmesh", Policy: "kvmesh", Nodes: 1},
		"oracle":               {Name: "oracle", Policy: PolicyOracle, Nodes: 1},
		"kvmesh:8:mesh":        {Name: "kvmesh x8 mesh", Policy: "kvmesh", Nodes: 8, State: StateMesh},
		"kvmesh:3":             {Name: "kvmesh x3 local", Policy: "kvmesh", Nodes: 3, State: StateLocal},
		" round_robin:3:local": {Name: "round_robin x3 local", Policy: "round_robin", Nodes: 3, State: StateLocal},
		"kvmesh+words":         {Name: "kvmesh+words", Policy: "kvmesh", Nodes: 1, Tokens: true},
		"kvmesh+words:2:mesh":  {Name: "kvmesh+words x2 mesh", Policy: "kvmesh", Nodes: 2, State: StateMesh, Tokens: true},
		"oracle+scraped":       {Name: "oracle+scraped", Policy: PolicyOracle, Nodes: 1, ScrapedLoad: true},
	} {
		got, err := ParseArm(spec)
		if err != nil || got != want {
			t.Errorf("ParseArm(%q) = %+v, %v; want %+v", spec, got, err, want)
		}
	}
	for _, bad := range []string{"", "fastest", "kvmesh:0", "kvmesh:x", "kvmesh:2:gossip", "oracle:2", "kvmesh:2:mesh:extra", "fastest+words", "kvmesh+scraped", "oracle+scraped:2"} {
		if _, err := ParseArm(bad); err == nil {
			t.Errorf("ParseArm(%q) accepted", bad)
		}
	}
	if _, err := ParseArms("kvmesh,kvmesh"); err == nil || !strings.Contains(err.Error(), "twice") {
		t.Errorf("a repeated arm: %v", err)
	}
	if arms := DefaultArms(); len(arms) != 6 || arms[5].Policy != PolicyOracle {
		t.Errorf("DefaultArms = %+v", arms)
	}
}

func TestRotation(t *testing.T) {
	arms, _ := ParseArms("round_robin,least_loaded,kvmesh")
	name := func(as []Arm) string {
		var s []string
		for _, a := range as {
			s = append(s, a.Name)
		}
		return strings.Join(s, ",")
	}
	for r, want := range []string{
		"round_robin,least_loaded,kvmesh", "least_loaded,kvmesh,round_robin", "kvmesh,round_robin,least_loaded", "round_robin,least_loaded,kvmesh",
	} {
		if got := name(rotation(arms, r)); got != want {
			t.Errorf("rotation %d = %s, want %s", r, got, want)
		}
	}
}

func TestCheckFloors(t *testing.T) {
	r := sampleReport()
	r.Arms = append(r.Arms, ArmSummary{Arm: Arm{Name: "least_loaded", Policy: "least_loaded", Nodes: 1},
		TTFTP99: Spread{Median: 1.2, N: 2}, TTFTP50: Spread{Median: 0.5, N: 2}})
	floors := CheckFloors(r)
	got := map[string]bool{}
	for _, f := range floors {
		got[f.Name] = f.Pass
	}
	want := map[string]bool{
		"hit rate vs oracle":       false, // 0.32 / 0.34
		"hit rate vs round_robin":  true,  // 0.32 / 0.11
		"TTFT p50 vs round_robin":  true,  // 0.45 / 1.1
		"TTFT p99 vs least_loaded": false, // 1.35 / 1.2
	}
	if len(got) != len(want) {
		t.Fatalf("floors %+v", floors)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("floor %q pass = %v, want %v", k, got[k], v)
		}
	}
	if s := FloorsSummary(floors); !strings.HasPrefix(s, "2/4 floors met; missed: ") {
		t.Errorf("summary %q", s)
	}
	if CheckFloors(&Report{}) != nil {
		t.Error("floors without a kvmesh arm")
	}
}

// A "+words" arm routes in token mode: its routers count blocks of 16
// tokens where byte mode counts 64 bytes.
func TestTokenModeArm(t *testing.T) {
	_, sc := prefixHeavy(t)
	for spec, want := range map[string]float64{"kvmesh+words": 16, "kvmesh": 64} {
		cfg := e2eConfig(t, sc, spec)
		d, _, done := deployArm(t, &cfg, cfg.Fleet, cfg.Arms[0])
		resp, err := http.Post(d.fronts[0]+"/debug/route", "application/json", bytes.NewReader(chatBody(words("w", 100), "q", 1)))
		if err != nil {
			t.Fatal(err)
		}
		var ex map[string]any
		err = json.NewDecoder(resp.Body).Decode(&ex)
		resp.Body.Close()
		done()
		if err != nil || ex["units_per_block"] != want {
			t.Errorf("%s: units_per_block %v (err %v), want %v", spec, ex["units_per_block"], err, want)
		}
	}
}
