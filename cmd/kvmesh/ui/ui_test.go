package ui

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"math"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/kvmesh/kvmesh/mesh"
	"github.com/kvmesh/kvmesh/mesh/meshtest"
	"github.com/kvmesh/kvmesh/router"
	"github.com/kvmesh/kvmesh/transport"
	"github.com/kvmesh/kvmesh/tree"
)

// fakeRouter, fakeIndex and fakeMesh return fixed figures.
type fakeRouter struct {
	s     router.Status
	reads int
}

func (f *fakeRouter) ReadStatus(s *router.Status) { f.reads++; *s = f.s }

type fakeIndex tree.Stats

func (f fakeIndex) Stats() tree.Stats { return tree.Stats(f) }

type fakeMesh mesh.Status

func (f fakeMesh) Status() mesh.Status { return mesh.Status(f) }

func get(t *testing.T, h http.Handler, path string) *httptest.ResponseRecorder {
	t.Helper()
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, path, nil))
	return w
}

func mux(h *Handler) *http.ServeMux {
	m := http.NewServeMux()
	h.Mount(m)
	return m
}

func TestStateMapsTheSources(t *testing.T) {
	now := time.UnixMilli(1_800_000_000_000)
	kv := 0.5
	fr := &fakeRouter{s: router.Status{Policy: "kvmesh", Routed: 7,
		Decisions: []router.ReasonCount{{Reason: "prefix", Count: 5}, {Reason: "miss", Count: 2}},
		Matched:   router.RatioHistogram{UpperBounds: []float64{0, 0.5, 1}, Cumulative: []uint64{2, 3, 7}, Count: 7, Sum: 4.5},
		Backends: []router.BackendSnapshot{
			{Name: "b0", Healthy: true, Models: []string{"m"}, CachedTokens: 30, PromptTokens: 40,
				Load: router.LoadView{InFlight: 2, Has: router.HasKVCacheUsage | router.HasWaiting, KVUsage: kv, Waiting: 3, SignalAge: 1500 * time.Millisecond}},
			{Name: "b1", EjectedForMs: 900, RegistryRemoved: true, ReactivateInMs: 1500, Load: router.LoadView{PeerInFlight: math.NaN()}}, // no signal; a NaN must not break JSON
		}}}
	ms := fakeMesh{AdminView: mesh.AdminView{Topology: "full-mesh", Incarnation: 9,
		Members: []mesh.Member{{Name: "r1", Status: "alive", Self: true}, {Name: "r2", Status: "alive", Peer: true}, {Name: "r3", Status: "failed"},
			{Name: "r5", Status: "alive", NotPeer: "derives claim keys as k1.b32.c512, this node as k1.b16.c512"},
			{Name: "r6", Status: "alive", Peer: true, Warning: "holds 2 claims (index.capacity), this node 1"}},
		Peers: []mesh.PeerView{{Name: "r2", Backlog: 4, Converged: true, LastHeard: now.Add(-250 * time.Millisecond)}},
		Load: mesh.LoadView{Sharing: true, Share: 0.5, Peers: []mesh.LoadPeerView{
			{Peer: "r2", AgeMs: 12, Weight: 1, RoutedPerSecond: 3}, {Peer: "r4", AgeMs: 40, Weight: 0.5}}}},
		ApplyLagCount: 10, ApplyLagSum: 0.02}
	h := New(Deps{Node: "r1", Version: "v1", TenantHeader: "X-Tenant-ID", Router: fr,
		Index: fakeIndex{Claims: 10, Capacity: 100, TableBytes: 2 << 20, Evicted: 3, Floor: math.MinInt64 / 2}, Mesh: ms, Now: func() time.Time { return now }})
	w := get(t, mux(h), StatePath)
	if w.Code != 200 || w.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("status %d, type %q: %s", w.Code, w.Header().Get("Content-Type"), w.Body)
	}
	var st State
	if err := json.Unmarshal(w.Body.Bytes(), &st); err != nil {
		t.Fatal(err)
	}
	if st.Node != "r1" || st.Policy != "kvmesh" || st.Routed != 7 || len(st.Decisions) != 2 || st.Decisions[0] != (Count{"prefix", 5}) {
		t.Errorf("header fields or decisions wrong: %+v", st)
	}
	if st.Matched.Count != 7 || len(st.Matched.Cumulative) != 3 || st.Matched.Le[1] != 0.5 {
		t.Errorf("matched: %+v", st.Matched)
	}
	b0, b1 := st.Backends[0], st.Backends[1]
	if b0.CachedTokens != 30 || b0.PromptTokens != 40 || b0.InFlight != 2 || b0.KVUsage == nil || *b0.KVUsage != 0.5 ||
		b0.Waiting == nil || *b0.Waiting != 3 || b0.Running != nil || b0.SignalAgeMs == nil || *b0.SignalAgeMs != 1500 {
		t.Errorf("b0: %+v", b0)
	}
	if b0.RegistryRemoved || b0.ReactivateInMs != 0 || !b1.RegistryRemoved || b1.ReactivateInMs != 1500 {
		t.Errorf("registry removal: b0 %v %d, b1 %v %d", b0.RegistryRemoved, b0.ReactivateInMs, b1.RegistryRemoved, b1.ReactivateInMs)
	}
	if b1.Healthy || b1.EjectedForMs != 900 || b1.SignalAgeMs != nil || b1.KVUsage != nil || b1.PeerInFlight != 0 || b1.Models == nil {
		t.Errorf("b1: %+v", b1)
	}
	if st.Index.Claims != 10 || st.Index.Evicted != 3 || st.Index.FloorMs != 0 || st.Index.TableBytes != 2<<20 {
		t.Errorf("index: %+v", st.Index)
	}
	m := st.Mesh
	if m == nil || m.Incarnation != "9" || len(m.Members) != 5 || len(m.Peers) != 2 || m.ApplyLagCount != 10 || !m.Sharing {
		t.Fatalf("mesh: %+v", m)
	}
	if r5 := m.Members[3]; r5.Peer || r5.NotPeer != "derives claim keys as k1.b32.c512, this node as k1.b16.c512" || m.Members[1].NotPeer != "" ||
		m.Members[4].Warning != "holds 2 claims (index.capacity), this node 1" || m.Members[3].Warning != "" {
		t.Errorf("members: %+v", m.Members)
	}
	r2, r4 := m.Peers[0], m.Peers[1]
	if r2.Name != "r2" || r2.Backlog != 4 || !r2.Converged || *r2.LastHeardAgeMs != 250 || r2.LastMatchAgeMs != nil ||
		*r2.LoadAgeMs != 12 || r2.RoutedPerSecond != 3 {
		t.Errorf("r2: %+v", r2)
	}
	if r4.Name != "r4" || *r4.LoadAgeMs != 40 || r4.LoadWeight != 0.5 { // heard on the load channel only
		t.Errorf("r4: %+v", r4)
	}
}

