// Package transport moves opaque messages between router nodes. It owns one
// small interface (Transport), its QUIC implementation (quic-go, TLS 1.3 with
// mutual TLS against the cluster's CA), certificate helpers for dev and test
// clusters, and an in-memory network with fault injection (drop, delay,
// duplicate, partition, heal) for in-process multi-node tests.
//
// transport knows nothing about claims: it must not import crdt, tree, mesh
// or router.
package transport
