package integration

import (
	"bytes"
	"context"
	"debug/buildinfo"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvmesh/kvmesh/integration/ports"
	"github.com/kvmesh/kvmesh/integration/sim"
	"github.com/kvmesh/kvmesh/integration/workload"
)

// TestProcessMeshKillRestart runs three real `kvmesh serve` processes joined
// as a mesh over real QUIC (mutual TLS) on loopback, under load. One is
// killed with SIGKILL and restarted with empty state; the test checks that
// the mesh keeps serving, that the restarted node rejoins and receives the
// claims learned while it was down, and that all three converge to the same
// replicated state.
func TestProcessMeshKillRestart(t *testing.T) {
	bin, fleet := processFleet(t, 2)
	m := startMesh(t, bin, 3, fleet.URLs())
	defer m.stop()
	nodes := m.nodes

	// Load: conversations sent to random nodes, as behind an L4 spread.
	w, err := workload.MultiTurn(workload.DefaultMultiTurnOptions())
	if err != nil {
		t.Fatal(err)
	}
	var sent, failed atomic.Int64
	var down atomic.Int32 // index+1 of the node that is down
	load := func(ctx context.Context, reqs []workload.Request) {
		r := rand.New(rand.NewPCG(1, 2))
		for _, req := range reqs {
			if ctx.Err() != nil {
				return
			}
			i := r.IntN(3)
			if int(down.Load()) == i+1 {
				i = (i + 1) % 3
			}
			code := post(nodes[i].api, req.BodyBytes())
			sent.Add(1)
			if code != 200 {
				failed.Add(1)
			}
		}
	}
	third := len(w.Requests) / 3
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	load(ctx, w.Requests[:third])

	// kill -9 r2 under load; requests keep going to the others.
	victim := nodes[1]
	down.Store(2)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); load(ctx, w.Requests[third:2*third]) }()
	time.Sleep(200 * time.Millisecond)
	victim.kill()
	wg.Wait()
	digestWhileDown := nodes[0].stateDigest()

	m.start(t, victim)
	down.Store(0)
	waitFor(t, 30*time.Second, "r2 to rejoin", func() bool { return victim.aliveMembers() == 3 && nodes[0].aliveMembers() == 3 })
	load(ctx, w.Requests[2*third:])

	// Every node ends with the same replicated state; r2 got what was
	// learned while it was down.
	waitFor(t, 30*time.Second, "the three nodes to converge", m.agree)
	if victim.claims() == 0 || digestWhileDown == "" {
		t.Fatalf("restarted node holds %d claims", victim.claims())
	}
	if f := failed.Load(); f > sent.Load()/20 {
		t.Fatalf("%d of %d requests failed", f, sent.Load())
	}
	st := fleet.Stats()
	t.Logf("%d requests (%d failed); backend token hit rate %.3f", sent.Load(), failed.Load(), st.HitRate())
}

func simConfig() sim.Config {
	c := sim.DefaultConfig()
	c.TimeScale = 1000 // requests take milliseconds
	return c
}

type procNode struct {
	name, api, admin, bind, quic string
	cmd                          *exec.Cmd
	out                          *lockedBuffer // the process's stdout and stderr
	exited                       chan struct{} // closed once cmd has exited
}

// lockedBuffer collects a process's output while the test reads it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// tail is the last n bytes written.
func (b *lockedBuffer) tail(n int) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.buf.String()
	if len(s) > n {
		s = "..." + s[len(s)-n:]
	}
	return s
}

// procMesh is n `kvmesh serve` processes joined as a mesh over QUIC with
// mutual TLS on loopback, in front of the same backends.
type procMesh struct {
	bin, dir, backends string
	extra              []string                 // more serve flags for every node
	nodeArgs           func(*procNode) []string // more serve flags for one node (nil: none)
	nodes              []*procNode
}

// startMesh starts n nodes (extra: more serve flags) and waits until each
// sees all of them alive.
func startMesh(t *testing.T, bin string, n int, backendURLs []string, extra ...string) *procMesh {
	t.Helper()
	return startMeshWith(t, bin, n, backendURLs, nil, extra...)
}

