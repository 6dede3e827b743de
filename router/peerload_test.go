package router

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/kvmesh/kvmesh/tree"
)

// fakePeers is a PeerLoad with fixed figures per backend id.
type fakePeers struct {
	units, requests, inFlight map[tree.BackendID]float64
	share                     float64
	written                   map[tree.BackendID]float64
	changed                   int
}

func (f *fakePeers) PeerLoad(id tree.BackendID) (float64, float64, float64) {
	return f.units[id], f.requests[id], f.inFlight[id]
}
func (f *fakePeers) MeshShare() float64                    { return f.share }
func (f *fakePeers) BookingsChanged()                      { f.changed++ }
func (f *fakePeers) PeerWritten(id tree.BackendID) float64 { return f.written[id] }

// Prefill other nodes queued at a holder counts like this node's own: the
// holder that is idle here but has a long queue from the mesh loses the
// request to an idle backend, exactly as if this node had queued it.
func TestKVMeshPricesPeersPendingPrefill(t *testing.T) {
	p := newKVMeshPolicy(DefaultKVMeshConfig())
	f := p.cfg.PrefillWeight + p.cfg.CacheWeight
	own := newPolicyCase(40, 21, "a", "b").match(40, 0).pending(f*2560+100, 0)
	wantName, _ := own.choose(p)
	peers := newPolicyCase(40, 21, "a", "b").match(40, 0)
	peers.cands[0].Load.PeerPendingPrefill, peers.cands[0].Load.PeerPendingRequests = f*2560+100, 1
	peers.cands[0].Load.PeerInFlight = 1
	name, d := peers.choose(p)
	if name != wantName || name != "b" {
		t.Fatalf("peers' queue at the holder: chose %s %+v (costs %v), want b as with our own queue", name, d, peers.scores)
	}
	if peers.scores[0] != own.scores[0] {
		t.Fatalf("the holder's cost with the queue booked by peers %v differs from booked here %v", peers.scores[0], own.scores[0])
	}
}

// A backend's waiting requests that the mesh had pending when the signal
// was sampled are not counted again as outside work.
func TestKVMeshPeersPendingNotCountedTwice(t *testing.T) {
	p := newKVMeshPolicy(DefaultKVMeshConfig())
	pc := newPolicyCase(40, 22, "a", "b").match(20, 0)
	l := &pc.cands[0].Load
	l.PeerPendingPrefill, l.PeerPendingRequests, l.PeerInFlight = 100, 3, 3
	l.Waiting, l.OwnAtSignal, l.Has = 3, 3, HasWaiting
	pc.choose(p)
	withSignal := pc.scores[0]
	l.Waiting, l.Has = 0, 0
	pc.choose(p)
	if withSignal != pc.scores[0] {
		t.Fatalf("the mesh's own 3 waiting requests changed a's cost from %v to %v", pc.scores[0], withSignal)
	}
}

// A node that routes a quarter of the mesh's traffic counts every hit it
// sees as four: a prefix hot across the mesh is hot here at a quarter of
// the local hits.
func TestKVMeshHotPrefixMeshWide(t *testing.T) {
	cfg := DefaultKVMeshConfig()
	cfg.HotThreshold = 8
	cfg.LoadOverrideFactor = 2
	cfg.LoadOverrideFloor = 0.1
	p := newKVMeshPolicy(cfg)
	pc := newPolicyCase(20, 23, "a", "b", "c").match(20, 0, 0)
	pc.req.MeshShare = 0.25
	pc.choose(p) // hit 1
	pc.pending(1000, 10, 0)
	if name, d := pc.choose(p); name != "c" || d.Reason != ReasonReplicate { // hit 2: 8 mesh-wide
		t.Fatalf("2 hits at a 0.25 share: chose %s %+v, want c replicate", name, d)
	}
	alone := newKVMeshPolicy(cfg)
	pc2 := newPolicyCase(20, 23, "a", "b", "c").match(20, 0, 0)
	pc2.choose(alone)
	pc2.pending(1000, 10, 0)
	if name, d := pc2.choose(alone); d.Reason != ReasonLoadOverride {
		t.Fatalf("2 hits alone: chose %s %+v, want a plain load override", name, d)
	}
}

// The router reports its own bookings to the mesh, reads the peers' into
// every candidate, and shows both in /debug/route and /admin/backends.
func TestRouterSharesAndReadsBookings(t *testing.T) {
	a, b := newFakeBackend(t, "a"), newFakeBackend(t, "b")
	peers := &fakePeers{units: map[tree.BackendID]float64{}, requests: map[tree.BackendID]float64{},
		inFlight: map[tree.BackendID]float64{}, share: 0.5}
	g := newRig(t, func(_ *Config, d *Deps) { d.Peers = peers }, a, b)
	ida := g.rt.backendByName("a").id
	peers.units[ida], peers.requests[ida], peers.inFlight[ida] = 9000, 2, 5

	p := g.rt.backendByName("b").addPending(700, 0, time.Time{})
	if peers.changed != 1 {
		t.Fatalf("dispatch told the mesh %d times, want 1", peers.changed)
	}
	got := map[tree.BackendID][4]int64{}
	g.rt.LocalLoad(func(id tree.BackendID, units, requests, inFlight, written int64) {
		got[id] = [4]int64{units, requests, inFlight, written}
	})
	p.release(time.Time{}, false)
	p.release(time.Time{}, false)
	if peers.changed != 2 {
		t.Fatalf("dispatch and release told the mesh %d times, want 2", peers.changed)
	}
	if v := got[g.rt.backendByName("b").id]; v != [4]int64{700, 1, 0, 700} {
		t.Fatalf("LocalLoad reported %v for b, want 700 units, 1 request, 0 in flight, 700 written", v)
	}
	if len(got) != 2 {
		t.Fatalf("LocalLoad reported %d backends, want 2", len(got))
	}

	code, body := adminCall(t, g, "GET", "/admin/backends", "")
	if code != http.StatusOK {
		t.Fatalf("/admin/backends: %d", code)
	}
	var list []BackendStatus
	if err := json.Unmarshal([]byte(body), &list); err != nil {
		t.Fatal(err)
	}
	if l := list[0].Load; l.PeerPendingPrefillUnits != 9000 || l.PeerPendingRequests != 2 || l.PeerInFlight != 5 {
		t.Fatalf("/admin/backends shows a's peer bookings as %+v", l)
	}
	if got := g.counter("kvmesh_router_backend_peer_pending_prefill_units", "backend", "a"); got != 9000 {
		t.Fatalf("peer pending gauge %v, want 9000", got)
	}

	// An ORCA report counts the peers' pending requests as the mesh's own.
	h := http.Header{orcaResponseHeader: {"TEXT named_metrics.num_requests_waiting=2"}}
	if !g.rt.observeORCA(g.rt.backendByName("a"), h, time.Now()) {
		t.Fatal("report not taken")
	}
	if lv := g.rt.backendByName("a").loadView(time.Now(), &g.rt.cfg, peers); lv.OwnAtSignal != 2 {
		t.Fatalf("mesh pending at the signal %v, want the peers' 2", lv.OwnAtSignal)
	}

	before := g.rt.Routed()
	resp := g.do("POST", "/v1/chat/completions", chat("m1", "system", "hello"))
	resp.Body.Close()
	if g.rt.Routed() != before+1 {
		t.Fatalf("Routed went from %d to %d after one request", before, g.rt.Routed())
	}
}
