package crdt

import (
	"math/rand/v2"
	"testing"

	"github.com/kvmesh/kvmesh/tree"
)

// BenchmarkEncodeBatch1000 encodes a delta of 1,000 claims and reports the
// bytes per claim (budget: 48).
func BenchmarkEncodeBatch1000(b *testing.B) {
	m := &Message{Type: MsgDelta, From: "router-1", Incarnation: 1 << 40, ToSeq: 1000, Batch: sampleBatch(1000, rand.New(rand.NewPCG(3, 3)))}
	var buf []byte
	b.ReportAllocs()
	for b.Loop() {
		var err error
		buf, err = Encode(buf[:0], m)
		if err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(buf))/1000, "B/claim")
}

// BenchmarkDecodeBatch1000 decodes the same message.
func BenchmarkDecodeBatch1000(b *testing.B) {
	m := &Message{Type: MsgDelta, From: "router-1", Incarnation: 1 << 40, ToSeq: 1000, Batch: sampleBatch(1000, rand.New(rand.NewPCG(3, 3)))}
	data, _ := Encode(nil, m)
	b.ReportAllocs()
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, err := Decode(data); err != nil {
			b.Fatal(err)
		}
	}
}

func benchReplica(b *testing.B, capacity int) *Replica {
	icfg := tree.DefaultConfig()
	icfg.Capacity = capacity
	ix, err := tree.New(icfg)
	if err != nil {
		b.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.Name = "bench"
	r, err := New(cfg, ix, 1)
	if err != nil {
		b.Fatal(err)
	}
	for _, n := range []string{"http://10.0.0.1:8000", "http://10.0.0.2:8000"} {
		if _, err := ix.EnsureBackend(n); err != nil {
			b.Fatal(err)
		}
	}
	return r
}

// BenchmarkApplyDelta1000 applies a received 1,000-claim delta (all novel)
// to a replica.
func BenchmarkApplyDelta1000(b *testing.B) {
	r := benchReplica(b, 1<<20)
	rng := rand.New(rand.NewPCG(5, 5))
	const now = 1_700_000_000_005
	msgs := make([]*Message, 64)
	for i := range msgs {
		// Claims valid for the registry they carry (backend active, current
		// generation), so every one of them is applied.
		b := sampleBatch(1000, rng)
		b.Backends = b.Backends[:1]
		for j := range b.Claims {
			b.Claims[j].Backend, b.Claims[j].Gen = 0, b.Backends[0].Gen
			b.Claims[j].Time = tree.MakeTimestamp(now-5, uint16(j))
			b.Claims[j].Expires = now + 600_000
		}
		msgs[i] = &Message{Type: MsgDelta, From: "peer", Incarnation: 1, ToSeq: 1000, Batch: b}
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		m := msgs[i%len(msgs)]
		// Fresh keys every time so each apply inserts 1,000 claims, and
		// later expiries than earlier batches, so that once the index is
		// full (after ~1,000 batches) eviction drops older batches, as in
		// steady state, rather than these.
		for j := range m.Batch.Claims {
			m.Batch.Claims[j].Key = tree.Key(rng.Uint64() | 1)
			m.Batch.Claims[j].Expires = now + 600_000 + int64(i)
		}
		if err := r.Receive(m, now); err != nil {
			b.Fatal(err)
		}
		i++
	}
	if applied := r.Stats().ClaimsApplied; applied != uint64(i*1000) {
		b.Fatalf("applied %d of %d claims", applied, i*1000)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(i*1000), "ns/claim")
}

func filledReplica(b *testing.B, n int) *Replica {
	r := benchReplica(b, n)
	rng := rand.New(rand.NewPCG(6, 6))
	batch := make([]tree.Claim, 0, 4096)
	for done := 0; done < n; {
		batch = batch[:0]
		for i := 0; i < 4096 && done+i < n; i++ {
			batch = append(batch, tree.Claim{Key: tree.Key(rng.Uint64() | 1), Backend: tree.BackendID(rng.IntN(2)),
				Time: tree.MakeTimestamp(1_700_000_000_000, 0), Expires: 1_700_003_600_000, Origin: 7})
		}
		r.Index().UpsertBatch(batch, 1_700_000_000_000, nil)
		done += len(batch)
	}
	return r
}

// BenchmarkDigest1M computes the bucketed digest of 1,000,000 claims.
func BenchmarkDigest1M(b *testing.B) {
	r := filledReplica(b, 1_000_000)
	var d []uint64
	b.ReportAllocs()
	for b.Loop() {
		d, _ = r.Digest(1_700_000_000_001, d)
	}
}

// BenchmarkFullStateEncode1M builds and encodes every full-state chunk of a
// 1,000,000-claim replica, and reports the total size.
func BenchmarkFullStateEncode1M(b *testing.B) {
	r := filledReplica(b, 1_000_000)
	r.reg = r.ix.Backends(r.reg[:0])
	var buf []byte
	total := 0
	b.ReportAllocs()
	for b.Loop() {
		total = 0
		chunks := r.fullChunks(r.ix.Len())
		per := r.cfg.DigestBuckets / chunks
		for i := 0; i < chunks; i++ {
			m := &Message{Type: MsgFull, From: "bench", Chunk: uint32(i), Chunks: uint32(chunks), Batch: r.bucketBatch(i*per, (i+1)*per, 1_700_000_000_001)}
			var err error
			buf, err = Encode(buf[:0], m)
			if err != nil {
				b.Fatal(err)
			}
			total += len(buf)
		}
	}
	b.ReportMetric(float64(total)/1e6, "MB/state")
	b.ReportMetric(float64(total)/float64(r.ix.Len()), "B/claim")
}

// BenchmarkSnapshotApply1M restores a snapshot of 1,000,000 claims into an
// empty index, as a node started with --state-dir does. Its claims come in
// slot order, that is key order: the index's table must grow ahead of them
// (tree/grow.go) rather than walk ever longer runs.
func BenchmarkSnapshotApply1M(b *testing.B) {
	src := filledReplica(b, 1_000_000)
	const now = 1_700_000_000_001
	data, _, err := AppendSnapshot(nil, src.Index(), now)
	if err != nil {
		b.Fatal(err)
	}
	s, err := ParseSnapshot(data)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		ix, err := tree.New(src.Index().Config())
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		if got := s.Apply(ix, now, 3_600_000); got.Claims != 1_000_000 {
			b.Fatalf("restored %d claims, want 1,000,000", got.Claims)
		}
	}
}