// startMeshWith is startMesh with per-node flags.
func startMeshWith(t *testing.T, bin string, n int, backendURLs []string, nodeArgs func(*procNode) []string, extra ...string) *procMesh {
	t.Helper()
	m := &procMesh{bin: bin, dir: t.TempDir(), extra: extra, nodeArgs: nodeArgs}
	t.Cleanup(func() { m.stop() }) // also when a node fails to start: the ones up must not outlive the test
	names := make([]string, n)
	m.nodes = make([]*procNode, n)
	for i := range m.nodes {
		names[i] = fmt.Sprintf("r%d", i+1)
		m.nodes[i] = &procNode{name: names[i], api: freePort(t, "tcp"), admin: freePort(t, "tcp"),
			bind: freePort(t, "both"), quic: freePort(t, "udp")}
	}
	run(t, bin, "certs", "--dir", m.dir, "--nodes", strings.Join(names, ","))
	bs := make([]string, len(backendURLs))
	for i, u := range backendURLs {
		bs[i] = fmt.Sprintf("s%d=%s", i, u)
	}
	m.backends = strings.Join(bs, ",")
	for _, nd := range m.nodes {
		m.start(t, nd)
	}
	for _, nd := range m.nodes {
		waitFor(t, 30*time.Second, fmt.Sprintf("%s to see %d alive members", nd.name, n), func() bool { return nd.aliveMembers() == n })
	}
	return m
}

// start (re)starts one node, joining through the first.
func (m *procMesh) start(t *testing.T, n *procNode) {
	t.Helper()
	args := []string{"serve", "--node-name", n.name, "--listen", n.api, "--admin-listen", n.admin,
		"--mesh", "--dev", "--bind", n.bind, "--quic-listen", n.quic, "--join", m.nodes[0].bind,
		"--tls-ca", filepath.Join(m.dir, "ca.pem"), "--tls-cert", filepath.Join(m.dir, n.name+".pem"),
		"--tls-key", filepath.Join(m.dir, n.name+"-key.pem"), "--backends", m.backends, "--log-level", "warn",
		"--drain-delay", "0s"} // no balancer to wait for: stop at once
	args = append(args, m.extra...)
	if m.nodeArgs != nil {
		args = append(args, m.nodeArgs(n)...)
	}
	n.start(t, m.bin, args...)
}

// stop stops every node gracefully; it reports the nodes that had to be
// killed (a graceful stop writes the node's snapshot).
func (m *procMesh) stop() (killed []string) {
	for _, n := range m.nodes {
		if n != nil && n.stop() {
			killed = append(killed, n.name)
		}
	}
	return killed
}

func (n *procNode) start(t *testing.T, bin string, args ...string) {
	t.Helper()
	n.cmd = exec.Command(bin, args...)
	n.out = &lockedBuffer{}
	n.cmd.Stdout, n.cmd.Stderr = n.out, n.out
	if err := n.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	n.exited = exited
	go func() { n.cmd.Wait(); close(exited) }()
	// Up to a minute: a loaded CI machine may take a while to start a
	// race-built binary; a process that exits fails the test at once,
	// with what it printed.
	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case <-exited:
			t.Fatalf("%s exited before serving (%v):\n%s", n.name, n.cmd.ProcessState, n.out.tail(4096))
		default:
		}
		resp, err := probeClient.Get("http://" + n.admin + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after 60s waiting for %s to serve (last error %v); it printed:\n%s", n.name, err, n.out.tail(4096))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (n *procNode) kill() {
	if n.cmd != nil && n.cmd.Process != nil {
		n.cmd.Process.Kill() // SIGKILL: no graceful leave
		<-n.exited
	}
}

// stop sends SIGINT and waits for the node to exit; it reports whether
// the node had to be killed. The wait is a liveness bound, not a
// deadline: a race-built node on a busy machine may take a while to leave
// the mesh and write its snapshot.
func (n *procNode) stop() (killed bool) {
	if n.cmd == nil || n.cmd.Process == nil {
		return false
	}
	select {
	case <-n.exited:
		return false
	default:
	}
	n.cmd.Process.Signal(os.Interrupt)
	select {
	case <-n.exited:
		return false
	case <-time.After(2 * time.Minute):
		n.cmd.Process.Kill()
		<-n.exited // its ports are free before anyone restarts it
		return true
	}
}

