package integration

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kvmesh/kvmesh/integration/sim"
	"github.com/kvmesh/kvmesh/router"
	"github.com/kvmesh/kvmesh/router/kvevents"
)

// TestProcessPreciseOwnerFailover: three real `kvmesh serve` processes in
// precise mode in front of two simulated engines publishing KV events.
// Each engine's stream is consumed by one node (the rendezvous owner); the
// claims its events make are routable on every node. The owner of engine
// s0 is killed (SIGKILL): the next-ranked node takes the stream over
// (resyncing by replay from sequence 0), and what s0 caches from then on,
// sent to it directly (no router learns it), becomes routable on both
// survivors.
func TestProcessPreciseOwnerFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs processes")
	}
	bin := buildKVMesh(t)
	sc := simConfig()
	sc.KVEvents = sim.KVEventsConfig{Endpoint: "tcp://127.0.0.1:0", ReplayEndpoint: "tcp://127.0.0.1:0"}
	fleet, err := sim.StartFleet(2, sc)
	if err != nil {
		t.Fatal(err)
	}
	defer fleet.Close()
	var streams, replays []string
	for i, in := range fleet.Instances() {
		streams = append(streams, fmt.Sprintf("s%d=%s", i, in.KVEventsEndpoint()))
		replays = append(replays, fmt.Sprintf("s%d=%s", i, in.KVEventsReplayEndpoint()))
	}
	m := startMesh(t, bin, 3, fleet.URLs(), "--kv-events", strings.Join(streams, ","),
		"--kv-events-replay", strings.Join(replays, ","), "--kv-events-model", sc.Models[0])
	defer m.stop()
	names := []string{"r1", "r2", "r3"}
	owner := kvevents.Owner("s0", names)
	var victim *procNode
	var survivors []*procNode
	for _, n := range m.nodes {
		if n.name == owner {
			victim = n
		} else {
			survivors = append(survivors, n)
		}
	}
	engine := fleet.URLs()[0]
	// Ownership settles on the three members (nodes that joined earlier
	// owned streams among fewer for a moment).
	settled := func(nodes []*procNode) func() bool {
		return func() bool {
			var alive []string
			for _, n := range nodes {
				alive = append(alive, n.name)
			}
			for _, n := range nodes {
				for _, b := range []string{"s0", "s1"} {
					want := 0.0
					if kvevents.Owner(b, alive) == n.name {
						want = 1
					}
					if n.labeledMetric(t, "kvmesh_kvevents_stream_owned", `backend="`+b+`"`) != want {
						return false
					}
				}
			}
			return true
		}
	}
	waitFor(t, 30*time.Second, "each stream to have its owner among the three", settled(m.nodes))

	// Conversation A, sent to engine s0 directly: its blocks are claimed
	// on every node through the owner's stream.
	system := strings.Repeat("You answer questions about precise routing with care and in few words. ", 40)
	convA := chatBody(system, "What does an engine report when it caches a block?")
	if code := postEngine(engine, convA); code != 200 {
		t.Fatalf("engine s0: %d", code)
	}
	routable := func(nodes []*procNode, what string, body []byte) {
		t.Helper()
		waitFor(t, 60*time.Second, what+" to be routable by s0's events on "+fmt.Sprint(len(nodes))+" nodes", func() bool {
			for _, n := range nodes {
				if n.preciseMatch(t, body, "s0") == 0 {
					return false
				}
			}
			return true
		})
	}
	routable(m.nodes, "conversation A", convA)
	// One consumer: of the messages a new conversation makes, only the
	// owner applies any.
	exclusive := func(nodes []*procNode, want string, what string, body []byte) {
		t.Helper()
		before := map[string]float64{}
		for _, n := range nodes {
			before[n.name] = n.labeledMetric(t, "kvmesh_kvevents_messages_total", `backend="s0",outcome="applied"`)
		}
		if code := postEngine(engine, body); code != 200 {
			t.Fatalf("engine s0: %d", code)
		}
		routable(nodes, what, body)
		for _, n := range nodes {
			d := n.labeledMetric(t, "kvmesh_kvevents_messages_total", `backend="s0",outcome="applied"`) - before[n.name]
			if (n.name == want) != (d > 0) {
				t.Fatalf("%s applied %v of s0's messages for %s; the owner is %s alone", n.name, d, what, want)
			}
		}
	}
	exclusive(m.nodes, owner, "conversation A2", chatBody(system, "And when it evicts one?"))

	// The owner dies; events keep becoming claims on the survivors.
	victim.kill()
	next := kvevents.Owner("s0", []string{survivors[0].name, survivors[1].name})
	convB := chatBody(strings.Repeat("A second system prompt, about failover of event streams between nodes. ", 40), "Who reads the stream now?")
	waitFor(t, 60*time.Second, "conversation B (cached by s0 after the owner died) to be routable on both survivors", func() bool {
		if postEngine(engine, convB) != 200 {
			return false
		}
		for _, n := range survivors {
			if n.preciseMatch(t, convB, "s0") == 0 {
				return false
			}
		}
		return true
	})
	waitFor(t, 30*time.Second, "each stream to have its owner among the survivors", settled(survivors))
	exclusive(survivors, next, "conversation C", chatBody(strings.Repeat("A third system prompt. ", 100), "Still one reader?"))
	// The new owner resynced by replay from sequence 0: conversation A,
	// stored before it took over, is claimed again too.
	for _, n := range survivors {
		waitFor(t, 30*time.Second, n.name+" to route conversation A again after the resync", func() bool { return n.preciseMatch(t, convA, "s0") > 0 })
	}
	if r := survivors[0].labeledMetric(t, "kvmesh_kvevents_replays_total", `backend="s0",result="ok"`) +
		survivors[1].labeledMetric(t, "kvmesh_kvevents_replays_total", `backend="s0",result="ok"`); r < 1 {
		t.Fatalf("the new owner did not replay (%v replays)", r)
	}
}

// postEngine sends a chat body straight to an engine (no router learns it).
func postEngine(url string, body []byte) int {
	c := http.Client{Timeout: 30 * time.Second}
	resp, err := c.Post(url+"/v1/chat/completions", "application/json", bytes.NewReader(body))
	if err != nil {
		return -1
	}
	resp.Body.Close()
	return resp.StatusCode
}

// preciseMatch is how many blocks of body's prompt the node would match on
// backend (POST /debug/route); it fails the test if the request was not
// keyed by the engine's tokens (16 units, tokens, per block).
func (n *procNode) preciseMatch(t *testing.T, body []byte, backend string) int {
	t.Helper()
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Post("http://"+n.admin+"/debug/route", "application/json", bytes.NewReader(body))
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	var x router.RouteExplanation
	if json.NewDecoder(resp.Body).Decode(&x) != nil {
		return 0
	}
	if x.UnitsPerBlock != 16 {
		t.Fatalf("%s keyed the request by %d units per block, not the engine's tokens", n.name, x.UnitsPerBlock)
	}
	for _, c := range x.Candidates {
		if c.Backend == backend {
			return c.MatchedBlocks
		}
	}
	return 0
}

// labeledMetric reads one labelled series from a node's /metrics (0 if
// absent); labels is the text between the braces.
func (n *procNode) labeledMetric(t *testing.T, name, labels string) float64 {
	t.Helper()
	resp, err := probeClient.Get("http://" + n.admin + "/metrics")
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	prefix := name + "{" + labels + "} "
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), prefix); ok {
			f, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return f
		}
	}
	return 0
}
