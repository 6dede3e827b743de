// Package tree is kvmesh's prefix-claim index: it answers "which backend most
// likely holds the longest prefix of this prompt in its KV cache?".
//
// It owns three things:
//
//   - Keys: a prompt (token ids, or the bytes of a canonical rendering) is cut
//     into fixed-size blocks and each block gets a chained 64-bit key,
//     k_i = H(k_{i-1}, block_i), started from a Seed derived from (model,
//     tenant or cache_salt, adapter). A key therefore names the whole prefix
//     before it, and different seeds never share keys.
//   - Learning positions: where a request leaves claims (every message end
//     aligned down to a block, checkpoints at absolute positions inside long
//     messages, the last full block).
//   - Timestamps: a hybrid logical clock (Clock) whose readings order claims
//     across nodes; the caller passes the wall time in.
//   - The Index: a bounded table of claims (key, backend) -> (timestamp,
//     expiry, origin, backend generation) with lock-free lookups, join
//     ("greater (timestamp, origin) wins") on insert, expiry by absolute time,
//     eviction of the oldest timestamps through a monotone floor, and O(1)
//     invalidation of a whole backend through its generation.
//
// The Index is the single copy of the claims on a node: package crdt
// replicates it, package router reads it.
//
// tree is pure: no goroutines, no I/O, no wall clock (time is an argument), no
// logging. It must import only the standard library. It must not import any
// other kvmesh package.
package tree
