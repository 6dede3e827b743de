package mesh

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// statusOf is name's status in tn's member list ("" when not listed).
func statusOf(tn *testNode, name string) string {
	for _, m := range tn.n.Members() {
		if m.Name == name {
			return m.Status
		}
	}
	return ""
}

// A member killed without leaving stays listed as failed (for serf's
// reconnect timeout, a day by default) until an operator forces it out:
// then it leaves every member list, and only a failed member can be.
func TestForceLeaveRemovesAFailedMember(t *testing.T) {
	c := newTestCluster(t, nil)
	c.startN(3)
	c.waitMesh(time.Minute)
	n0, n1 := c.node("n00"), c.node("n01")

	if err := n0.n.ForceLeave("n02"); !errors.Is(err, ErrMemberNotFailed) {
		t.Fatalf("force-leave of a live member: %v, want ErrMemberNotFailed", err)
	}
	if err := n0.n.ForceLeave("n00"); !errors.Is(err, ErrForceLeaveItself) {
		t.Fatalf("force-leave of itself: %v", err)
	}
	if err := n0.n.ForceLeave("nobody"); !errors.Is(err, ErrUnknownMember) {
		t.Fatalf("force-leave of an unknown name: %v", err)
	}

	c.kill("n02")
	waitFor(t, time.Minute, "n02 to be seen failed", func() bool {
		return statusOf(n0, "n02") == "failed" && statusOf(n1, "n02") == "failed"
	})

	// Over the admin route, as `kvmesh members --force-leave` sends it.
	srv := httptest.NewServer(func() http.Handler {
		mux := http.NewServeMux()
		mux.Handle(ForceLeavePath, n0.n.ForceLeaveHandler())
		return mux
	}())
	defer srv.Close()
	resp, err := http.Post(srv.URL+"/admin/mesh/members/n02/force-leave", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	var body map[string]string
	_ = json.NewDecoder(resp.Body).Decode(&body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || body["removed"] != "n02" {
		t.Fatalf("force-leave answered %d %v", resp.StatusCode, body)
	}
	// Pruned on the node asked and, through gossip, on the others.
	waitFor(t, time.Minute, "n02 to leave both member lists", func() bool {
		return statusOf(n0, "n02") == "" && statusOf(n1, "n02") == ""
	})

	resp, err = http.Post(srv.URL+"/admin/mesh/members/n01/force-leave", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusConflict {
		t.Errorf("force-leave of a live member over HTTP: %d, want 409", resp.StatusCode)
	}
}
