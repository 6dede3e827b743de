package bench

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/kvmesh/kvmesh/router"
)

// PolicyOracle names the oracle arm's policy (see Oracle).
const PolicyOracle = "oracle"

// State says how the router nodes of a multi-node arm share what they learn.
type State string

const (
	// StateLocal: each node keeps its own claims (NewLocalLearner each), as
	// independent replicas behind an L4 balancer do without a mesh.
	StateLocal State = "local"
	// StateMesh: nodes replicate claims through kvmesh's mesh and share
	// their bookings over its load channel (the default).
	StateMesh State = "mesh"
	// StateClaims: nodes replicate claims through the mesh but do not share
	// bookings (mesh.Config.ShareLoad off): each sees only the prefill it
	// queued itself, as before the load channel. For comparison.
	StateClaims State = "claims"
)

// meshed says whether the arm's nodes run a mesh.
func (a Arm) meshed() bool { return a.Nodes > 1 && (a.State == StateMesh || a.State == StateClaims) }

// Arm is one way of routing that the harness measures.
type Arm struct {
	// Name labels the arm in tables and charts.
	Name string `json:"name"`
	// Policy is a router policy name (router.PolicyNames) or PolicyOracle.
	Policy string `json:"policy"`
	// Nodes is the number of router nodes; requests are spread over them
	// uniformly at random, as by an L4 balancer. 1 for a single router.
	Nodes int `json:"nodes"`
	// State is how several nodes share claims (ignored for one node).
	State State `json:"state,omitempty"`
	// Tokens runs the routers in token mode with router.WordTokenizer
	// (whitespace words: the simulator's own tokens, so router blocks line
	// up with the backends' KV blocks) instead of byte mode, the default.
	Tokens bool `json:"tokens,omitempty"`
	// Precise runs the routers in precise mode against a fleet publishing
	// KV events (precise.go); the arm spec is "kvmesh-precise".
	Precise bool `json:"precise,omitempty"`
	// ScrapedLoad: the oracle prices the router's scraped running count and
	// KV usage instead of the engines' live ones (Oracle.ScrapedLoad); the
	// arm spec is "oracle+scraped".
	ScrapedLoad bool `json:"scraped_load,omitempty"`
	// Truth runs the kvmesh policy on the engines' true cache contents
	// instead of its claims (truth.go); the arm spec is "kvmesh+truth".
	Truth bool `json:"truth,omitempty"`
	// TrueLoad, with Truth on a mesh arm, gives each node its peers' exact
	// bookings at each decision instead of the load channel's
	// (Oracle.Peers); the arm spec is "kvmesh+truth+load:N:mesh".
	TrueLoad bool `json:"true_load,omitempty"`
	// Evictions runs kvmesh with every backend in eviction-link mode
	// (router.PreciseConfig.EvictionBackends) against a fleet publishing
	// KV events: requests keyed by bytes, claims ended by the engines'
	// evictions (evict.go); the arm spec is "kvmesh+evict".
	Evictions bool `json:"evictions,omitempty"`
	// Hold: the oracle holds long prompts at the router while every
	// engine has prefill queued, as kvmesh's late binding does
	// (Oracle.Hold, router.KVMeshConfig.LateBinds); the arm spec is
	// "oracle+hold".
	Hold bool `json:"hold,omitempty"`
}

