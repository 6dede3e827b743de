// Package integration holds what exercises kvmesh as a whole: multi-node and
// end-to-end tests, and (in subpackages) the simulated vLLM-like backend
// fleet, the workload generators and the benchmark harness.
//
// Tests here may import any kvmesh package. Non-test code in subpackages must
// not be imported by kvmesh's own packages (tree, crdt, transport, mesh,
// router).
package integration
