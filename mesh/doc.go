// Package mesh is the long-running replication side of a kvmesh node: serf
// membership (who the peers are and where their QUIC endpoints live), the
// flush loop that ships crdt deltas, acknowledgements, full-state transfers,
// periodic digest anti-entropy, and the mesh metrics and admin view.
//
// mesh owns goroutines; the state machine it drives is crdt.Replica, the
// bytes travel over a transport.Transport. It may import crdt, tree and
// transport. It must not import router or cmd.
package mesh
