package bench

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"testing"
	"time"
)

// Three router nodes behind a random spread: through the mesh every node
// ends up holding the claims all of them learnt; independent nodes hold
// only their own.
func TestMeshArmSharesClaims(t *testing.T) {
	w, sc := prefixHeavy(t)
	held := func(arm string) []int {
		cfg := e2eConfig(t, sc, arm)
		d, _, done := deployArm(t, &cfg, cfg.Fleet, cfg.Arms[0])
		defer done()
		rc := cfg.Replay
		rc.TimeScale = cfg.TimeScale
		samples, _, err := Replay(context.Background(), w, d.fronts, rc, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range samples {
			if !s.OK() {
				t.Fatalf("%s: %v", arm, &s)
			}
		}
		// Replication is asynchronous: wait (up to 3 s) for the mesh
		// nodes to hold the same number of claims.
		var n []int
		for range 300 {
			n = n[:0]
			for _, ix := range d.indexes {
				n = append(n, ix.Len())
			}
			if arm == "kvmesh:3:local" || (slices.Min(n) > 0 && slices.Min(n) == slices.Max(n)) {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		return n
	}
	mesh, local := held("kvmesh:3:mesh"), held("kvmesh:3:local")
	t.Logf("claims per node: mesh %v, independent %v", mesh, local)
	for i := range mesh {
		if mesh[i] < mesh[0]*9/10 || mesh[0] < mesh[i]*9/10 {
			t.Errorf("mesh nodes hold %v claims: want about the same everywhere", mesh)
		}
		if local[i] >= mesh[i] {
			t.Errorf("independent node %d holds %d claims, a mesh node %d: the mesh shares nothing", i, local[i], mesh[i])
		}
	}
}

func TestMeshArmServesAdminMesh(t *testing.T) {
	_, sc := prefixHeavy(t)
	cfg := e2eConfig(t, sc, "kvmesh:2:mesh")
	d, _, done := deployArm(t, &cfg, cfg.Fleet, cfg.Arms[0])
	defer done()
	resp, err := http.Get(d.fronts[1] + "/admin/mesh")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var view struct {
		Node  string            `json:"node"`
		Peers []json.RawMessage `json:"peers"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&view); err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET /admin/mesh: %d %v", resp.StatusCode, err)
	}
	if view.Node != "node-1" || len(view.Peers) != 1 {
		t.Errorf("admin view %+v: want node-1 with one peer", view)
	}
}

// A mesh arm's run measures how often its nodes decide like one router
// seeing all the traffic (a shadow fed every learn and booking), and what
// the load channel cost; a one-node arm has neither.
func TestMeshArmAgreementAndLoadBytes(t *testing.T) {
	w, sc := prefixHeavy(t)
	cfg := e2eConfig(t, sc, "kvmesh:3:mesh")
	res, err := RunOnce(context.Background(), &cfg, w, cfg.Arms[0], 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if res.Errors != 0 {
		t.Fatalf("%d errors", res.Errors)
	}
	t.Logf("agreement %.3f, load channel %.1f bytes per request per peer", res.Agreement, res.LoadBytesPerRequestPeer)
	// Agreement is a share, and nodes sharing claims and load agree with
	// the shadow on most requests (without any sharing they could only
	// agree by chance on a third of the prefix hits).
	if res.Agreement <= 0.5 || res.Agreement > 1 {
		t.Errorf("agreement %v, want in (0.5, 1]", res.Agreement)
	}
	// A booking delta is about a dozen bytes, a few per request, plus the
	// snapshots every LoadRefresh.
	if res.LoadBytesPerRequestPeer <= 0 || res.LoadBytesPerRequestPeer > 2000 {
		t.Errorf("load channel %v bytes per request per peer", res.LoadBytesPerRequestPeer)
	}
	one := e2eConfig(t, sc, "kvmesh")
	r1, err := RunOnce(context.Background(), &one, w, one.Arms[0], 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if r1.Agreement != 0 || r1.LoadBytesPerRequestPeer != 0 {
		t.Errorf("one node: agreement %v, load bytes %v, want none", r1.Agreement, r1.LoadBytesPerRequestPeer)
	}
}
