package tree_test

import (
	"fmt"

	"github.com/kvmesh/kvmesh/tree"
)

// A router learns that a backend served a conversation, then finds that
// backend again for the conversation's next turn.
func Example() {
	ix, err := tree.New(tree.DefaultConfig())
	if err != nil {
		panic(err)
	}
	a, _ := ix.EnsureBackend("http://10.0.0.1:8000")
	b, _ := ix.EnsureBackend("http://10.0.0.2:8000")
	_ = b

	seed := tree.NewSeed("llama-3-8b", "tenant-1", "")
	turn1 := []byte("<system>You are a helpful assistant. Answer briefly and cite sources.</system><user>What is a KV cache, and why does prefix caching help chat workloads?</user>")
	var ch tree.Chain
	ix.Keyer().Bytes(&ch, seed, turn1, []int{72, len(turn1)})

	now := int64(1_700_000_000_000) // Unix ms, passed in: tree never reads the clock
	changed := ix.Learn(&ch, a, tree.MakeTimestamp(now, 0), 600_000, tree.NodeIDOf("router-1"), now, nil)
	fmt.Println("claims learned:", len(changed))

	turn2 := append(append([]byte{}, turn1...), "<assistant>It stores attention keys and values.</assistant><user>And eviction?</user>"...)
	ix.Keyer().Bytes(&ch, seed, turn2, nil)
	var res tree.Result
	ix.Lookup(&ch, now+1000, &res)
	for _, m := range res.Matches {
		name, _ := ix.Backend(m.Backend)
		fmt.Printf("%s holds %d of %d bytes\n", name.Name, ch.UnitsAt(int(m.Blocks)), ch.Units)
	}
	// Output:
	// claims learned: 2
	// http://10.0.0.1:8000 holds 128 of 244 bytes
}