// Viewers polling together share one document per StateMaxAge.
func TestStateIsSharedBetweenViewers(t *testing.T) {
	now := time.Unix(1000, 0)
	fr := &fakeRouter{}
	h := New(Deps{Router: fr, Index: fakeIndex{}, Now: func() time.Time { return now }})
	m := mux(h)
	for i := 0; i < 5; i++ {
		get(t, m, StatePath)
	}
	if fr.reads != 1 {
		t.Fatalf("5 polls within StateMaxAge read the router %d times", fr.reads)
	}
	now = now.Add(StateMaxAge)
	if get(t, m, StatePath); fr.reads != 2 {
		t.Fatalf("a poll after StateMaxAge read the router %d times in all", fr.reads)
	}
	var st State
	if err := json.Unmarshal(get(t, m, StatePath).Body.Bytes(), &st); err != nil || st.Mesh != nil || st.Decisions == nil || st.Backends == nil {
		t.Fatalf("without a mesh: %v %+v", err, st)
	}
}

func TestPageAndAssetsCarryTheCSP(t *testing.T) {
	m := mux(New(Deps{Router: &fakeRouter{}, Index: fakeIndex{}}))
	for path, ctype := range map[string]string{"/ui": "text/html", "/ui/app.js": "text/javascript", "/ui/charts.js": "text/javascript",
		"/ui/ui.css": "text/css", "/ui/icon.svg": "image/svg+xml", "/ui/state": "application/json"} {
		w := get(t, m, path)
		if w.Code != 200 || !strings.HasPrefix(w.Header().Get("Content-Type"), ctype) {
			t.Errorf("%s: status %d, type %q", path, w.Code, w.Header().Get("Content-Type"))
		}
		if w.Header().Get("Content-Security-Policy") != ContentSecurityPolicy || w.Header().Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("%s: security headers %v", path, w.Header())
		}
	}
	for _, path := range []string{"/ui/index.html.bak", "/ui/nope.js", "/ui/..%2fui.go", "/ui/%2e%2e%2fdoc.go", "/ui/a%2fb.js"} {
		if w := get(t, m, path); w.Code != 404 && w.Code != 301 {
			t.Errorf("%s: status %d", path, w.Code)
		}
	}
	// Relative, so that it holds behind a proxy adding a path prefix.
	if w := get(t, m, "/ui/"); w.Code != http.StatusMovedPermanently || w.Header().Get("Location") != "../ui" {
		t.Errorf("/ui/: %d %q", w.Code, w.Header().Get("Location"))
	}
	w := httptest.NewRecorder()
	m.ServeHTTP(w, httptest.NewRequest(http.MethodPost, StatePath, nil))
	if w.Code != http.StatusMethodNotAllowed {
		t.Errorf("POST /ui/state: %d (the page is read-only)", w.Code)
	}
}

