package mesh

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/kvmesh/kvmesh/mesh/meshtest"
	"github.com/kvmesh/kvmesh/transport"
	"github.com/kvmesh/kvmesh/tree"
)

var debugLog = flag.Bool("mesh.log", false, "log mesh nodes at debug level to stderr")

// testCluster runs mesh nodes in one process: replication over a
// transport.MemNetwork, gossip over a meshtest.MemberNetwork.
type testCluster struct {
	t     testing.TB
	net   *transport.MemNetwork
	mnet  *meshtest.MemberNetwork
	icfg  tree.Config
	mod   func(*Config)
	seeds []string
	res   Resolver // nil: net.DefaultResolver (seeds are IPs)
	// newTransport, if set, makes each node's replication transport
	// (instead of an endpoint on net).
	newTransport func(name string) (Transport, error)
	// now, if set, is every node's clock (Deps.Now).
	now func() time.Time
	// logs, if set, takes every node's log lines (debug and up).
	logs io.Writer

	mu    sync.Mutex
	nodes map[string]*testNode
}

type testNode struct {
	name string
	n    *Node
	ix   *tree.Index
	ep   *transport.MemEndpoint
	mt   *meshtest.MemberTransport
	reg  *prometheus.Registry
	up   bool
}

// testConfig is a node configuration for in-process clusters: dev mode,
// fast membership, quick join retries and anti-entropy.
func testConfig(name string) Config {
	cfg := DefaultConfig()
	cfg.Name = name
	cfg.DevMode = true
	cfg.Membership = LocalTimings()
	cfg.JoinBackoffMin = 50 * time.Millisecond
	cfg.JoinBackoffMax = 500 * time.Millisecond
	cfg.AntiEntropyInterval = time.Second
	return cfg
}

// lanProbes probes as on a LAN: dozens of race-instrumented nodes on two
// cores cannot answer LocalTimings' 200 ms probes reliably, and members
// flapping between alive and failed would test serf, not the mesh. For
// tests that kill no one.
func lanProbes(cfg *Config) {
	cfg.Membership.ProbeInterval = time.Second
	cfg.Membership.ProbeTimeout = 500 * time.Millisecond
	cfg.Membership.SuspicionMult = 4
}

func testIndexConfig() tree.Config {
	icfg := tree.DefaultConfig()
	icfg.Capacity = 1 << 12
	return icfg
}

func testLogger() zerolog.Logger {
	if *debugLog {
		return zerolog.New(zerolog.ConsoleWriter{Out: os.Stderr}).Level(zerolog.DebugLevel).With().Timestamp().Logger()
	}
	return zerolog.Nop()
}

func (c *testCluster) logger() zerolog.Logger {
	if c.logs != nil {
		return zerolog.New(c.logs).Level(zerolog.DebugLevel)
	}
	return testLogger()
}

// newTestCluster makes an empty cluster; every node it starts joins through
// the first node's gossip address ("n00"). mod, if set, adjusts each
// node's configuration.
func newTestCluster(t testing.TB, mod func(*Config)) *testCluster {
	c := &testCluster{
		t: t, net: transport.NewMemNetwork(1), mnet: meshtest.NewMemberNetwork(7946),
		icfg: testIndexConfig(), mod: mod, nodes: map[string]*testNode{},
	}
	c.seeds = []string{c.mnet.Addr(nodeName(0))}
	t.Cleanup(func() {
		start := time.Now()
		defer func() { t.Logf("cluster closed in %v", time.Since(start).Round(time.Millisecond)) }()
		c.mu.Lock()
		nodes := make([]*testNode, 0, len(c.nodes))
		for _, tn := range c.nodes {
			nodes = append(nodes, tn)
		}
		c.mu.Unlock()
		var wg sync.WaitGroup
		for _, tn := range nodes {
			wg.Add(1)
			go func() { defer wg.Done(); _ = tn.n.Close() }()
		}
		wg.Wait()
		_ = c.net.Close()
	})
	return c
}

func nodeName(i int) string { return fmt.Sprintf("n%02d", i) }

