package mesh

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/kvmesh/kvmesh/crdt"
	"github.com/kvmesh/kvmesh/transport"
	"github.com/kvmesh/kvmesh/tree"
)

// oneBooking is a load source with one booking at backend "b0".
type oneBooking struct{ id tree.BackendID }

func (s oneBooking) LocalLoad(fn func(id tree.BackendID, units, requests, inFlight, written int64)) {
	fn(s.id, 700, 1, 1, 700)
}
func (oneBooking) Routed() uint64 { return 1 }

// gaugeOf reads a metric from a node's registry: name{label=value}, or
// an unlabelled one with label ""; -1 when it is not exported.
func gaugeOf(t *testing.T, tn *testNode, name, label, value string) float64 {
	t.Helper()
	mfs, err := tn.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.Metric {
			if label == "" {
				return metricNumber(m)
			}
			for _, lp := range m.Label {
				if lp.GetName() == label && lp.GetValue() == value {
					return metricNumber(m)
				}
			}
		}
	}
	return -1
}

func metricNumber(m *dto.Metric) float64 {
	if m.Counter != nil {
		return m.Counter.GetValue()
	}
	return m.Gauge.GetValue()
}

// TestKeySchemeMismatchIsNotAPeer: a node started with another block size
// derives other keys from the same prompt. It stays a member, listed with
// the reason and counted, but claims do not flow either way (they would
// only fill the other's index), while the load channel, whose bookings
// mean the same to both, still does; claim messages it sends anyway are
// dropped and counted.
func TestKeySchemeMismatchIsNotAPeer(t *testing.T) {
	c := newTestCluster(t, nil)
	c.startN(2)
	c.icfg.BlockTokens = 32 // every node started from here on
	odd := c.start("n02")
	a, b := c.node("n00"), c.node("n01")

	waitFor(t, time.Minute, "n00 to see n02 alive and n01 as its peer", func() bool {
		seen := false
		for _, m := range a.n.Members() {
			seen = seen || m.Name == "n02" && m.Status == "alive"
		}
		return seen && len(a.peers()) == 1
	})
	for _, m := range a.n.Members() {
		switch m.Name {
		case "n01":
			if !m.Peer || m.NotPeer != "" {
				t.Fatalf("n01 (same scheme): peer %v, not-peer reason %q", m.Peer, m.NotPeer)
			}
		case "n02":
			if m.Peer || !strings.Contains(m.NotPeer, "derives claim keys as k1.b32.c512, this node as k1.b16.c512") {
				t.Fatalf("n02 (block size 32): peer %v, not-peer reason %q", m.Peer, m.NotPeer)
			}
		}
	}
	if got := gaugeOf(t, a, "kvmesh_mesh_incompatible_members", "reason", notPeerKeys); got != 1 {
		t.Fatalf("kvmesh_mesh_incompatible_members{reason=key_scheme} = %v on n00, want 1", got)
	}
	waitFor(t, time.Minute, "n02 to count n00 and n01 as members of another key scheme", func() bool {
		return gaugeOf(t, odd, "kvmesh_mesh_incompatible_members", "reason", notPeerKeys) == 2
	})
	for _, name := range a.n.AliveMembers() {
		if name == "n02" {
			t.Fatal("n02 is among the members that own precise-mode streams for n00, yet its claims never reach n00")
		}
	}

	// Claims learned on n00 reach n01 and not n02; n02's reach no one.
	p := randomPrompt(newRand(7), 6)
	a.learn(t, p, "b0", time.Hour)
	q := randomPrompt(newRand(8), 6)
	odd.learn(t, q, "b1", time.Hour)
	waitFor(t, time.Minute, "n01 to learn n00's claim", func() bool { return b.depth(p, "b0") == fullDepth(p) })

	// Backend names travel with claims: b0 (only n00 and n01 learned on
	// it) is not in n02's registry, b1 (only n02) in no other, checked
	// below. (Depths could not tell: each node keys prompts its own way.)
	// n02 shares its load: n00 reads its booking (the channel spans schemes).
	if _, ok := odd.ix.BackendByName("b0"); ok {
		t.Fatal("n00's backend b0 reached n02's registry: its claims flowed")
	}
	id, err := odd.ix.EnsureBackend("b0")
	if err != nil {
		t.Fatal(err)
	}
	odd.n.SetLoadSource(oneBooking{id: id})
	aid, _ := a.ix.BackendByName("b0")
	waitFor(t, time.Minute, "n00 to read n02's booking at b0", func() bool {
		units, _, _ := a.n.PeerLoad(aid)
		return units == 700
	})
	// By now n00 has flushed and run anti-entropy with n01 many times, and
	// n02's messages reach n00.
	if _, ok := a.ix.BackendByName("b1"); ok {
		t.Fatal("n02's backend b1 reached n00's registry: its claims flowed")
	}
	if _, ok := b.ix.BackendByName("b1"); ok {
		t.Fatal("n02's backend b1 reached n01's registry: its claims flowed")
	}
	if d := odd.depth(p, "b0"); d != 0 {
		t.Fatalf("n02 (block size 32) took n00's claim: depth %d", d)
	}
	if a.ix.Len() != b.ix.Len() || a.depth(q, "b1") != 0 || b.depth(q, "b1") != 0 {
		t.Fatalf("n02's claim reached its other-scheme members (n00 %d claims, n01 %d)", a.ix.Len(), b.ix.Len())
	}

	// A claim message n02 sends anyway (an older build, a race with its
	// tags) is dropped and counted; n00's index does not change.
	before := a.ix.Len()
	dropped := gaugeOf(t, a, "kvmesh_mesh_unknown_sender_messages_total", "reason", notPeerKeys)
	var claims []crdt.WireClaim
	reg := odd.ix.Backends(nil)
	bid, _ := odd.ix.BackendByName("b1")
	odd.ix.Range(time.Now().UnixMilli(), func(cl *tree.Claim) bool {
		claims = append(claims, crdt.WireClaim{Key: cl.Key, Backend: 0, Gen: cl.Gen, Time: cl.Time, Expires: cl.Expires, Origin: cl.Origin})
		return true
	})
	msg, err := crdt.Encode(nil, &crdt.Message{Type: crdt.MsgDelta, From: "n02", Incarnation: odd.n.inc, FromSeq: 0, ToSeq: 1,
		Batch: crdt.Batch{Backends: []tree.BackendEntry{reg[bid]}, Claims: claims}})
	if err != nil || len(claims) == 0 {
		t.Fatalf("n02's delta: %d claims, %v", len(claims), err)
	}
	a.n.handle(transport.Message{From: "n02", Data: msg})
	if got := gaugeOf(t, a, "kvmesh_mesh_unknown_sender_messages_total", "reason", notPeerKeys); got != dropped+1 {
		t.Fatalf("key_scheme drops went from %v to %v, want one more", dropped, got)
	}
	if a.ix.Len() != before {
		t.Fatalf("n00's index went from %d to %d claims on n02's message", before, a.ix.Len())
	}
}

