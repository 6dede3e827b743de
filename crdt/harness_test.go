package crdt

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"

	"github.com/kvmesh/kvmesh/tree"
)

// simNet runs replicas in one goroutine over a simulated network. Every
// message goes through Encode and Decode, and the network can drop,
// duplicate, reorder and partition.
type simNet struct {
	t       testing.TB
	rng     *rand.Rand
	nodes   map[string]*simNode
	names   []string
	queue   []simMsg
	now     int64
	tick    int64 // ms per round
	drop    float64
	dup     float64
	reorder bool
	hold    bool           // keep messages in flight instead of delivering them
	held    []simMsg       // messages held back while hold is on
	group   map[string]int // partition group; nodes talk only within a group
	cfg     Config
	icfg    tree.Config
	bytes   int // bytes sent
	sent    int // messages sent
	incs    uint64
}

type simNode struct {
	r   *Replica
	up  bool
	out []Envelope
}

type simMsg struct {
	from, to string
	data     []byte
}

func newSimNet(t testing.TB, seed uint64, mod func(*Config, *tree.Config)) *simNet {
	cfg := DefaultConfig()
	cfg.MaxBatchClaims = 256
	icfg := tree.DefaultConfig()
	icfg.Capacity = 1 << 14
	icfg.CheckpointTokens = 64
	if mod != nil {
		mod(&cfg, &icfg)
	}
	return &simNet{t: t, rng: rand.New(rand.NewPCG(seed, seed^0x5eed)), nodes: map[string]*simNode{},
		now: 1_000_000, tick: 10, group: map[string]int{}, cfg: cfg, icfg: icfg}
}

// replica makes a new life of node name: a fresh index, the next
// incarnation.
func (s *simNet) replica(name string) *Replica {
	s.t.Helper()
	ix, err := tree.New(s.icfg)
	if err != nil {
		s.t.Fatal(err)
	}
	cfg := s.cfg
	cfg.Name = name
	s.incs++
	r, err := New(cfg, ix, s.incs)
	if err != nil {
		s.t.Fatal(err)
	}
	return r
}

// add creates a replica and connects it to every other live node.
func (s *simNet) add(name string) *simNode {
	s.t.Helper()
	r := s.replica(name)
	n := &simNode{r: r, up: true}
	if _, ok := s.nodes[name]; !ok {
		s.names = append(s.names, name)
		sort.Strings(s.names)
	}
	s.nodes[name] = n
	for _, other := range s.names {
		if o := s.nodes[other]; other != name && o.up {
			r.AddPeer(other, s.now)
			o.r.AddPeer(name, s.now)
		}
	}
	return n
}

func (s *simNet) node(name string) *simNode {
	s.t.Helper()
	n := s.nodes[name]
	if n == nil {
		s.t.Fatalf("no node %q", name)
	}
	return n
}

// kill stops a node: it loses its state and its messages; peers remove it.
func (s *simNet) kill(name string) {
	s.node(name).up = false
	for _, o := range s.nodes {
		if o.up {
			o.r.RemovePeer(name)
		}
	}
}

func (s *simNet) reachable(a, b string) bool { return s.group[a] == s.group[b] }

// round: time advances one tick, every live node emits its messages, and
// the network delivers what it does not drop (possibly duplicated, in
// random order when reordering).
func (s *simNet) round() {
	s.t.Helper()
	s.now += s.tick
	for _, name := range s.names {
		n := s.nodes[name]
		if !n.up {
			continue
		}
		n.out = n.r.Outgoing(s.now, n.out[:0])
		for _, e := range n.out {
			data, err := Encode(nil, e.Msg)
			if err != nil {
				s.t.Fatalf("%s: encode: %v", name, err)
			}
			s.sent++
			s.bytes += len(data)
			if !s.reachable(name, e.To) || s.rng.Float64() < s.drop {
				continue
			}
			s.queue = append(s.queue, simMsg{name, e.To, data})
			if s.rng.Float64() < s.dup {
				s.queue = append(s.queue, simMsg{name, e.To, data})
			}
		}
	}
	q := s.queue
	s.queue = nil
	if s.hold {
		s.held = append(s.held, q...)
		return
	}
	q = append(s.held, q...)
	s.held = nil
	if s.reorder {
		s.rng.Shuffle(len(q), func(i, j int) { q[i], q[j] = q[j], q[i] })
	}
	for _, m := range q {
		n := s.nodes[m.to]
		if n == nil || !n.up {
			continue
		}
		msg, err := Decode(m.data)
		if err != nil {
			s.t.Fatalf("%s -> %s: decode: %v", m.from, m.to, err)
		}
		if err := n.r.Receive(msg, s.now); err != nil {
			s.t.Fatalf("%s <- %s: receive: %v", m.to, m.from, err)
		}
	}
}

