package crdt

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/kvmesh/kvmesh/tree"
)

func sampleBatch(n int, r *rand.Rand) Batch {
	b := Batch{Floor: 12345, Backends: []tree.BackendEntry{
		{Name: "http://10.0.0.1:8000", Gen: 2, State: tree.BackendActive, Time: tree.MakeTimestamp(1_700_000_000_000, 3), Origin: tree.NodeIDOf("a")},
		{Name: "http://10.0.0.2:8000", Gen: 0, State: tree.BackendRemoved, Time: tree.MakeTimestamp(1_700_000_000_100, 0), Origin: tree.NodeIDOf("b")},
	}}
	base := int64(1_700_000_000_000)
	for i := 0; i < n; i++ {
		// Claims as one flush would carry them: learned within ~10 ms by two
		// nodes, with one of two TTLs.
		ms := base + int64(r.IntN(10))
		ttl := []int64{30_000, 600_000}[r.IntN(2)]
		b.Claims = append(b.Claims, WireClaim{Key: tree.Key(r.Uint64() | 1), Backend: uint32(r.IntN(2)), Gen: uint16(r.IntN(3)),
			Time: tree.MakeTimestamp(ms, uint16(r.IntN(40))), Expires: ms + ttl, Origin: tree.NodeIDOf([]string{"a", "b"}[r.IntN(2)])})
	}
	return b
}

func TestWireRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 1))
	msgs := []*Message{
		{Type: MsgDelta, FromSeq: 10, ToSeq: 42, Batch: sampleBatch(50, r)},
		{Type: MsgAck},
		{Type: MsgFull, Epoch: 3, Chunk: 7, Chunks: 256, BaseSeq: 99, Batch: sampleBatch(10, r)},
		{Type: MsgFullAck, Epoch: 3, Chunk: 255, Chunks: 256},
		{Type: MsgDigest, Now: 1234, Digest: []uint64{1, 2, 3, 1 << 63}, Registry: 77, Batch: Batch{Floor: -5}},
		{Type: MsgRepairRequest, Now: 99, Buckets: []uint32{0, 17}},
		{Type: MsgRepair, Batch: sampleBatch(3, r)},
		{Type: MsgDelta, FromSeq: 1, ToSeq: 1, Batch: Batch{Backends: sampleBatch(0, r).Backends}},
	}
	for _, m := range msgs {
		m.From, m.Incarnation, m.AckUpTo, m.AckFor = "node-a", 0xdeadbeef, 17, 0xfeed
		data, err := Encode(nil, m)
		if err != nil {
			t.Fatalf("%v: %v", m.Type, err)
		}
		got, err := Decode(data)
		if err != nil {
			t.Fatalf("%v: decode: %v", m.Type, err)
		}
		normalize(m)
		normalize(got)
		if !reflect.DeepEqual(got, m) {
			t.Fatalf("%v round trip:\n got %+v\nwant %+v", m.Type, got, m)
		}
	}
}

// normalize makes empty and nil slices compare equal.
func normalize(m *Message) {
	if len(m.Batch.Backends) == 0 {
		m.Batch.Backends = nil
	}
	if len(m.Batch.Claims) == 0 {
		m.Batch.Claims = nil
	}
	if len(m.Digest) == 0 {
		m.Digest = nil
	}
	if len(m.Buckets) == 0 {
		m.Buckets = nil
	}
}