// notPeer, case by case: a member without the keys tag (a version before
// it) is taken at its word and stays a peer.
func TestNotPeerReasons(t *testing.T) {
	n := &Node{scheme: "k1.b16.c512"}
	proto := strconv.Itoa(ProtocolVersion)
	for _, c := range []struct {
		tags map[string]string
		want string
	}{
		{map[string]string{TagProtocol: proto, TagQUIC: "a:1", TagKeys: "k1.b16.c512"}, ""},
		{map[string]string{TagProtocol: proto, TagQUIC: "a:1"}, ""}, // before the tag
		{map[string]string{TagProtocol: proto, TagQUIC: "a:1", TagKeys: "k1.b16.c0"}, notPeerKeys},
		{map[string]string{TagProtocol: proto, TagKeys: "k1.b16.c512"}, notPeerNoQUIC},
		{map[string]string{TagProtocol: "0", TagQUIC: "a:1", TagKeys: "k1.b16.c512"}, notPeerProtocol},
		{map[string]string{TagQUIC: "a:1"}, notPeerProtocol},
	} {
		if got, why := n.notPeer(c.tags); got != c.want || (got == "") != (why == "") {
			t.Errorf("tags %v: reason %q (%q), want %q", c.tags, got, why, c.want)
		}
	}
}

