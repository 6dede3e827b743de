package mesh

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/kvmesh/kvmesh/transport"
	"github.com/kvmesh/kvmesh/tree"
)

func TestParseSeed(t *testing.T) {
	cases := []struct {
		in   string
		want seed
		err  string
	}{
		{in: "10.0.0.5:7946", want: seed{seedHost, "10.0.0.5", 7946}},
		{in: "[fd00::5]:8000", want: seed{seedHost, "fd00::5", 8000}},
		{in: "fd00::5", want: seed{seedHost, "fd00::5", 7000}},
		{in: "[fd00::5]", want: seed{seedHost, "fd00::5", 7000}},
		{in: "kvmesh-0.kvmesh:7946", want: seed{seedHost, "kvmesh-0.kvmesh", 7946}},
		{in: " kvmesh.default.svc. ", want: seed{seedHost, "kvmesh.default.svc", 7000}},
		{in: "_serf._tcp.kvmesh.default.svc.cluster.local.", want: seed{kind: seedSRV, host: "_serf._tcp.kvmesh.default.svc.cluster.local"}},
		{in: "", err: "empty"},
		{in: "host:0", err: "bad port"},
		{in: "host:99999", err: "bad port"},
		{in: "host:http", err: "bad port"},
		{in: ":7946", err: "bad host"},
		{in: "_serf._tcp.x:7946", err: "SRV name carries no port"},
		{in: "http://host:80", err: "not host:port"},
		{in: "a b:1", err: "bad host"},
	}
	for _, c := range cases {
		got, err := parseSeed(c.in, 7000)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("parseSeed(%q) = %+v, %v; want an error containing %q", c.in, got, err, c.err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("parseSeed(%q) = %+v, %v; want %+v", c.in, got, err, c.want)
		}
	}
}

// fakeResolver is a DNS with records that tests change at will.
type fakeResolver struct {
	mu    sync.Mutex
	hosts map[string][]string
	srv   map[string][]*net.SRV
	calls int
}

func newFakeResolver() *fakeResolver {
	return &fakeResolver{hosts: map[string][]string{}, srv: map[string][]*net.SRV{}}
}

func (r *fakeResolver) set(host string, ips ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.hosts[host] = ips
}

func (r *fakeResolver) setSRV(name string, recs ...*net.SRV) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.srv[name] = recs
}

var errNXDomain = errors.New("no such host")

func (r *fakeResolver) LookupHost(_ context.Context, host string) ([]string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls++
	if ips := r.hosts[host]; len(ips) > 0 {
		return slices.Clone(ips), nil
	}
	return nil, errNXDomain
}

func (r *fakeResolver) LookupSRV(_ context.Context, service, proto, name string) (string, []*net.SRV, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls++
	if service != "" || proto != "" {
		return "", nil, errors.New("fake resolver: service and proto are not used by mesh")
	}
	if recs := r.srv[name]; len(recs) > 0 {
		return name + ".", recs, nil
	}
	return "", nil, errNXDomain
}

func TestResolveSeeds(t *testing.T) {
	r := newFakeResolver()
	r.set("kvmesh.ns.svc", "10.0.0.2", "10.0.0.1")
	r.set("kvmesh-0.kvmesh.ns.svc", "10.0.0.1")
	r.set("kvmesh-1.kvmesh.ns.svc", "10.0.0.3", "fd00::3")
	r.setSRV("_serf._tcp.kvmesh.ns.svc", &net.SRV{Target: "kvmesh-0.kvmesh.ns.svc.", Port: 8301}, &net.SRV{Target: "kvmesh-1.kvmesh.ns.svc.", Port: 8301},
		&net.SRV{Target: "gone.kvmesh.ns.svc.", Port: 8301})
	got, err := resolveSeeds(context.Background(), r, []string{
		"kvmesh.ns.svc", "kvmesh.ns.svc:9000", "10.0.0.9:7946", "_serf._tcp.kvmesh.ns.svc", "10.0.0.1:7946",
	}, 7946)
	if err != nil {
		t.Fatalf("resolveSeeds: %v (one SRV target failing must not fail the seed)", err)
	}
	want := []string{"10.0.0.1:7946", "10.0.0.1:8301", "10.0.0.1:9000", "10.0.0.2:7946", "10.0.0.2:9000", "10.0.0.3:8301", "10.0.0.9:7946", "[fd00::3]:8301"}
	if !slices.Equal(got, want) {
		t.Fatalf("resolveSeeds =\n%v\nwant\n%v", got, want)
	}

	// A name that does not resolve is reported; the others still count.
	got, err = resolveSeeds(context.Background(), r, []string{"missing.ns.svc:7946", "10.0.0.9:7946", "_none._tcp.x"}, 7946)
	if err == nil || !strings.Contains(err.Error(), "missing.ns.svc") || !strings.Contains(err.Error(), "_none._tcp.x") {
		t.Fatalf("want errors naming both failed seeds, got %v", err)
	}
	if !slices.Equal(got, []string{"10.0.0.9:7946"}) {
		t.Fatalf("resolveSeeds = %v, want the one that resolved", got)
	}
}