// ParseArm reads an arm spec: a policy name, optionally with "+words"
// (token mode, see Arm.Tokens), or "kvmesh-precise" (Arm.Precise),
// optionally followed by ":<nodes>" and ":mesh", ":claims" or ":local"
// (default local), e.g. "kvmesh", "oracle", "kvmesh:8:mesh",
// "kvmesh:8:claims", "kvmesh:3:local", "kvmesh+words", "kvmesh-precise",
// "oracle+scraped" (Arm.ScrapedLoad), "oracle+hold" (Arm.Hold),
// "kvmesh+truth" (Arm.Truth), "kvmesh+evict" (Arm.Evictions).
func ParseArm(spec string) (Arm, error) {
	parts := strings.Split(strings.TrimSpace(spec), ":")
	a := Arm{Policy: parts[0], Nodes: 1}
	if p, ok := strings.CutSuffix(a.Policy, "+words"); ok {
		a.Policy, a.Tokens = p, true
	}
	if p, ok := strings.CutSuffix(a.Policy, "+hold"); ok {
		if p != PolicyOracle && !strings.HasPrefix(p, PolicyOracle+"+") {
			return Arm{}, fmt.Errorf("bench: arm %q: +hold is the oracle's (oracle+hold; kvmesh holds by its own config, kvmesh.hold_min_prompts)", spec)
		}
		a.Policy, a.Hold = p, true
	}
	if p, ok := strings.CutSuffix(a.Policy, "+scraped"); ok {
		if p != PolicyOracle {
			return Arm{}, fmt.Errorf("bench: arm %q: +scraped is the oracle's (oracle+scraped)", spec)
		}
		a.Policy, a.ScrapedLoad = p, true
	}
	if p, ok := strings.CutSuffix(a.Policy, "+load"); ok {
		a.Policy, a.TrueLoad = p, true
	}
	if p, ok := strings.CutSuffix(a.Policy, "+evict"); ok {
		if p != router.PolicyKVMesh {
			return Arm{}, fmt.Errorf("bench: arm %q: +evict is kvmesh's (kvmesh+evict)", spec)
		}
		a.Policy, a.Evictions = p, true
	}
	if p, ok := strings.CutSuffix(a.Policy, "+truth"); ok {
		if p != router.PolicyKVMesh {
			return Arm{}, fmt.Errorf("bench: arm %q: +truth is kvmesh's (kvmesh+truth)", spec)
		}
		a.Policy, a.Truth = p, true
	}
	if a.Policy == PolicyPrecise && !a.Tokens {
		a.Policy, a.Precise = router.PolicyKVMesh, true
	}
	if a.Policy != PolicyOracle && !slices.Contains(router.PolicyNames(), a.Policy) {
		return Arm{}, fmt.Errorf("bench: arm %q: unknown policy %q (want %s or %s)", spec, a.Policy,
			strings.Join(router.PolicyNames(), ", "), PolicyOracle)
	}
	if len(parts) > 3 {
		return Arm{}, fmt.Errorf("bench: arm %q: want policy[:nodes[:mesh|claims|local]]", spec)
	}
	if len(parts) >= 2 {
		n, err := strconv.Atoi(parts[1])
		if err != nil || n < 1 || n > 64 {
			return Arm{}, fmt.Errorf("bench: arm %q: nodes must be a number in [1, 64]", spec)
		}
		a.Nodes = n
	}
	if a.Nodes > 1 {
		a.State = StateLocal
	}
	if len(parts) == 3 {
		switch State(parts[2]) {
		case StateLocal, StateMesh, StateClaims:
			a.State = State(parts[2])
		default:
			return Arm{}, fmt.Errorf("bench: arm %q: state must be mesh, claims or local, got %q", spec, parts[2])
		}
	}
	if a.Policy == PolicyOracle && a.Nodes != 1 {
		return Arm{}, fmt.Errorf("bench: arm %q: the oracle runs on one node", spec)
	}
	if a.Evictions && (a.Tokens || a.Truth) {
		return Arm{}, fmt.Errorf("bench: arm %q: kvmesh+evict runs in byte mode on claims", spec)
	}
	if a.Truth && a.Tokens {
		return Arm{}, fmt.Errorf("bench: arm %q: kvmesh+truth runs in byte mode", spec)
	}
	if a.TrueLoad && (!a.Truth || a.State != StateMesh) {
		return Arm{}, fmt.Errorf("bench: arm %q: +load is for kvmesh+truth on a mesh (kvmesh+truth+load:N:mesh)", spec)
	}
	a.Name = a.Policy
	if a.Precise {
		a.Name = PolicyPrecise
	}
	if a.Tokens {
		a.Name += "+words"
	}
	if a.ScrapedLoad {
		a.Name += "+scraped"
	}
	if a.Truth {
		a.Name += "+truth"
	}
	if a.TrueLoad {
		a.Name += "+load"
	}
	if a.Evictions {
		a.Name += "+evict"
	}
	if a.Hold {
		a.Name += "+hold"
	}
	if a.Nodes > 1 || a.State == StateMesh || a.State == StateClaims {
		a.Name = fmt.Sprintf("%s x%d %s", a.Name, a.Nodes, a.State)
	}
	return a, nil
}

// ParseArms reads a comma-separated list of arm specs.
func ParseArms(list string) ([]Arm, error) {
	var arms []Arm
	seen := map[string]bool{}
	for _, spec := range strings.Split(list, ",") {
		if strings.TrimSpace(spec) == "" {
			continue
		}
		a, err := ParseArm(spec)
		if err != nil {
			return nil, err
		}
		if seen[a.Name] {
			return nil, fmt.Errorf("bench: arm %q is listed twice", a.Name)
		}
		seen[a.Name] = true
		arms = append(arms, a)
	}
	if len(arms) == 0 {
		return nil, fmt.Errorf("bench: no arms in %q", list)
	}
	return arms, nil
}

// DefaultArms are the single-node arms every comparison needs: the two
// baselines, the two published cache-aware alternatives, kvmesh, and the
// oracle above them all.
func DefaultArms() []Arm {
	arms, _ := ParseArms("round_robin,least_loaded,consistent_hash,sglang_cache_aware,kvmesh,oracle")
	return arms
}

// rotation returns the arms in the order repeat r runs them: the rows of a
// Williams design (a Latin square balanced for carry-over). Over n repeats
// of n arms each arm runs once in every position, and each arm follows
// every other exactly once (an even n; an odd n needs 2n repeats, the
// second n rows reversed), so no arm always runs after the same one's
// leftovers (page cache, GC, CPU frequency). A plain rotation had arm i
// follow arm i-1 in every repeat it did not open. For 2 and 3 arms the
// first n rows are the plain rotation.
func rotation(arms []Arm, r int) []Arm {
	n := len(arms)
	out := make([]Arm, n)
	shift, reversed := r%n, n%2 == 1 && (r/n)%2 == 1
	for i := range n {
		// The first row is 0, 1, n-1, 2, n-2, ...; row k adds k.
		j := 0
		switch {
		case i%2 == 1:
			j = (i + 1) / 2
		case i > 0:
			j = n - i/2
		}
		pos := i
		if reversed {
			pos = n - 1 - i
		}
		out[pos] = arms[(j+shift)%n]
	}
	return out
}