// start starts (or restarts, with an empty index) the node called name.
func (c *testCluster) start(name string) *testNode {
	c.t.Helper()
	ix, err := tree.New(c.icfg)
	if err != nil {
		c.t.Fatal(err)
	}
	var tr Transport
	var ep *transport.MemEndpoint
	if c.newTransport != nil {
		tr, err = c.newTransport(name)
	} else {
		ep, err = c.net.Endpoint(name)
		tr = ep
	}
	if err != nil {
		c.t.Fatal(err)
	}
	mt, err := c.mnet.Transport(name)
	if err != nil {
		c.t.Fatal(err)
	}
	cfg := testConfig(name)
	cfg.Seeds = c.seeds
	if c.mod != nil {
		c.mod(&cfg)
	}
	reg := prometheus.NewRegistry()
	n, err := New(cfg, Deps{Index: ix, Transport: tr, MemberTransport: mt, Registerer: reg, Logger: c.logger(), Resolver: c.res, Now: c.now})
	if err != nil {
		c.t.Fatal(err)
	}
	if err := n.Start(context.Background()); err != nil {
		c.t.Fatal(err)
	}
	tn := &testNode{name: name, n: n, ix: ix, ep: ep, mt: mt, reg: reg, up: true}
	c.mu.Lock()
	if old := c.nodes[name]; old != nil && old.up {
		c.mu.Unlock()
		c.t.Fatalf("%s is already running", name)
	}
	c.nodes[name] = tn
	c.mu.Unlock()
	return tn
}

// startN starts nodes n00 .. n(k-1).
func (c *testCluster) startN(k int) {
	c.t.Helper()
	for i := 0; i < k; i++ {
		c.start(nodeName(i))
	}
}

// kill stops a node abruptly: no graceful leave; its transports close.
func (c *testCluster) kill(name string) {
	c.t.Helper()
	tn := c.node(name)
	if err := tn.n.Close(); err != nil {
		c.t.Fatal(err)
	}
	c.mu.Lock()
	tn.up = false
	c.mu.Unlock()
}

func (c *testCluster) node(name string) *testNode {
	c.t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	tn := c.nodes[name]
	if tn == nil {
		c.t.Fatalf("no node %s", name)
	}
	return tn
}