// antiEntropy has every live node start a digest with every reachable peer.
func (s *simNet) antiEntropy() {
	for _, name := range s.names {
		n := s.nodes[name]
		if !n.up {
			continue
		}
		for _, p := range n.r.Peers() {
			if s.reachable(name, p.Name) {
				n.r.StartDigest(p.Name, s.now)
			}
		}
	}
}

// digests returns each live node's digests, registry digest and floor.
func (s *simNet) digests() map[string]string {
	out := map[string]string{}
	for _, name := range s.names {
		n := s.nodes[name]
		if !n.up {
			continue
		}
		d, reg := n.r.Digest(s.now, nil)
		out[name] = fmt.Sprintf("%x/%x/%d", d, reg, n.r.Index().Floor())
	}
	return out
}

func (s *simNet) converged() bool {
	var first string
	i := 0
	for _, d := range s.digests() {
		if i == 0 {
			first = d
		} else if d != first {
			return false
		}
		i++
	}
	return true
}

// settle runs rounds (with anti-entropy every few rounds) until the live
// nodes converge; it returns the rounds it took, or fails after max.
func (s *simNet) settle(max int) int {
	s.t.Helper()
	for i := 1; i <= max; i++ {
		if i%5 == 0 {
			s.antiEntropy()
		}
		s.round()
		if i%5 == 4 && s.converged() {
			return i
		}
	}
	s.t.Fatalf("no convergence after %d rounds: %v", max, s.digests())
	return 0
}

// noneExpired checks that no live node holds a claim expired at now.
func (s *simNet) noneExpired() {
	s.t.Helper()
	for _, name := range s.names {
		n := s.nodes[name]
		if !n.up {
			continue
		}
		var res tree.Result
		_ = res
		n.r.Index().Range(s.now, func(c *tree.Claim) bool {
			if c.Expires <= s.now {
				s.t.Fatalf("%s holds a claim expired at %d: %+v", name, s.now, *c)
			}
			return true
		})
	}
}

// prompt returns a deterministic token prompt of n blocks for an id, whose
// first shared blocks come from a common family.
func prompt(id, family, blocks, shared int) []uint32 {
	r := rand.New(rand.NewPCG(uint64(family), 7))
	toks := make([]uint32, 16*blocks)
	for i := range toks {
		if i == 16*shared {
			r = rand.New(rand.NewPCG(uint64(id)+1000, 9))
		}
		toks[i] = r.Uint32()
	}
	return toks
}

func (s *simNet) learn(node string, toks []uint32, backend string, ttl int64) {
	s.t.Helper()
	n := s.node(node)
	id, err := n.r.Index().EnsureBackend(backend)
	if err != nil {
		s.t.Fatal(err)
	}
	var ch tree.Chain
	n.r.Index().Keyer().Tokens(&ch, tree.NewSeed("m", "", ""), toks, []int{len(toks) / 2})
	n.r.Learn(&ch, id, ttl, s.now)
}

// depth is node's matched depth (blocks) for a prompt on a backend.
func (s *simNet) depth(node string, toks []uint32, backend string) int32 {
	n := s.node(node)
	id, ok := n.r.Index().BackendByName(backend)
	if !ok {
		return 0
	}
	var ch tree.Chain
	n.r.Index().Keyer().Tokens(&ch, tree.NewSeed("m", "", ""), toks, nil)
	var res tree.Result
	n.r.Index().Lookup(&ch, s.now, &res)
	return res.Depth(id)
}

func sortedContents(ix *tree.Index, now int64) []string {
	var out []string
	reg := ix.Backends(nil)
	ix.Range(now, func(c *tree.Claim) bool {
		out = append(out, fmt.Sprintf("%x/%s/%d/%d/%d/%d", c.Key, reg[c.Backend].Name, c.Gen, c.Time, c.Expires, c.Origin))
		return true
	})
	slices.Sort(out)
	return out
}

var fmtSprintf = fmt.Sprintf
