package kvevents

import (
	"context"
	"testing"
	"time"

	"github.com/kvmesh/kvmesh/tree"
)

// frameProgram turns fuzz bytes into an engine's stream as a consumer
// receives it: messages in order, duplicated, with gaps, from a restarted
// publisher, with raw payloads, with the wrong number of frames or a bad
// sequence number, and time passing with renewals between.
type frameProgram struct {
	b    []byte
	seq  int64
	seen []Hash // the hashes of blocks stored so far
}

// pick is one of the hashes stored so far (or a never-stored one).
func (p *frameProgram) pick() Hash {
	i := int(p.byte())
	if i >= len(p.seen) {
		return Hash(i)
	}
	return p.seen[len(p.seen)-1-i]
}

// blockHash names a block by its content, as an engine's chained hashes
// do: the same hash is always the same tokens after the same parent.
func blockHash(parent Hash, lora bool, base uint32, i, size int) Hash {
	h := uint64(parent)*0x9e3779b97f4a7c15 ^ uint64(base)<<32 ^ uint64(i)<<16 ^ uint64(size)
	if lora {
		h ^= 0xa0761d6478bd642f
	}
	return Hash(fold(h, 0xe7037ed1a0b428db) | 1<<40)
}

func (p *frameProgram) byte() byte {
	if len(p.b) == 0 {
		return 0
	}
	c := p.b[0]
	p.b = p.b[1:]
	return c
}

// event builds one event; parents and removals name blocks stored before,
// so that they meet. (Hashes are content's: an engine that named two
// different blocks by one hash would leave the first's claim to lapse at
// its lease end, since a removal of the hash can end only one.)
func (p *frameProgram) event() Event {
	k := p.byte()
	e := Event{LoraID: -1, Group: -1, Medium: Medium(p.byte() % 4 % 3)}
	switch k % 8 {
	case 0:
		e.Kind = Cleared
		return e
	case 1, 2:
		e.Kind = Removed
		for n := int(p.byte()%4) + 1; n > 0; n-- {
			e.Hashes = append(e.Hashes, p.pick())
		}
		return e
	}
	e.Kind = Stored
	e.BlockSize = []int{16, 32, 8, 48}[(k>>3)%4]
	if k&0x20 != 0 {
		e.Parent, e.HasParent = p.pick(), true
	}
	if k&0x40 != 0 {
		e.LoraName = "adapter"
	}
	if k&0x80 != 0 {
		e.Group = int(p.byte() % 2)
	}
	base := uint32(p.byte())
	h := e.Parent
	for i := range int(p.byte()%4) + 1 {
		h = blockHash(h, e.LoraName != "", base, i, e.BlockSize)
		e.Hashes = append(e.Hashes, h)
		p.seen = append(p.seen, h)
	}
	e.Tokens = tokens(len(e.Hashes)*e.BlockSize, base)
	return e
}

func (p *frameProgram) payload() []byte {
	b := Batch{DPRank: -1}
	for n := int(p.byte() % 4); n > 0; n-- {
		b.Events = append(b.Events, p.event())
	}
	return AppendBatch(nil, &b, Encoding(p.byte()%2))
}

// FuzzConsumerFrames runs fuzzed streams of kv-event messages through a
// consumer, in connect and listen mode: nothing panics, the block map
// stays within MaxBlocksPerEngine, every claim the sink holds for the
// engine is one the map can still end or renew, and a message that clears
// the engine's cache leaves no claim of it.
func FuzzConsumerFrames(f *testing.F) {
	f.Add([]byte{0, 0, 3, 0, 0, 5, 1, 1, 2, 3, 4, 0, 0, 1, 1, 0, 1, 1, 2, 0, 0, 6, 200})
	f.Add([]byte{0, 0, 2, 0x23, 0, 1, 9, 2, 1, 2, 1, 0, 1, 3, 1, 2, 3, 0, 2, 0, 1, 4, 4, 0, 0, 2, 0, 0, 1})
	f.Add([]byte{1, 0, 1, 3, 0, 7, 0, 3, 5, 2, 5, 0xc0, 0x92, 0, 0x90, 0x91, 0x93, 0, 2, 1, 0, 1, 0, 0, 0})
	f.Add([]byte{0, 3, 0, 1, 0, 1, 0, 6, 255, 6, 255, 0, 1, 0x13, 0, 2, 2, 3, 1, 2})
	f.Fuzz(func(t *testing.T, data []byte) {
		p := &frameProgram{b: data, seq: -1}
		icfg := tree.DefaultConfig()
		icfg.Capacity = 1024 // a fresh index per input: the default's million slots would dominate
		ix, err := tree.New(icfg)
		if err != nil {
			t.Fatal(err)
		}
		sink := &memSink{ix: ix, live: map[string]map[tree.Key]bool{}, inv: map[string]int{}}
		sc := StreamConfig{Endpoint: "tcp://e0:5557", Topic: "kv", Model: "m"}
		if p.byte()%2 == 1 {
			sc.Endpoint = ""
		}
		c, now := clockedConsumer(t, sink, sc, nil)
		c.cfg.MaxBlocksPerEngine = 8
		c.mp.cfg.MaxBlocks = 8
		ctx := context.Background()
		for len(p.b) > 0 {
			var frames [][]byte
			cleared := false
			switch op := p.byte(); op % 8 {
			case 0, 1, 2: // the next message
				p.seq++
				pl := p.payload()
				var b Batch
				if err := Decode(pl, &b); err != nil {
					t.Fatalf("an encoded batch does not decode: %v", err)
				}
				for _, e := range b.Events {
					cleared = cleared || e.Kind == Cleared
				}
				frames = [][]byte{[]byte("kv"), AppendSeq(nil, p.seq), pl}
			case 3: // a raw payload
				p.seq++
				n := min(int(p.byte()), len(p.b))
				frames = [][]byte{[]byte("kv"), AppendSeq(nil, p.seq), p.b[:n]}
				p.b = p.b[n:]
			case 4: // a duplicate, a gap or a restart
				switch p.byte() % 3 {
				case 0:
				case 1:
					p.seq += int64(p.byte()%5) + 1
				default:
					p.seq = int64(p.byte() % 3)
				}
				frames = [][]byte{[]byte("kv"), AppendSeq(nil, p.seq), p.payload()}
			case 5: // broken framing
				frames = [][]byte{[]byte("kv"), {byte(op)}, p.payload()}
				if op&0x80 != 0 {
					frames = frames[:2]
				}
			default: // time passes; claims are renewed
				*now += int64(p.byte()) * int64(time.Minute/time.Millisecond) / 16
				c.renew()
				continue
			}
			c.handle(ctx, frames)
			if n := c.mp.Len(); n > c.cfg.MaxBlocksPerEngine {
				t.Fatalf("%d blocks mapped, at most %d", n, c.cfg.MaxBlocksPerEngine)
			}
			mapped := map[tree.Key]bool{}
			for _, k := range c.mp.All(nil) {
				mapped[k] = true
			}
			sink.mu.Lock()
			live := len(sink.live["e0"])
			for k := range sink.live["e0"] {
				if !mapped[k] {
					sink.mu.Unlock()
					t.Fatalf("claim %v held, but the block map (%d) cannot end or renew it", k, len(mapped))
				}
			}
			sink.mu.Unlock()
			if cleared && live > len(mapped) {
				t.Fatalf("after a clear, %d claims held, %d blocks mapped", live, len(mapped))
			}
		}
	})
}
