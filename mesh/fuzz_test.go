package mesh

import (
	"testing"
	"time"

	"github.com/kvmesh/kvmesh/crdt"
	"github.com/kvmesh/kvmesh/transport"
	"github.com/kvmesh/kvmesh/tree"
)

// fuzzNode is a Node that is not started but accepts messages from
// "peer", a member and a replication peer.
func fuzzNode(f *testing.F) *Node {
	ix, err := tree.New(testIndexConfig())
	if err != nil {
		f.Fatal(err)
	}
	ep, err := transport.NewMemNetwork(1).Endpoint("self")
	if err != nil {
		f.Fatal(err)
	}
	cfg := testConfig("self")
	n, err := New(cfg, Deps{Index: ix, Transport: ep})
	if err != nil {
		f.Fatal(err)
	}
	known := map[string]struct{}{"peer": {}}
	n.known.Store(&known)
	n.rep.AddPeer("peer", time.Now().UnixMilli())
	return n
}

// FuzzHandle feeds arbitrary bytes from a member to the receive path: it
// never panics, and a message that does not decode is counted and leaves
// the state as it was.
func FuzzHandle(f *testing.F) {
	n := fuzzNode(f)
	rng := newRand(5)
	p := randomPrompt(rng, 40)
	delta := forgedDelta(f, "peer", p, backends[0])
	f.Add(delta)
	f.Add(delta[:len(delta)-3])
	for _, m := range []*crdt.Message{
		{Type: crdt.MsgAck, From: "peer", Incarnation: 9, AckUpTo: 3, AckFor: 1},
		{Type: crdt.MsgDigest, From: "peer", Incarnation: 9, Now: 1, Digest: make([]uint64, 256)},
		{Type: crdt.MsgRepairRequest, From: "peer", Incarnation: 9, Buckets: []uint32{0, 7, 1 << 20}},
		{Type: crdt.MsgFullAck, From: "peer", Incarnation: 9, Epoch: 1, Chunk: 3, Chunks: 2},
	} {
		data, err := crdt.Encode(nil, m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte{})
	f.Add([]byte("\x87\x01\x01dpeer"))
	for _, m := range sampleLoadMsgs() {
		f.Add(appendLoad(nil, &m))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		before := n.StateDigest()
		errs := counterValue(n.m.decodeErrors)
		loadErrs := counterValue(n.m.loadDrops.WithLabelValues("decode_error"))
		n.handle(transport.Message{From: "peer", Data: data})
		if isLoadMessage(data) {
			// The load channel never touches the claims.
			if n.StateDigest() != before {
				t.Fatal("a load message changed the claim state")
			}
			var m loadMsg
			if decodeLoad(data, &m) != nil && counterValue(n.m.loadDrops.WithLabelValues("decode_error")) != loadErrs+1 {
				t.Fatal("an undecodable load message was not counted")
			}
			return
		}
		if _, err := crdt.Decode(data); err != nil {
			if counterValue(n.m.decodeErrors) != errs+1 {
				t.Fatal("an undecodable message was not counted")
			}
			if n.StateDigest() != before {
				t.Fatal("an undecodable message changed the state")
			}
		}
		// Whatever arrived, the replica still produces sendable messages.
		n.mu.Lock()
		out := n.rep.Outgoing(time.Now().UnixMilli(), nil)
		n.mu.Unlock()
		for _, e := range out {
			if _, err := crdt.Encode(nil, e.Msg); err != nil {
				t.Fatalf("after the input, the replica built an unencodable %v: %v", e.Msg.Type, err)
			}
		}
	})
}

// FuzzParseSeed: any --join entry parses or fails with an error, never a
// panic; what parses has a host and, for a host seed, a valid port, and
// parses again to the same seed once written back.
func FuzzParseSeed(f *testing.F) {
	for _, s := range []string{"10.0.0.5:7946", "[fd00::5]:8000", "fd00::5", "kvmesh.ns.svc", "_serf._tcp.kvmesh.ns.svc", "host:0", ":", "[", "]:1", "_", "a:b:c"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		sd, err := parseSeed(s, 7946)
		if err != nil {
			return
		}
		if sd.host == "" {
			t.Fatalf("parseSeed(%q) = %+v: empty host", s, sd)
		}
		if sd.kind == seedSRV {
			return
		}
		if sd.port < 1 || sd.port > 65535 {
			t.Fatalf("parseSeed(%q): port %d", s, sd.port)
		}
		again, err := parseSeed(joinPort(nil, []string{sd.host}, sd.port)[0], 1)
		if err != nil || again != sd {
			t.Fatalf("parseSeed(%q) = %+v, but its canonical form parses to %+v, %v", s, sd, again, err)
		}
	})
}
