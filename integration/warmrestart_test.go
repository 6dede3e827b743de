package integration

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kvmesh/kvmesh/integration/sim"
)

// TestProcessMeshWarmRestart: three real `kvmesh serve` processes with
// --state-dir learn a conversation, are all stopped at once (each writes
// its snapshot on SIGINT) and started again; the next turn of the
// conversation, sent to another node, goes to the backend that holds its
// prefix, matched by the restored claims, although no node kept anything
// in memory and no peer had anything to send.
func TestProcessMeshWarmRestart(t *testing.T) {
	bin, fleet := processFleet(t, 4)
	system := strings.Repeat("You are the warm restart test's assistant; answer briefly and kindly. ", 60)
	m, holder := stoppedAfterOneTurn(t, bin, fleet.URLs(), chatBody(system, "What is a KV cache?"))
	defer m.stop()
	nodes := m.nodes
	for _, n := range nodes {
		m.start(t, n)
	}
	for _, n := range nodes {
		waitFor(t, 30*time.Second, n.name+" to see 3 alive members", func() bool { return n.aliveMembers() == 3 })
		if got := metric(t, n.admin, "kvmesh_state_restored_claims"); got <= 0 {
			t.Fatalf("%s restored %v claims", n.name, got)
		}
	}

	turn2 := chatBody(system, "What is a KV cache?", "It keeps attention keys and values.", "And why route by prefix?")
	code, route := postRoute(nodes[2].api, turn2)
	if code != 200 {
		t.Fatalf("second turn: %d", code)
	}
	matched, _ := strconv.Atoi(strings.SplitN(routeField(route, "matched"), "/", 2)[0])
	if got := routeField(route, "backend"); got != holder || routeField(route, "reason") != "prefix" || matched == 0 {
		t.Fatalf("after the restart the next turn went %q, want backend=%s reason=prefix with a match", route, holder)
	}
}

// TestProcessMeshRestartDropsUnlistedBackend: three real nodes with
// --state-dir restart at once with one backend fewer (it left while they
// were down). The restored registry entry of the backend nobody lists any
// more is removed once the grace is over (and counted), while the claims
// of the backends still listed are kept: the next turn of a conversation
// still goes to its holder.
func TestProcessMeshRestartDropsUnlistedBackend(t *testing.T) {
	bin, fleet := processFleet(t, 4)
	system := strings.Repeat("You are the unlisted backend test's assistant; answer briefly. ", 60)
	m, holder := stoppedAfterOneTurn(t, bin, fleet.URLs(), chatBody(system, "What is a registry?"),
		"--backend-unlisted-grace", "1s", "--discovery-interval", "100ms")
	defer m.stop()
	nodes := m.nodes
	// One backend that does not hold the conversation leaves while every
	// node is down.
	var kept []string
	gone := ""
	for _, b := range strings.Split(m.backends, ",") {
		if name, _, _ := strings.Cut(b, "="); gone == "" && name != holder {
			gone = name
			continue
		}
		kept = append(kept, b)
	}
	m.backends = strings.Join(kept, ",")
	for _, n := range nodes {
		m.start(t, n)
	}
	removed := func() float64 {
		sum := 0.0
		for _, n := range nodes {
			sum += max(metric(t, n.admin, "kvmesh_router_discovery_unlisted_removed_total"), 0)
		}
		return sum
	}
	waitFor(t, time.Minute, gone+"'s restored entry to be removed", func() bool { return removed() >= 1 })
	if r := removed(); r > 3 {
		t.Fatalf("%v removals counted for one backend over three nodes", r)
	}
	waitFor(t, 30*time.Second, "the nodes to agree again", m.agree)
	turn2 := chatBody(system, "What is a registry?", "A list of names.", "Which ones stay?")
	code, route := postRoute(nodes[1].api, turn2)
	if code != 200 {
		t.Fatalf("second turn: %d", code)
	}
	if got := routeField(route, "backend"); got != holder || routeField(route, "reason") != "prefix" {
		t.Fatalf("after the sweep the next turn went %q, want backend=%s reason=prefix", route, holder)
	}
}

// stoppedAfterOneTurn starts three nodes with --state-dir (and extra serve
// flags) over backendURLs, sends turn to the first, waits until every node
// holds the same claims, and stops them all, each writing its snapshot on
// SIGINT. It returns the mesh, to start again, and the backend that holds
// the turn's prefix.
func stoppedAfterOneTurn(t *testing.T, bin string, backendURLs []string, turn []byte, extra ...string) (*procMesh, string) {
	t.Helper()
	stateDir := t.TempDir()
	m := startMeshWith(t, bin, 3, backendURLs, func(n *procNode) []string {
		// --state-interval 1h: only the shutdown write
		return append([]string{"--state-dir", filepath.Join(stateDir, n.name), "--state-interval", "1h"}, extra...)
	})
	code, route := postRoute(m.nodes[0].api, turn)
	if code != 200 {
		t.Fatalf("first turn: %d", code)
	}
	// Every node holds the claims before the restart (each writes its own
	// snapshot).
	waitFor(t, 30*time.Second, "the three nodes to hold the same claims", func() bool { return m.nodes[0].claims() > 0 && m.agree() })
	if killed := m.stop(); len(killed) > 0 { // SIGINT: every node writes its snapshot and exits
		t.Fatalf("%v did not exit within two minutes of SIGINT (killed: no snapshot written)", killed)
	}
	return m, routeField(route, "backend")
}

// chatBody is a chat request: a system prompt and alternating user and
// assistant messages.
func chatBody(system string, turns ...string) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, `{"model":%q,"max_tokens":8,"messages":[{"role":"system","content":%q}`, sim.DefaultConfig().Models[0], system)
	for i, c := range turns {
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		fmt.Fprintf(&b, `,{"role":%q,"content":%q}`, role, c)
	}
	b.WriteString("]}")
	return b.Bytes()
}

// postRoute posts a chat body and returns the status and x-kvmesh-route.
func postRoute(addr string, body []byte) (int, string) {
	c := http.Client{Timeout: 30 * time.Second}
	resp, err := c.Post("http://"+addr+"/v1/chat/completions", "application/json", bytes.NewReader(body))
	if err != nil {
		return -1, ""
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("x-kvmesh-route")
}

// routeField reads one key=value of an x-kvmesh-route header.
func routeField(route, key string) string {
	for _, part := range strings.Split(route, ";") {
		if k, v, ok := strings.Cut(strings.TrimSpace(part), "="); ok && k == key {
			return v
		}
	}
	return ""
}

// metric reads an unlabelled metric from a node's /metrics (-1 if absent).
func metric(t *testing.T, admin, name string) float64 {
	t.Helper()
	resp, err := probeClient.Get("http://" + admin + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return f
		}
	}
	return -1
}
