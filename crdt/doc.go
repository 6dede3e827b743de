// Package crdt owns kvmesh's replicated claim state and the protocol that
// keeps replicas identical: a hybrid logical clock, the join of claim states
// (greater (timestamp, origin) wins per (key, backend)), the backend registry,
// delta buffers with per-peer acknowledgements, full-state transfer in chunks,
// bucketed digests for anti-entropy, and the versioned CBOR wire encoding.
//
// It works in the manner of etcd's raft: it is a pure state machine. The
// caller passes the time in, asks what to send to whom, sends it, and reports
// what arrived and what was acknowledged. There are no goroutines, sockets,
// wall-clock reads or logging here.
//
// crdt may import the standard library, package tree (whose Index holds the
// claims, so a node keeps one copy of them) and github.com/fxamacker/cbor/v2.
// It must not import mesh, transport, router or cmd.
package crdt