// live returns the running nodes, sorted by name.
func (c *testCluster) live() []*testNode {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*testNode
	for _, tn := range c.nodes {
		if tn.up {
			out = append(out, tn)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

// waitFor polls cond until it holds or timeout passes.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	deadline := start.Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return time.Since(start)
}

// waitMesh waits until every live node replicates with every other one
// (full mesh), or with its overlay neighbours when overlay is true.
func (c *testCluster) waitMesh(timeout time.Duration) time.Duration {
	c.t.Helper()
	defer func() {
		if c.t.Failed() {
			for _, tn := range c.live() {
				alive := 0
				for _, m := range tn.n.Members() {
					if m.Status == "alive" {
						alive++
					}
				}
				c.t.Logf("%s: %d members (%d alive), %d peers", tn.name, len(tn.n.Members()), alive, len(tn.n.view.Load().peers))
			}
		}
	}()
	return waitFor(c.t, timeout, "membership", func() bool {
		live := c.live()
		names := make([]string, len(live))
		for i, tn := range live {
			names[i] = tn.name
		}
		for _, tn := range live {
			v := tn.n.view.Load()
			want := fullMesh(tn.name, names)
			if wantOverlay(v.overlay, len(names), tn.n.cfg.RelayThreshold) {
				want = overlayNeighbours(tn.name, names, tn.n.cfg.RingNeighbours)
			}
			if strings.Join(v.peers, ",") != strings.Join(want, ",") {
				return false
			}
		}
		return true
	})
}

// digests returns each live node's state digest, all counting the claims
// live at the same instant.
func (c *testCluster) digests() map[string]string {
	out := map[string]string{}
	now := time.Now().UnixMilli()
	for _, tn := range c.live() {
		out[tn.name] = tn.n.stateDigestAt(now)
	}
	return out
}

func sameDigests(d map[string]string) bool {
	first := ""
	for _, v := range d {
		if first == "" {
			first = v
		} else if v != first {
			return false
		}
	}
	return true
}

// waitConverged waits until every live node holds the same state.
func (c *testCluster) waitConverged(timeout time.Duration) time.Duration {
	c.t.Helper()
	var last map[string]string
	start := time.Now()
	for {
		last = c.digests()
		if sameDigests(last) {
			return time.Since(start)
		}
		if time.Since(start) > timeout {
			c.dump(last)
			c.t.Fatalf("no convergence after %v: %v", timeout, last)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// dump logs the protocol state of the nodes whose digest is not the most
// common one, to diagnose a failed convergence.
func (c *testCluster) dump(digests map[string]string) {
	count := map[string]int{}
	for _, d := range digests {
		count[d]++
	}
	common := ""
	for d, k := range count {
		if k > count[common] {
			common = d
		}
	}
	for _, tn := range c.live() {
		if digests[tn.name] == common {
			continue
		}
		tn.n.mu.Lock()
		peers := tn.n.rep.Peers()
		tn.n.mu.Unlock()
		c.t.Logf("%s: %d claims, view %v, stats %+v", tn.name, tn.ix.Len(), tn.n.view.Load().peers, tn.n.stats())
		for _, p := range peers {
			c.t.Logf("  peer %+v", p)
		}
		c.t.Logf("  send drops queue_full=%v send_error=%v decode=%v unknown=%v", counterValue(tn.n.m.sendDrops.WithLabelValues("queue_full")),
			counterValue(tn.n.m.sendDrops.WithLabelValues("send_error")), counterValue(tn.n.m.decodeErrors),
			counterValue(tn.n.m.unknownSenders.WithLabelValues("not_member")))
	}
}

// prompt is a deterministic byte-mode prompt of blocks 64-byte blocks.
type prompt struct {
	text []byte
	ends []int
}

func randomPrompt(rng *rand.Rand, blocks int) prompt {
	p := prompt{text: make([]byte, blocks*64+17)}
	for i := range p.text {
		p.text[i] = byte('a' + rng.IntN(26))
	}
	p.ends = []int{len(p.text) / 2, len(p.text)}
	return p
}

var testSeed = tree.NewSeed("m", "tenant", "")

// learn has node tn learn that backend holds p, for ttl.
func (tn *testNode) learn(t testing.TB, p prompt, backend string, ttl time.Duration) {
	t.Helper()
	id, err := tn.ix.EnsureBackend(backend)
	if err != nil {
		t.Fatal(err)
	}
	var ch tree.Chain
	tn.ix.Keyer().Bytes(&ch, testSeed, p.text, p.ends)
	tn.n.Learn(&ch, id, ttl)
}

// depth is tn's matched depth (blocks) for p on backend.
func (tn *testNode) depth(p prompt, backend string) int32 {
	id, ok := tn.ix.BackendByName(backend)
	if !ok {
		return 0
	}
	var ch tree.Chain
	tn.ix.Keyer().Bytes(&ch, testSeed, p.text, nil)
	var res tree.Result
	tn.ix.Lookup(&ch, time.Now().UnixMilli(), &res)
	return res.Depth(id)
}

// learnEveryBlock learns p on backend for ttl at every block depth, as an
// engine's KV events claim blocks (not only at learn depths), and returns
// its keys.
func (tn *testNode) learnEveryBlock(p prompt, backend string, ttl time.Duration) []tree.Key {
	id, _ := tn.ix.EnsureBackend(backend)
	var ch tree.Chain
	tn.ix.Keyer().Bytes(&ch, testSeed, p.text, nil)
	ch.Learn = ch.Learn[:0]
	for d := 1; d <= len(ch.Keys); d++ {
		ch.Learn = append(ch.Learn, int32(d))
	}
	tn.n.Learn(&ch, id, ttl)
	return append([]tree.Key(nil), ch.Keys...)
}

// fullDepth is the depth a learned prompt matches at: its last full block.
func fullDepth(p prompt) int32 { return int32(len(p.text) / 64) }