// The page must work offline and under the CSP: no external URL, no inline
// script, style or event handler, no HTML built from strings.
func TestAssetsAreSelfContained(t *testing.T) {
	external := regexp.MustCompile(`(?i)(https?:)?//[a-z0-9.-]+\.[a-z]{2,}`)
	banned := []*regexp.Regexp{
		regexp.MustCompile(`(?i)<script(?:\s[^>]*)?>\s*[^<\s]`), // an inline script
		regexp.MustCompile(`(?i)<style`),
		regexp.MustCompile(`(?i)\sstyle=`),
		regexp.MustCompile(`(?i)\son[a-z]+=`),
		regexp.MustCompile(`innerHTML|outerHTML|insertAdjacentHTML|document\.write|eval\(|new Function|setAttribute\(\s*'style'`),
	}
	err := fs.WalkDir(assets, "assets", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, _ := assets.ReadFile(path)
		s := strings.ReplaceAll(string(b), "http://www.w3.org/2000/svg", "") // a namespace, not a fetch
		if u := external.FindString(s); u != "" {
			t.Errorf("%s refers to %q", path, u)
		}
		for _, re := range banned {
			if x := re.FindString(s); x != "" {
				t.Errorf("%s has %q", path, x)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// realRig is a router over n backends (never contacted: the router is not
// started) on a real index, with a mesh of nodes members started on
// in-memory networks (0: no mesh).
func realRig(tb testing.TB, backends, nodes int) *Handler {
	tb.Helper()
	ix, err := tree.New(tree.DefaultConfig())
	if err != nil {
		tb.Fatal(err)
	}
	var first *mesh.Node
	if nodes > 0 {
		repl := transport.NewMemNetwork(1)
		tb.Cleanup(func() { repl.Close() })
		gossip := meshtest.NewMemberNetwork(7946)
		for i := 0; i < nodes; i++ {
			name := fmt.Sprintf("r%d", i+1)
			nix := ix
			if i > 0 {
				nix, _ = tree.New(tree.DefaultConfig())
			}
			ep, _ := repl.Endpoint(name)
			mt, _ := gossip.Transport(name)
			cfg := mesh.DefaultConfig()
			cfg.Name, cfg.DevMode, cfg.Membership = name, true, mesh.LocalTimings()
			if i > 0 {
				cfg.Seeds = []string{gossip.Addr("r1")}
			}
			n, err := mesh.New(cfg, mesh.Deps{Index: nix, Transport: ep, MemberTransport: mt})
			if err != nil {
				tb.Fatal(err)
			}
			if err := n.Start(context.Background()); err != nil {
				tb.Fatal(err)
			}
			tb.Cleanup(func() { n.Close() })
			if i == 0 {
				first = n
			}
		}
		for deadline := time.Now().Add(30 * time.Second); len(first.Status().Peers) < nodes-1; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				tb.Fatalf("the mesh did not form: %+v", first.Status().Members)
			}
		}
	}
	cfg := router.DefaultConfig()
	for i := 0; i < backends; i++ {
		cfg.Backends = append(cfg.Backends, router.BackendConfig{Name: fmt.Sprintf("vllm-%d", i),
			URL: fmt.Sprintf("http://127.0.0.1:%d", 1+i), Models: []string{"llama"}})
	}
	deps := router.Deps{Index: ix}
	if first != nil {
		deps.Peers, deps.Learner = first, first
	}
	rt, err := router.New(cfg, deps)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { rt.Close() })
	d := Deps{Node: "r1", Router: rt, Index: ix}
	if first != nil {
		d.Mesh = first
	}
	return New(d)
}

func TestStateFromARealRouterAndMesh(t *testing.T) {
	h := realRig(t, 4, 3)
	var st State
	if err := json.Unmarshal(get(t, mux(h), StatePath).Body.Bytes(), &st); err != nil {
		t.Fatal(err)
	}
	if st.Policy != "kvmesh" || len(st.Backends) != 4 || st.Backends[3].Name != "vllm-3" || st.Backends[0].Models[0] != "llama" ||
		len(st.Matched.Le) == 0 || st.Index.Capacity == 0 || st.Index.Backends != 4 {
		t.Errorf("router or index: %+v", st)
	}
	if st.Mesh == nil || len(st.Mesh.Members) != 3 || len(st.Mesh.Peers) != 2 {
		t.Errorf("mesh: %+v", st.Mesh)
	}
}

// BenchmarkState is the cost of one /ui/state answer built afresh (the
// sharing of StateMaxAge off): a router with 8 backends, an index and a
// mesh of 3 nodes. The page polls 5 times a second; 5 viewers make 25
// requests a second, so the node spends 25 x ns/op per second on them
// (less: viewers within StateMaxAge share one document).
func BenchmarkState(b *testing.B) {
	h := realRig(b, 8, 3)
	h.maxAge = 0
	m := mux(h)
	req := httptest.NewRequest(http.MethodGet, StatePath, nil)
	w := httptest.NewRecorder()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		w.Body.Reset()
		m.ServeHTTP(w, req)
	}
	b.StopTimer()
	perSec := 25 * float64(b.Elapsed().Nanoseconds()) / float64(b.N) // ns of CPU per second of 5 viewers
	b.ReportMetric(perSec/1e9*100, "%cpu@5viewers")
	b.ReportMetric(float64(w.Body.Len()), "bytes/doc")
}