// probeClient is for the tests' own requests to a node's admin listener:
// a node that accepts and never answers fails the wait around it instead
// of hanging the test past its timeout (which would orphan the nodes).
var probeClient = &http.Client{Timeout: 5 * time.Second}

type meshView struct {
	StateDigest string `json:"state_digest"`
	Members     []struct {
		Status string `json:"status"`
	} `json:"members"`
	Index struct {
		Claims int
	} `json:"index"`
}

func (n *procNode) view() (meshView, bool) {
	var v meshView
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://" + n.admin + "/admin/mesh")
	if err != nil {
		return v, false
	}
	defer resp.Body.Close()
	return v, json.NewDecoder(resp.Body).Decode(&v) == nil
}

func (n *procNode) aliveMembers() int {
	v, _ := n.view()
	alive := 0
	for _, m := range v.Members {
		if m.Status == "alive" {
			alive++
		}
	}
	return alive
}

func (n *procNode) stateDigest() string { v, _ := n.view(); return v.StateDigest }

// agree says whether every node answers with the same state digest.
func (m *procMesh) agree() bool {
	d := m.nodes[0].stateDigest()
	for _, n := range m.nodes[1:] {
		if d == "" || n.stateDigest() != d {
			return false
		}
	}
	return true
}
func (n *procNode) claims() int { v, _ := n.view(); return v.Index.Claims }

func post(addr string, body []byte) int {
	c := http.Client{Timeout: 30 * time.Second}
	resp, err := c.Post("http://"+addr+"/v1/chat/completions", "application/json", bytes.NewReader(body))
	if err != nil {
		return -1
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// processFleet opens a test that runs real processes: skipped with -short,
// the kvmesh binary built, and n simulated backends started, closed when
// the test ends (after its deferred calls have stopped the nodes).
func processFleet(t *testing.T, n int) (string, *sim.Fleet) {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs processes")
	}
	bin := buildKVMesh(t)
	fleet, err := sim.StartFleet(n, simConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fleet.Close() })
	return bin, fleet
}

// buildKVMesh builds cmd/kvmesh into a temporary directory, with the race detector when this test binary has it
// (as under `make test`): the nodes then run under the detector too, and the build reuses the race-mode packages
// the suite has compiled already instead of compiling all of them a second time without it.
func buildKVMesh(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "kvmesh")
	self, _ := debug.ReadBuildInfo()
	race := raced(self)
	args := []string{"build", "-o", bin}
	if race {
		args = append(args, "-race")
	}
	cmd := exec.Command("go", append(args, "./cmd/kvmesh")...)
	cmd.Dir = ".."
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	if info, err := buildinfo.ReadFile(bin); err != nil || raced(info) != race {
		t.Fatalf("%s: want a binary built with -race=%v (as this test binary is): %v", bin, race, err)
	}
	return bin
}

// raced reports whether a binary's build info says -race.
func raced(info *debug.BuildInfo) bool {
	if info == nil {
		return false
	}
	for _, s := range info.Settings {
		if s.Key == "-race" {
			return s.Value == "true"
		}
	}
	return false
}

func run(t *testing.T, bin string, args ...string) {
	t.Helper()
	if out, err := exec.Command(bin, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", bin, strings.Join(args, " "), err, out)
	}
}

// freePort returns a loopback address whose port was free for TCP, UDP or
// both (serf needs the same port for both).
// freePort is a loopback address free for proto ("tcp", "udp" or "both")
// and outside the ephemeral range, so that no other test's connection
// takes it between now and the node's (re)start (see package ports).
func freePort(t *testing.T, proto string) string {
	t.Helper()
	p := map[string]ports.Proto{"tcp": ports.TCP, "udp": ports.UDP, "both": ports.Both}[proto]
	addr, err := ports.Free(p)
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if cond() {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("timed out after %v waiting for %s", d, what)
}