func TestDecodeRejectsBadInput(t *testing.T) {
	r := rand.New(rand.NewPCG(2, 2))
	good, err := Encode(nil, &Message{Type: MsgDelta, From: "a", ToSeq: 5, Batch: sampleBatch(20, r)})
	if err != nil {
		t.Fatal(err)
	}
	// Every truncation is an error, never a panic.
	for i := 0; i < len(good); i++ {
		if _, err := Decode(good[:i]); err == nil {
			t.Fatalf("truncated to %d bytes: no error", i)
		}
	}
	var de *DecodeError
	cases := map[string][]byte{
		"empty":        nil,
		"not an array": {0x01},
		"huge":         make([]byte, MaxMessageBytes+1),
	}
	mk := func(f func(*Message)) []byte {
		m := &Message{Type: MsgDelta, From: "a", ToSeq: 5, Batch: sampleBatch(3, r)}
		f(m)
		b, err := Encode(nil, m)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	cases["reversed range"] = mk(func(m *Message) { m.FromSeq = 9 })
	cases["no sender"] = mk(func(m *Message) { m.From = "" })
	cases["key 0"] = mk(func(m *Message) { m.Batch.Claims[0].Key = 0 })
	cases["backend index"] = mk(func(m *Message) { m.Batch.Claims[1].Backend = 9 })
	cases["bad state"] = mk(func(m *Message) { m.Batch.Backends[0].State = 9 })
	cases["empty backend name"] = mk(func(m *Message) { m.Batch.Backends[1].Name = "" })
	cases["version"] = bytes.Replace(mk(func(*Message) {}), []byte{0x87, WireVersion}, []byte{0x87, WireVersion + 1}, 1)
	for name, data := range cases {
		if _, err := Decode(data); err == nil || !errors.As(err, &de) {
			t.Errorf("%s: got %v, want a *DecodeError", name, err)
		}
	}
	if _, err := Encode(nil, &Message{Type: 99}); err == nil {
		t.Error("encoded an unknown type")
	}
}

// TestBytesPerClaim is the wire budget: at most 48 bytes per claim in a
// batch of 1,000 (the benchmark reports the exact figure).
func TestBytesPerClaim(t *testing.T) {
	if per := bytesPerClaim(t, 1000); per > 48 {
		t.Fatalf("%.1f bytes per claim, above 48", per)
	}
}

func bytesPerClaim(tb testing.TB, n int) float64 {
	m := &Message{Type: MsgDelta, From: "router-1", Incarnation: 1 << 40, ToSeq: 1000, Batch: sampleBatch(n, rand.New(rand.NewPCG(3, 3)))}
	data, err := Encode(nil, m)
	if err != nil {
		tb.Fatal(err)
	}
	return float64(len(data)) / float64(n)
}

func FuzzDecode(f *testing.F) {
	r := rand.New(rand.NewPCG(4, 4))
	for _, m := range []*Message{
		{Type: MsgDelta, From: "a", ToSeq: 3, Batch: sampleBatch(4, r)},
		{Type: MsgFull, From: "b", Chunks: 4, Chunk: 1, Batch: sampleBatch(2, r)},
		{Type: MsgDigest, From: "c", Digest: []uint64{1, 2}},
		{Type: MsgRepairRequest, From: "d", Buckets: []uint32{1}},
		{Type: MsgAck, From: "e"},
	} {
		data, err := Encode(nil, m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := Decode(data)
		if err != nil {
			var de *DecodeError
			if !errors.As(err, &de) {
				t.Fatalf("error is not a *DecodeError: %v", err)
			}
			return
		}
		// What decodes re-encodes, and decodes to the same message.
		again, err := Encode(nil, m)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		m2, err := Decode(again)
		if err != nil {
			t.Fatalf("re-decode: %v", err)
		}
		normalize(m)
		normalize(m2)
		if !reflect.DeepEqual(m, m2) {
			t.Fatalf("unstable: %+v vs %+v", m, m2)
		}
		// A decoded batch can be applied without error or panic.
		ix, _ := tree.New(tree.Config{BlockTokens: 16, Capacity: 1024, MaxBackends: 8, EvictFraction: 0.1, RefreshFraction: 0.25, SweepPerWrite: 2})
		cfg := DefaultConfig()
		cfg.Name = "fuzz"
		cfg.DigestBuckets = 16
		rep, err := New(cfg, ix, 1)
		if err != nil {
			t.Fatal(err)
		}
		rep.AddPeer(m.From, 0)
		_ = rep.Receive(m, 1_700_000_000_000)
		rep.Outgoing(1_700_000_000_001, nil)
	})
}

func TestDecodeRejectsBadColumns(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 9))
	m := &Message{Type: MsgRepair, From: "a", Batch: sampleBatch(4, r)}
	w := toWire(&m.Batch)
	cases := map[string]func(*wireBatch){
		"ragged keys":     func(w *wireBatch) { w.Keys = w.Keys[:len(w.Keys)-3] },
		"missing fields":  func(w *wireBatch) { w.Fields = w.Fields[:len(w.Fields)-1] },
		"trailing fields": func(w *wireBatch) { w.Fields = append(w.Fields, 1) },
		"bad varint": func(w *wireBatch) {
			w.Fields = append(w.Fields[:0:0], 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff)
		},
	}
	for name, mutate := range cases {
		c := w
		c.Keys = append([]byte(nil), w.Keys...)
		c.Fields = append([]byte(nil), w.Fields...)
		mutate(&c)
		var b Batch
		var de *DecodeError
		if err := fromWire(&c, &b); err == nil || !errors.As(err, &de) {
			t.Errorf("%s: got %v", name, err)
		}
	}
}