// TestJoinBeforeSeedsExist: nodes started before their seeds resolve or
// answer keep retrying in the background and end up in one mesh: one joins
// through a headless-Service-style A record, one through SRV records.
func TestJoinBeforeSeedsExist(t *testing.T) {
	r := newFakeResolver()
	c := newTestCluster(t, nil)
	c.res = r
	c.seeds = []string{"kvmesh.test"} // port: the node's own BindPort (7946)
	n1 := c.start("n01")              // the name does not resolve yet
	waitFor(t, 20*time.Second, "a few failed join attempts", func() bool {
		return counterValue(n1.n.m.joins.WithLabelValues("no_address")) >= 2
	})

	// n00 appears, published under the name; both now resolve to n00 and n01.
	ip := func(name string) string { h, _, _ := net.SplitHostPort(c.mnet.Addr(name)); return h }
	r.set("kvmesh.test", ip("n00"), ip("n01"))
	n0 := c.start("n00")
	c.waitMesh(time.Minute)

	// n02 finds them through SRV records only.
	c.seeds = []string{"_serf._tcp.kvmesh.test"}
	r.setSRV("_serf._tcp.kvmesh.test", &net.SRV{Target: "n00.kvmesh.test.", Port: 7946}, &net.SRV{Target: "n01.kvmesh.test.", Port: 7946})
	r.set("n00.kvmesh.test", ip("n00"))
	r.set("n01.kvmesh.test", ip("n01"))
	n2 := c.start("n02")
	c.waitMesh(time.Minute)
	// The mesh can form while n02's Join call is still returning: wait for
	// the count rather than read it at once.
	waitFor(t, 10*time.Second, "n02's join through SRV to be counted", func() bool {
		return counterValue(n2.n.m.joins.WithLabelValues("ok")) >= 1
	})
	if got := counterValue(n2.n.m.joins.WithLabelValues("ok")); got != 1 {
		t.Errorf("n02 joined %v times through SRV, want 1", got)
	}
	// Likewise for the first two, which joined by name.
	waitFor(t, 10*time.Second, "n00 or n01 to count a successful join", func() bool {
		return counterValue(n1.n.m.joins.WithLabelValues("ok")) == 1 || counterValue(n0.n.m.joins.WithLabelValues("ok")) == 1
	})

	// Once in the mesh, join loops stop: no more lookups.
	waitFor(t, 20*time.Second, "join loops to stop", func() bool {
		r.mu.Lock()
		before := r.calls
		r.mu.Unlock()
		time.Sleep(800 * time.Millisecond) // more than JoinBackoffMax in tests
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.calls == before
	})

	rng := newRand(21)
	ls := c.learnRandom(rng, 20)
	c.waitConverged(time.Minute)
	c.checkRoutable(ls)
}

// TestJoinSkipsSelf: a node whose seeds resolve only to itself (the first
// pod behind a headless Service) does not count joining itself as joining
// the mesh: it keeps waiting, and is joined by the next node.
//
// A node that cannot join routes alone: from its third failed attempt it
// says so once at warn level (a node given another gossip key logged
// nothing above debug), then only at debug for the next five minutes.
func TestJoinSkipsSelf(t *testing.T) {
	c := newTestCluster(t, nil) // every node's seed is n00's own address
	logs := &lockedBuffer{}
	c.logs = logs
	n0 := c.start("n00")
	waitFor(t, 20*time.Second, "a few join attempts", func() bool {
		return counterValue(n0.n.m.joins.WithLabelValues("no_address")) >= 4
	})
	if warns := logs.count(`"level":"warn"`, "no seed address"); warns != 1 {
		t.Fatalf("%d warn lines after 4 failed joins, want 1:\n%s", warns, logs.String())
	}
	if debugs := logs.count(`"level":"debug"`, "no seed address"); debugs < 3 {
		t.Fatalf("%d debug lines after 4 failed joins, want the other 3:\n%s", debugs, logs.String())
	}
	if ok := counterValue(n0.n.m.joins.WithLabelValues("ok")); ok != 0 {
		t.Fatalf("n00 joined %v times with only itself to join", ok)
	}
	c.start("n01")
	c.waitMesh(time.Minute)
}

// TestMockNetworkTransport: memberlist's own MockNetwork plugs in as the
// gossip transport too (it suits fixed clusters: it cannot grow while nodes
// run, and a send to a node that is gone blocks; meshtest.MemberNetwork
// has neither limit).
func TestMockNetworkTransport(t *testing.T) {
	var mock memberlist.MockNetwork
	mts := []*memberlist.MockTransport{mock.NewTransport("m0"), mock.NewTransport("m1")} // before any node runs
	replication := transport.NewMemNetwork(1)
	defer replication.Close()
	var nodes []*Node
	var ixs []*tree.Index
	for i, mt := range mts {
		name := fmt.Sprintf("m%d", i)
		ix, _ := tree.New(testIndexConfig())
		ep, _ := replication.Endpoint(name)
		cfg := testConfig(name)
		if i > 0 {
			ip, port, _ := mts[0].FinalAdvertiseAddr("", 0)
			cfg.Seeds = []string{net.JoinHostPort(ip.String(), strconv.Itoa(port))}
		}
		n, err := New(cfg, Deps{Index: ix, Transport: ep, MemberTransport: mt})
		if err != nil {
			t.Fatal(err)
		}
		if err := n.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		nodes, ixs = append(nodes, n), append(ixs, ix)
	}
	defer func() {
		for _, n := range nodes {
			_ = n.Leave()
			_ = n.Close()
		}
	}()
	p := randomPrompt(newRand(8), 10)
	tn := &testNode{n: nodes[0], ix: ixs[0]}
	tn.learn(t, p, backends[0], time.Hour)
	other := &testNode{n: nodes[1], ix: ixs[1]}
	waitFor(t, 20*time.Second, "the claim to reach m1 over MockNetwork gossip", func() bool {
		return other.depth(p, backends[0]) == fullDepth(p)
	})
}

// lockedBuffer is a goroutine-safe log sink.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// count is how many lines hold every one of subs.
func (l *lockedBuffer) count(subs ...string) int {
	n := 0
	for _, line := range strings.Split(l.String(), "\n") {
		ok := line != ""
		for _, s := range subs {
			ok = ok && strings.Contains(line, s)
		}
		if ok {
			n++
		}
	}
	return n
}
