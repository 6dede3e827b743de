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
		fleet, err := cfg.Fleet(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		defer fleet.Close()
		d, err := deploy(context.Background(), &cfg, cfg.Arms[0], fleet)
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
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
	fleet, err := cfg.Fleet(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer fleet.Close()
	d, err := deploy(context.Background(), &cfg, cfg.Arms[0], fleet)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
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
