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
		"kvmesh+truth":         {Name: "kvmesh+truth", Policy: "kvmesh", Nodes: 1, Truth: true},
		"kvmesh+truth:8:mesh":  {Name: "kvmesh+truth x8 mesh", Policy: "kvmesh", Nodes: 8, State: StateMesh, Truth: true},
		"kvmesh+truth+load:8:mesh": {Name: "kvmesh+truth+load x8 mesh", Policy: "kvmesh", Nodes: 8, State: StateMesh,
			Truth: true, TrueLoad: true},
		"kvmesh+evict":        {Name: "kvmesh+evict", Policy: "kvmesh", Nodes: 1, Evictions: true},
		"oracle+hold":         {Name: "oracle+hold", Policy: PolicyOracle, Nodes: 1, Hold: true},
		"oracle+scraped+hold": {Name: "oracle+scraped+hold", Policy: PolicyOracle, Nodes: 1, ScrapedLoad: true, Hold: true},
		"kvmesh+evict:8:mesh": {Name: "kvmesh+evict x8 mesh", Policy: "kvmesh", Nodes: 8, State: StateMesh, Evictions: true},
	} {
		got, err := ParseArm(spec)
		if err != nil || got != want {
			t.Errorf("ParseArm(%q) = %+v, %v; want %+v", spec, got, err, want)
		}
	}
	for _, bad := range []string{"", "fastest", "kvmesh:0", "kvmesh:x", "kvmesh:2:gossip", "oracle:2", "kvmesh:2:mesh:extra", "fastest+words", "kvmesh+scraped", "oracle+scraped:2",
		"oracle+truth", "kvmesh-precise+truth", "kvmesh+words+truth",
		"kvmesh+truth+load", "kvmesh+truth+load:2", "kvmesh+load:2:mesh",
		"oracle+evict", "kvmesh+evict+words", "kvmesh+truth+evict", "kvmesh-precise+evict",
		"kvmesh+hold", "round_robin+hold", "oracle+hold:2"} {
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
		"round_robin,least_loaded,kvmesh", "least_loaded,kvmesh,round_robin", "kvmesh,round_robin,least_loaded",
		"kvmesh,least_loaded,round_robin", // an odd count's second n rows are reversed
	} {
		if got := name(rotation(arms, r)); got != want {
			t.Errorf("rotation %d = %s, want %s", r, got, want)
		}
	}
}

// Over a full design (n repeats, 2n for an odd n) every arm runs in every
// position equally often and follows every other arm equally often.
func TestRotationIsBalanced(t *testing.T) {
	for n := 2; n <= 7; n++ {
		arms := make([]Arm, n)
		for i := range arms {
			arms[i] = Arm{Name: string(rune('a' + i))}
		}
		reps := n
		if n%2 == 1 {
			reps = 2 * n
		}
		pos := map[[2]string]int{}
		follows := map[[2]string]int{}
		for r := range reps {
			order := rotation(arms, r)
			seen := map[string]bool{}
			for i, a := range order {
				seen[a.Name] = true
				pos[[2]string{a.Name, string(rune('0' + i))}]++
				if i > 0 {
					follows[[2]string{order[i-1].Name, a.Name}]++
				}
			}
			if len(seen) != n {
				t.Fatalf("n=%d repeat %d: %v is not a permutation", n, r, order)
			}
		}
		wantPos, wantFollow := reps/n, reps/n
		if len(pos) != n*n || len(follows) != n*(n-1) {
			t.Fatalf("n=%d: %d (arm, position) pairs and %d (before, after) pairs, want %d and %d", n, len(pos), len(follows), n*n, n*(n-1))
		}
		for k, v := range pos {
			if v != wantPos {
				t.Errorf("n=%d: arm %s ran at position %s %d times, want %d", n, k[0], k[1], v, wantPos)
			}
		}
		for k, v := range follows {
			if v != wantFollow {
				t.Errorf("n=%d: %s ran right after %s %d times, want %d", n, k[1], k[0], v, wantFollow)
			}
		}
	}
}

func TestCheckFloors(t *testing.T) {
	r := sampleReport()
	r.Arms = append(r.Arms, ArmSummary{Arm: Arm{Name: "least_loaded", Policy: "least_loaded", Nodes: 1},
		TTFTP99: Spread{Median: 1.2, N: 2}, TTFTP50: Spread{Median: 0.5, N: 2}})
	// A diagnostic mesh arm on the engines' true caches has no floor of its own.
	r.Arms = append(r.Arms, ArmSummary{Arm: Arm{Name: "kvmesh+truth x8 mesh", Policy: "kvmesh", Nodes: 8, State: StateMesh, Truth: true},
		HitRate: Spread{Median: 0.1, N: 2}, TTFTP99: Spread{Median: 9, N: 2}, TTFTP50: Spread{Median: 9, N: 2}})
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
