package mesh

import (
	"encoding/json"
	"net/http"
	"time"

	"github.com/kvmesh/kvmesh/crdt"
	"github.com/kvmesh/kvmesh/tree"
)

// AdminPath is where AdminHandler serves the mesh view.
const AdminPath = "/admin/mesh"

// AdminView is the JSON document served at GET /admin/mesh. The `kvmesh
// members` command decodes it and prints Members with FormatMembers.
type AdminView struct {
	Node        string `json:"node"`
	Incarnation uint64 `json:"incarnation"`
	// Topology is "full-mesh" or "overlay".
	Topology string `json:"topology"`
	// StateDigest fingerprints the replicated state: nodes that hold the
	// same claims show the same value.
	StateDigest string     `json:"state_digest"`
	Members     []Member   `json:"members"`
	Peers       []PeerView `json:"peers"`
	Replica     crdt.Stats `json:"replica"`
	Index       tree.Stats `json:"index"`
	// Load is the load channel: what this node sends and what it last
	// heard of each peer's bookings.
	Load LoadView `json:"load"`
}

// PeerView is the replication protocol's state for one peer.
type PeerView struct {
	Name string `json:"name"`
	// Backlog is how many of our changes the peer has not acknowledged.
	Backlog    uint64 `json:"backlog"`
	InFullSync bool   `json:"in_full_sync"`
	// Converged: the last digest exchange found no difference (at
	// LastMatch).
	Converged bool      `json:"converged"`
	LastMatch time.Time `json:"last_match,omitzero"`
	LastHeard time.Time `json:"last_heard,omitzero"`
}

// Admin returns the node's current admin view.
func (n *Node) Admin() AdminView {
	digest := n.StateDigest()
	v := n.adminView()
	v.StateDigest = digest
	return v
}

// adminView is the admin view without the state digest (which walks every
// claim).
func (n *Node) adminView() AdminView {
	n.mu.Lock()
	peers := n.rep.Peers()
	st := addStats(n.base, n.rep.Stats())
	inc, overlay := n.inc, n.overlay
	n.mu.Unlock()
	v := AdminView{
		Node: n.cfg.Name, Incarnation: inc, Topology: "full-mesh",
		Members: n.Members(), Replica: st, Index: n.ix.Stats(), Load: n.loadView(),
		Peers: make([]PeerView, 0, len(peers)),
	}
	if overlay {
		v.Topology = "overlay"
	}
	heard := make(map[string]int64, len(peers))
	for _, p := range peers {
		heard[p.Name] = p.LastHeard
	}
	now := n.nowMs()
	for i := range v.Members {
		if m := &v.Members[i]; m.Peer {
			ago := int64(-1)
			if at := heard[m.Name]; at > 0 {
				ago = max(now-at, 0)
			}
			m.HeardAgoMs = &ago
		}
	}
	for _, p := range peers {
		v.Peers = append(v.Peers, PeerView{Name: p.Name, Backlog: p.Backlog, InFullSync: p.InFullSync,
			Converged: p.Converged, LastMatch: msTime(p.LastMatch), LastHeard: msTime(p.LastHeard)})
	}
	return v
}

func msTime(ms int64) time.Time {
	if ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms).UTC()
}

// AdminHandler serves GET /admin/mesh (AdminView as JSON). Mount it at
// AdminPath on the admin listener.
func (n *Node) AdminHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		body, err := json.MarshalIndent(n.Admin(), "", "  ")
		if err != nil {
			http.Error(w, "encode: "+err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		_, _ = w.Write(append(body, '\n'))
	})
}
