package mesh_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/kvmesh/kvmesh/mesh"
	"github.com/kvmesh/kvmesh/mesh/meshtest"
	"github.com/kvmesh/kvmesh/transport"
	"github.com/kvmesh/kvmesh/tree"
)

// Two router nodes in one process: replication over an in-memory network
// (transport.NewQUIC in production), gossip over meshtest's in-memory
// network (serf's own UDP/TCP on BindAddr:BindPort in production). A claim
// learned on router-a becomes routable on router-b.
func Example() {
	replication := transport.NewMemNetwork(1)
	defer replication.Close()
	gossip := meshtest.NewMemberNetwork(7946)

	start := func(name string, seeds ...string) (*mesh.Node, *tree.Index) {
		ix, _ := tree.New(tree.DefaultConfig())
		ep, _ := replication.Endpoint(name)
		mt, _ := gossip.Transport(name)
		cfg := mesh.DefaultConfig()
		cfg.Name = name
		cfg.Seeds = seeds  // --join
		cfg.DevMode = true // production: cfg.GossipKey = <32 random bytes, base64>
		cfg.Membership = mesh.LocalTimings()
		node, err := mesh.New(cfg, mesh.Deps{Index: ix, Transport: ep, MemberTransport: mt})
		if err != nil {
			panic(err)
		}
		if err := node.Start(context.Background()); err != nil {
			panic(err)
		}
		return node, ix
	}
	a, ixA := start("router-a")
	b, ixB := start("router-b", gossip.Addr("router-a"))
	defer a.Close()
	defer b.Close()

	// router-a routed a request to a backend and learns that it holds the
	// prompt's prefixes (the router calls Learn through its Learner).
	prompt := []byte("<system>You are a helpful assistant.</system><user>Summarize the attached report in three bullet points, please.</user>")
	seed := tree.NewSeed("llama-3-8b", "tenant-1", "")
	backend, _ := ixA.EnsureBackend("http://10.0.0.1:8000")
	var ch tree.Chain
	ixA.Keyer().Bytes(&ch, seed, prompt, []int{len(prompt)})
	a.Learn(&ch, backend, 10*time.Minute)

	// router-b, which never saw the request, routes the prompt there.
	var res tree.Result
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		ixB.Keyer().Bytes(&ch, seed, prompt, nil)
		if ixB.Lookup(&ch, time.Now().UnixMilli(), &res); res.Deepest > 0 {
			break
		}
	}
	for _, m := range res.Matches {
		e, _ := ixB.Backend(m.Backend)
		fmt.Printf("router-b: %s holds %d of %d bytes\n", e.Name, ch.UnitsAt(int(m.Blocks)), ch.Units)
	}
	_ = b.Leave()
	// Output:
	// router-b: http://10.0.0.1:8000 holds 64 of 119 bytes
}

// FormatMembers prints the members of an /admin/mesh view, as `kvmesh
// members` does.
func ExampleFormatMembers() {
	members := []mesh.Member{
		{Name: "router-a", Addr: "10.0.0.1:7946", QUICAddr: "10.0.0.1:7947", Status: "alive", Protocol: 1, Self: true},
		{Name: "router-b", Addr: "10.0.0.2:7946", QUICAddr: "10.0.0.2:7947", Status: "alive", Protocol: 1, Peer: true},
		{Name: "router-c", Addr: "10.0.0.3:7946", QUICAddr: "10.0.0.3:7947", Status: "failed", Protocol: 1},
	}
	_ = mesh.FormatMembers(os.Stdout, members)
	// Output:
	//   NAME      ADDRESS        QUIC           STATUS  HEARD  PROTOCOL  TAGS
	// * router-a  10.0.0.1:7946  10.0.0.1:7947  alive   -      1         -
	// + router-b  10.0.0.2:7946  10.0.0.2:7947  alive   -      1         -
	//   router-c  10.0.0.3:7946  10.0.0.3:7947  failed  -      1         -
	// (* this node, + a member it replicates claims with; HEARD: its last replication message)
}
