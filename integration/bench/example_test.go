package bench_test

import (
	"context"
	"fmt"

	"github.com/kvmesh/kvmesh/integration/bench"
	"github.com/kvmesh/kvmesh/integration/sim"
	"github.com/kvmesh/kvmesh/integration/workload"
)

// Arms are written as policy[:nodes[:mesh|local]], plus the oracle.
func ExampleParseArms() {
	arms, err := bench.ParseArms("round_robin,kvmesh,kvmesh+words,kvmesh:8:mesh,kvmesh:3:local,oracle")
	if err != nil {
		panic(err)
	}
	for _, a := range arms {
		fmt.Printf("%-20s policy=%s nodes=%d\n", a.Name, a.Policy, a.Nodes)
	}
	// Output:
	// round_robin          policy=round_robin nodes=1
	// kvmesh               policy=kvmesh nodes=1
	// kvmesh+words         policy=kvmesh nodes=1
	// kvmesh x8 mesh       policy=kvmesh nodes=8
	// kvmesh x3 local      policy=kvmesh nodes=3
	// oracle               policy=oracle nodes=1
}

// A whole experiment in miniature: two arms, a fresh simulated fleet for
// each, hit rates from the backends' own counters.
func ExampleRun() {
	o := workload.DefaultSharedPrefixOptions()
	o.Groups, o.PromptsPerGroup, o.SystemPromptTokens, o.QuestionTokens, o.OutputTokens, o.Rate = 2, 4, 256, 8, 2, 0
	w, err := workload.SharedPrefix(o)
	if err != nil {
		panic(err)
	}
	sc := sim.DefaultConfig()
	sc.TimeScale = 1000 // a simulated second takes a millisecond
	sc.CacheBlocks = 512

	cfg := bench.DefaultConfig()
	cfg.Fleet = bench.SimFleet(2, sc)
	cfg.TimeScale = sc.TimeScale
	cfg.Replay.Mode, cfg.Replay.Concurrency = bench.ClosedLoop, 1
	cfg.Repeats = 1
	cfg.Arms, _ = bench.ParseArms("round_robin,kvmesh")
	rep, err := bench.Run(context.Background(), cfg, w)
	if err != nil {
		panic(err)
	}
	for _, run := range rep.Runs {
		fmt.Printf("%s: %d requests, %d prompt tokens counted by the fleet, hits > 0: %v\n",
			run.Arm, run.OK, run.Queries, run.Hits > 0)
	}
	// Output:
	// round_robin: 8 requests, 2152 prompt tokens counted by the fleet, hits > 0: true
	// kvmesh: 8 requests, 2152 prompt tokens counted by the fleet, hits > 0: true
}

// A lead held in every one of 3 repeats is still within chance (p = 0.25);
// 6 of 6 is not (p = 0.031); 5 of 8 says nothing.
func ExampleSignTestP() {
	fmt.Printf("%.3f %.3f %.3f\n", bench.SignTestP(3, 0), bench.SignTestP(6, 0), bench.SignTestP(5, 3))
	// Output: 0.250 0.031 0.727
}
