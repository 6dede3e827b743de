package kvevents

import (
	"context"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/kvmesh/kvmesh/tree"
)

// indexSink writes into a tree.Index as a node alone would (LocalLearner).
type indexSink struct {
	ix    *tree.Index
	clock tree.Clock
	now   int64
	buf   []tree.Claim
}

func (s *indexSink) Learn(ch *tree.Chain, b tree.BackendID, ttl time.Duration) {
	s.buf = s.ix.Learn(ch, b, s.clock.Now(s.now), ttl.Milliseconds(), 1, s.now, s.buf[:0])
}

func (s *indexSink) End(keys []tree.Key, b tree.BackendID) {
	for _, k := range keys {
		s.ix.End(k, b, s.clock.Now(s.now), s.now)
	}
}

func (s *indexSink) Invalidate(string, bool) {}

// BenchmarkIngest measures one node's event ingestion end to end past the
// socket: decode a vLLM payload, check its sequence number, derive the
// blocks' keys and write the claims (and tombstones) into a real Index.
// Each message stores a 32-block chain (512 tokens) and removes one stored
// 8 messages earlier, so the index and the hash map stay at a steady size.
func BenchmarkIngest(b *testing.B) {
	for _, enc := range []struct {
		name string
		enc  Encoding
	}{{"array", EncodingArray}, {"map", EncodingMap}} {
		b.Run(enc.name, func(b *testing.B) {
			const blocks, keep, distinct = 32, 8, 64
			cfg := DefaultConfig()
			ixc := tree.DefaultConfig()
			ixc.Capacity = 1 << 16
			ix, err := tree.New(ixc)
			if err != nil {
				b.Fatal(err)
			}
			id, _ := ix.EnsureBackend("e0")
			now := int64(1_700_000_000_000)
			sink := &indexSink{ix: ix, clock: tree.NewClock(500), now: now}
			c := newConsumer("e0", id, ix, StreamConfig{Model: "m"}, &cfg, sink, nil, func() time.Time { return time.UnixMilli(now) }, zerolog.Nop())
			// distinct chains, each stored then removed keep messages later.
			payloads := make([][]byte, distinct)
			for i := range payloads {
				toks := tokens(16*blocks, uint32(i)*7919)
				e := stored(nil, 0, false, toks, 16)
				for j := 0; j < blocks; j++ {
					e.Hashes = append(e.Hashes, Hash(i*1000+j+1))
				}
				old := (i - keep + distinct) % distinct
				rm := Event{Kind: Removed, Group: -1}
				for j := 0; j < blocks; j++ {
					rm.Hashes = append(rm.Hashes, Hash(old*1000+j+1))
				}
				payloads[i] = AppendBatch(nil, &Batch{TS: 1, DPRank: -1, Events: []Event{e, rm}}, enc.enc)
			}
			topic := []byte("kv")
			frames := [][]byte{topic, nil, nil}
			seqBuf := make([]byte, 0, 8)
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				frames[1] = AppendSeq(seqBuf[:0], int64(i))
				frames[2] = payloads[i%distinct]
				c.handle(ctx, frames)
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N*blocks)/b.Elapsed().Seconds(), "blocks/s")
			if st := c.mp.Stats; b.N > distinct && (st.Claimed == 0 || st.Ended == 0) {
				b.Fatalf("nothing claimed or ended: %+v", st)
			}
		})
	}
}

// BenchmarkDecode measures the msgpack decoder alone on a 32-block store.
func BenchmarkDecode(b *testing.B) {
	e := stored(nil, 5, true, tokens(16*32, 1), 16)
	for j := 0; j < 32; j++ {
		e.Hashes = append(e.Hashes, Hash(j+100))
	}
	p := AppendBatch(nil, &Batch{TS: 1, DPRank: -1, Events: []Event{e}}, EncodingMap)
	var out Batch
	b.ReportAllocs()
	b.SetBytes(int64(len(p)))
	for i := 0; i < b.N; i++ {
		if err := Decode(p, &out); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*32)/b.Elapsed().Seconds(), "blocks/s")
}
