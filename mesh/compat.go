package mesh

import (
	"fmt"
	"strconv"
)

// Why a member is not a peer. A member this node cannot replicate claims
// with stays listed (Members, with Member.NotPeer saying why) and counted
// (kvmesh_mesh_incompatible_members), so a misconfigured node shows up
// instead of quietly routing on claims of its own.
const (
	// notPeerProtocol: it speaks another replication protocol (a rollout
	// across a wire change) or announced none.
	notPeerProtocol = "protocol"
	// notPeerKeys: it keys claims otherwise (another index.block_tokens or
	// index.checkpoint_tokens, or a version whose keys changed: TagKeys,
	// tree.Config.KeyScheme). Its claims would sit at keys no request here
	// looks up, or where lookups here do not probe, filling the index and
	// crowding out the claims that do match; the load channel still runs,
	// since in-flight work at a backend means the same to both (less its
	// lost marks, which name keys: dropped on receipt).
	notPeerKeys = "key_scheme"
	// notPeerNoQUIC: it announced no replication address.
	notPeerNoQUIC = "no_quic"
)

// notPeerReasons lists the reasons above, for metrics.
var notPeerReasons = []string{notPeerProtocol, notPeerKeys, notPeerNoQUIC}

// otherCapacity says, for a member announcing tags, that its index holds
// another number of claims (index.capacity), or "" when it holds the same
// or does not say. Such a member is still a peer, but eviction raises a
// floor every replica adopts (crdt), so the mesh keeps only what the
// smallest index can: a node given less silently shrinks every other.
func (n *Node) otherCapacity(tags map[string]string) string {
	c, own := tags[TagCapacity], strconv.Itoa(n.ix.Config().Capacity)
	if c == "" || c == own {
		return ""
	}
	return fmt.Sprintf("holds %s claims (index.capacity), this node %s: every node keeps only what the smallest index can; set the same on every node", c, own)
}

// notPeer says why this node cannot replicate claims with a member
// announcing tags: "" when it can, else one of the notPeer reasons and a
// sentence for operators. A member without TagKeys (a version before it)
// is taken at its word that keys agree, as before the tag existed.
func (n *Node) notPeer(tags map[string]string) (reason, why string) {
	if p := tags[TagProtocol]; p != strconv.Itoa(ProtocolVersion) {
		if p == "" {
			p = "none"
		}
		return notPeerProtocol, fmt.Sprintf("speaks replication protocol %s, this node %d", p, ProtocolVersion)
	}
	if tags[TagQUIC] == "" {
		return notPeerNoQUIC, "announces no replication (QUIC) address"
	}
	if k := tags[TagKeys]; k != "" && k != n.scheme {
		return notPeerKeys, fmt.Sprintf("derives claim keys as %s, this node as %s: set the same index.block_tokens and index.checkpoint_tokens on every node", k, n.scheme)
	}
	return "", ""
}
