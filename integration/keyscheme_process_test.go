package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestProcessMeshKeySchemeMismatch: three real `kvmesh serve` processes
// over QUIC, one started with another index.block_tokens. All three are
// members; the odd one is no peer: `kvmesh members` says why, and the
// claims the others learn reach each other but not it.
func TestProcessMeshKeySchemeMismatch(t *testing.T) {
	bin, fleet := processFleet(t, 2)
	odd := filepath.Join(t.TempDir(), "odd.yaml")
	if err := os.WriteFile(odd, []byte("index:\n  block_tokens: 32\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	m := startMeshWith(t, bin, 3, fleet.URLs(), func(n *procNode) []string {
		if n.name == "r3" {
			return []string{"--config", odd}
		}
		return nil
	})
	defer m.stop()
	r1, r2, r3 := m.nodes[0], m.nodes[1], m.nodes[2]

	var out []byte
	waitFor(t, 30*time.Second, "kvmesh members on r1 to name r3 as no peer", func() bool {
		out, _ = exec.Command(bin, "members", "--admin", "http://"+r1.admin).CombinedOutput()
		return strings.Contains(string(out), "r3 is not a peer: it derives claim keys as k1.b32.c512, this node as k1.b16.c512")
	})
	if strings.Contains(string(out), "r2 is not a peer") {
		t.Fatalf("r2 (the same settings) listed as no peer:\n%s", out)
	}

	system := strings.Repeat("You are the key scheme test's assistant; answer briefly. ", 60)
	if code, _ := postRoute(r1.api, chatBody(system, "Which keys?")); code != 200 {
		t.Fatalf("turn: %d", code)
	}
	waitFor(t, 30*time.Second, "r2 to hold r1's claims", func() bool {
		d := r1.stateDigest()
		return r1.claims() > 0 && d == r2.stateDigest()
	})
	// r2 has them, so r1 has flushed and exchanged digests with its peers.
	if n := r3.claims(); n != 0 {
		t.Fatalf("r3 (block size 32) holds %d claims: r1's reached it", n)
	}
}