// Lost marks name keys: a member of another key scheme's are dropped on
// receipt (and counted), while a peer's arrive.
func TestKeySchemeMismatchDropsLostMarks(t *testing.T) {
	c := newTestCluster(t, func(cfg *Config) { cfg.ShareLostMarks = true })
	var srcs []*lostLoad
	for i := 0; i < 3; i++ {
		if i == 2 {
			c.icfg.BlockTokens = 32
		}
		tn := c.start(nodeName(i))
		src := &lostLoad{fakeLoad: newFakeLoad(t, tn.ix)}
		tn.n.SetLoadSource(src)
		srcs = append(srcs, src)
	}
	reader := c.node("n00")
	waitFor(t, time.Minute, "n00 to hear both others' names", func() bool {
		reader.n.loadMu.Lock()
		defer reader.n.loadMu.Unlock()
		return len(reader.n.loads.peers) == 2 && reader.n.loads.namedAt.Load() > 0
	})
	for i, key := range []tree.Key{0, 0xbeef, 0xfeed} {
		if i == 0 {
			continue
		}
		id, _ := c.node(nodeName(i)).ix.BackendByName("b2")
		srcs[i].mu.Lock()
		srcs[i].out = []lostIn{{key: key, id: id, age: 100}}
		srcs[i].mu.Unlock()
	}
	drops := func() float64 { return counterValue(reader.n.m.loadDrops.WithLabelValues(notPeerKeys)) }
	waitFor(t, time.Minute, "n01's mark to arrive and n02's to be dropped or arrive", func() bool {
		return len(srcs[0].received()) > 0 && (drops() > 0 || len(srcs[0].received()) > 1)
	})
	for _, m := range srcs[0].received() {
		if m.key != 0xbeef {
			t.Fatalf("n00 received %+v: n02's mark (key feed) came through", m)
		}
	}
}

// PeerListed: a backend a peer's load messages name is listed (idle or
// not); one no peer routes to is not; complete once every peer was heard.
func TestPeerListed(t *testing.T) {
	c := newTestCluster(t, nil)
	a, b := c.start("n00"), c.start("n01")
	if _, err := a.ix.EnsureBackend("gone"); err != nil { // only in n00's registry: nobody routes to it
		t.Fatal(err)
	}
	a.n.SetLoadSource(newFakeLoad(t, a.ix))
	b.n.SetLoadSource(newFakeLoad(t, b.ix)) // names b0-b3, all idle
	gone, _ := a.ix.BackendByName("gone")
	b2, _ := a.ix.BackendByName("b2")
	c.waitMesh(time.Minute)
	// Complete only once n01's first load message is in.
	if _, complete := a.n.PeerListed(b2); complete && a.n.loadView().Peers == nil {
		t.Fatal("complete before n01 was heard")
	}
	waitFor(t, time.Minute, "n00 to hear n01's load", func() bool {
		_, complete := a.n.PeerListed(b2)
		return complete
	})
	if listed, _ := a.n.PeerListed(b2); !listed {
		t.Fatal("b2, which n01 routes to (idle), is not listed")
	}
	if listed, complete := a.n.PeerListed(gone); listed || !complete {
		t.Fatalf("gone: listed %v, complete %v; want false, true", listed, complete)
	}
}

// A member whose index holds another number of claims is still a peer, but
// it is listed with a warning and counted: the smallest index's evictions
// hold for every node.
func TestOtherCapacityIsAPeerWithAWarning(t *testing.T) {
	c := newTestCluster(t, nil)
	c.startN(2)
	c.icfg.Capacity *= 2
	big := c.start("n02")
	a := c.node("n00")
	c.waitMesh(time.Minute)
	want := fmt.Sprintf("holds %d claims (index.capacity), this node %d", c.icfg.Capacity, c.icfg.Capacity/2)
	for _, m := range a.n.Members() {
		switch m.Name {
		case "n01":
			if m.Warning != "" {
				t.Fatalf("n01 (the same capacity): warning %q", m.Warning)
			}
		case "n02":
			if !m.Peer || m.NotPeer != "" || !strings.Contains(m.Warning, want) {
				t.Fatalf("n02: peer %v, not-peer %q, warning %q; want a peer warned of %q", m.Peer, m.NotPeer, m.Warning, want)
			}
		}
	}
	if got := gaugeOf(t, a, "kvmesh_mesh_other_capacity_members", "", ""); got != 1 {
		t.Fatalf("kvmesh_mesh_other_capacity_members = %v on n00, want 1", got)
	}
	if got := gaugeOf(t, big, "kvmesh_mesh_other_capacity_members", "", ""); got != 2 {
		t.Fatalf("kvmesh_mesh_other_capacity_members = %v on n02, want 2", got)
	}
}
