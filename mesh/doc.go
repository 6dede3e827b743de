// Package mesh is the long-running replication side of a kvmesh node: serf
// membership (who the peers are and where their QUIC endpoints live), the
// flush loop that ships crdt deltas, acknowledgements, full-state transfers,
// periodic digest anti-entropy, and the mesh metrics and admin view.
//
// mesh owns goroutines; the state machine it drives is crdt.Replica, the
// bytes travel over a Transport (transport.QUIC in production,
// transport.MemEndpoint in tests). It may import crdt, tree and transport.
// It must not import router or cmd.
//
// # A Node
//
// New(cfg, deps) builds a Node over the node's tree.Index (the one the
// router reads); Start joins serf and starts the loops; Leave leaves
// gracefully; Close stops everything. *Node implements the router's
// Learner: Learn and Invalidate write into the Index through the Replica
// and return at once. Learn never touches the network and does not even
// wait for the Replica while it is busy: the learn is queued (learnq.go) and
// written at the next flush.
//
// Goroutines: the replication loop (replication.go: flush ticks and early
// flushes, membership changes, anti-entropy, index sweeps), the receive
// loop (transport inbound: load-channel messages applied at once, the
// claim protocol's passed on), the apply loop (check the sender is an alive
// member, decode, check the message names the authenticated sender,
// apply), the load loop (load.go: this node's bookings out), one sender per
// alive member (sender.go: a bounded queue, encode, Send with a timeout; a
// slow peer only fills its own queue) and, until it succeeds, the join
// loop.
//
// # The load channel
//
// Beside the claims, each node ships its bookings per backend (prefill
// queued, requests pending and in flight) to every alive member as
// last-value state (load.go, loadtable.go, loadwire.go): the router prices
// a backend with the work every node queued there. It is lossy and never
// joined into the claims; a peer's bookings go when it leaves or falls
// silent. The same channel carries the router's lessons about each
// backend's cache (lesson.go), the prompts it found lost at a backend
// (lost.go) and its answer totals, from which every node averages the
// fleet's reuse over the mesh's answers (answers.go), each in messages of
// their own.
//
// # Membership
//
// Every node runs a serf member named Config.Name, with its QUIC address,
// ProtocolVersion and key scheme (the index's tree.Config.KeyScheme) in its
// tags. Alive members speaking our protocol and deriving keys as we do are
// replication peers (compat.go: the others are listed with the reason and
// counted; one of another key scheme still shares load); a failed or left
// member is dropped at once, a returning
// one starts over with a full-state transfer. Seeds (--join) are host:port,
// names with A/AAAA records, or SRV names (a Kubernetes headless Service);
// they are resolved before every attempt, this node's own address is left
// out, and joining retries with backoff until it succeeds, so nodes may
// start in any order. A node restarted with an empty index gets a new random
// incarnation, which peers notice (crdt) and answer with their full state.
// Gossip is encrypted with Config.GossipKey; only DevMode runs without one.
//
// # Topology
//
// Up to Config.RelayThreshold members (32) the mesh is a full mesh: each
// node sends its own claims to every peer, one hop, nothing relayed: a
// node's egress per claim it learns grows linearly with the mesh. Above
// it, nodes replicate only with their neighbours in a bounded-degree
// overlay and relay what is new to them (crdt.Config.Relay), so a node's
// egress per claim is bounded by its degree (~2·log2 N) and a claim crosses
// the mesh in ~log2 N hops. The overlay is a Chord-like finger graph on a
// hash ring (overlay.go): every node computes the same graph from the
// member list, and a membership change rewires O(log N) edges. Switching
// between the two replaces the Replica (crdt fixes Relay at creation): one
// full-state exchange per edge, with hysteresis (back to the full mesh at
// 3/4 of the threshold).
//
// # Operations
//
// Metrics are kvmesh_mesh_* (metrics.go) and kvmesh_index_* (for the
// node's Index; NewIndexCollector serves a router without a mesh).
// AdminHandler serves GET /admin/mesh (AdminView: members, per-peer
// protocol state, replica and index stats, a state digest that is equal on
// converged nodes); FormatMembers prints its members like `serf members`.
// Package meshtest runs many nodes in one process (an in-memory gossip
// network with partitions).
package mesh
