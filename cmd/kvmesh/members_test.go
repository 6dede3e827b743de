package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/kvmesh/kvmesh/mesh"
)

// `kvmesh members --force-leave NAME` posts to the node's force-leave
// route (the name escaped), then prints the members; a refusal prints the
// node's message and exits 1.
func TestMembersForceLeave(t *testing.T) {
	var posted []string
	mux := http.NewServeMux()
	mux.HandleFunc(mesh.ForceLeavePath, func(w http.ResponseWriter, r *http.Request) {
		name := r.PathValue("name")
		posted = append(posted, name)
		if name == "alive one" {
			w.WriteHeader(http.StatusConflict)
			_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]string{"message": "mesh: the member is not failed (it is alive): only a failed member can be forced out"}})
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]string{"removed": name})
	})
	mux.HandleFunc("GET /admin/mesh", func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode(mesh.AdminView{Node: "n00", Topology: "full-mesh",
			Members: []mesh.Member{{Name: "n00", Addr: "10.0.0.1:7946", Status: "alive", Self: true}}})
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()

	var out, errb bytes.Buffer
	if code := run([]string{"members", "--admin", srv.URL, "--force-leave", "kvmesh-7"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if !strings.Contains(out.String(), "kvmesh-7 forced out") || !strings.Contains(out.String(), "n00") {
		t.Errorf("output:\n%s", out.String())
	}
	out.Reset()
	if code := run([]string{"members", "--admin", srv.URL, "--force-leave", "alive one"}, &out, &errb); code != 1 ||
		!strings.Contains(errb.String(), "only a failed member can be forced out") || !strings.Contains(errb.String(), "409") {
		t.Errorf("refused force-leave: exit %d, stderr %q", code, errb.String())
	}
	if len(posted) != 2 || posted[0] != "kvmesh-7" || posted[1] != "alive one" {
		t.Errorf("posted %q", posted)
	}
}
