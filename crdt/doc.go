// Package crdt owns kvmesh's replicated claim state and the protocol that
// keeps replicas identical: stamping changes with a hybrid logical clock
// (tree.Clock), clamping peers' clocks, the join of claim states
// (per (key, backend) the greater (generation, expiry, timestamp, origin)
// wins; see tree.Claim.Dominates for why expiry comes before the timestamp),
// the backend registry (greater (generation, timestamp, origin) wins),
// delta buffers with per-peer acknowledgements, full-state transfer in chunks,
// bucketed digests for anti-entropy, and the versioned CBOR wire encoding.
//
// Protocol in brief. Every local change gets a sequence number in a delta
// buffer. To each peer a replica sends the join of the changes the peer has
// not acknowledged (a few messages in flight; go-back retransmission after a
// timeout); acknowledgements are cumulative and ride on every message. A new
// peer, a restarted one (a new incarnation) or one the buffer no longer
// covers gets the full state, in chunks of key ranges, each acknowledged.
// Changes received from a peer are joined in; only their novel part is kept
// and, with Relay on, forwarded to the other peers, never back. Periodic
// digests (per key-range bucket sums of claim hashes) find the buckets two
// replicas disagree on after a partition, and only those are exchanged.
// Eviction raises a floor that travels with every batch (see package tree);
// a floor from a peer whose clock runs ahead is read on its clock
// (Replica.raiseFloor).
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