// BenchmarkStateHTTP is BenchmarkState over a loopback connection (client
// and server in this process: the figure counts both ends).
func BenchmarkStateHTTP(b *testing.B) {
	h := realRig(b, 8, 3)
	h.maxAge = 0
	srv := httptest.NewServer(mux(h))
	defer srv.Close()
	client := srv.Client()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		resp, err := client.Get(srv.URL + StatePath)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	b.StopTimer()
	b.ReportMetric(25*float64(b.Elapsed().Nanoseconds())/float64(b.N)/1e9*100, "%cpu@5viewers")
}

// The state names the process (started_ms, the same in every document) and
// the mesh incarnation exactly: as hex in a string, since a uint64 as a
// JSON number loses its low bits in JavaScript.
func TestStateIdentityIsExact(t *testing.T) {
	now := time.UnixMilli(1_800_000_000_000)
	ms := fakeMesh{AdminView: mesh.AdminView{Topology: "full-mesh", Incarnation: 0xdeadbeefcafebabe}}
	h := New(Deps{Router: &fakeRouter{}, Index: fakeIndex{}, Mesh: ms, Now: func() time.Time { return now }})
	m := mux(h)
	first := get(t, m, StatePath).Body.String()
	if !strings.Contains(first, `"incarnation":"deadbeefcafebabe"`) {
		t.Errorf("incarnation not as exact hex: %s", first)
	}
	now = now.Add(time.Hour)
	var st State
	if err := json.Unmarshal(get(t, m, StatePath).Body.Bytes(), &st); err != nil {
		t.Fatal(err)
	}
	if st.StartedMs != 1_800_000_000_000 || st.UptimeMs != time.Hour.Milliseconds() {
		t.Errorf("started_ms %d, uptime_ms %d", st.StartedMs, st.UptimeMs)
	}
	if st.SignalMaxAgeMs != router.DefaultConfig().SignalMaxAge.Milliseconds() {
		t.Errorf("signal_max_age_ms %d: not the router's default", st.SignalMaxAgeMs)
	}
}
