package kvevents

import (
	"context"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// emptierSink is a memSink that counts the Emptied calls per backend.
type emptierSink struct {
	*memSink
	emptied map[string]int
}

func (s *emptierSink) Emptied(backend string) { s.emptied[backend]++ }

// An Emptier sink hears of an engine's cache emptied (AllBlocksCleared, a
// restart), each time before the invalidation that follows, and not of
// the invalidations that only lose track of the cache (a stream's first
// message, a gap that replay cannot repair).
func TestEmptierHearsOfClearsAndRestartsOnly(t *testing.T) {
	mem := newMemSink(t)
	sink := &emptierSink{memSink: mem, emptied: map[string]int{}}
	id, err := mem.ix.EnsureBackend("e0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig()
	c := newConsumer("e0", id, mem.ix, StreamConfig{Topic: "kv", Model: "m"}, &cfg, sink, nil, time.Now, zerolog.Nop())
	ctx := context.Background()
	toks := tokens(16*8, 3)
	want := routerChain(t, "m", "", toks)

	c.handle(ctx, message(0, storedBatch(toks, 0, 4))) // the stream's first message: invalidates
	if sink.emptied["e0"] != 0 || !mem.has("e0", want[:4]) {
		t.Fatalf("after the first message: emptied %d, claims %v; want 0 and blocks 0..3", sink.emptied["e0"], mem.has("e0", want[:4]))
	}
	c.handle(ctx, message(5, storedBatch(toks, 4, 6))) // a gap, no replay socket: invalidates
	if cc, _, _ := c.snapshot(); cc.invalidations[reasonGap] != 1 || sink.emptied["e0"] != 0 {
		t.Fatalf("after a gap: invalidations %v, emptied %d; want one gap and nothing emptied", cc.invalidations, sink.emptied["e0"])
	}
	c.handle(ctx, message(6, &Batch{DPRank: -1, Events: []Event{{Kind: Cleared}}}))
	if cc, _, _ := c.snapshot(); cc.invalidations[reasonCleared] != 1 || sink.emptied["e0"] != 1 {
		t.Fatalf("after AllBlocksCleared: invalidations %v, emptied %d; want one each", cc.invalidations, sink.emptied["e0"])
	}
	c.handle(ctx, message(2, storedBatch(toks, 0, 2))) // the sequence went back: a restart
	if cc, _, _ := c.snapshot(); cc.invalidations[reasonRestart] != 1 || sink.emptied["e0"] != 2 {
		t.Fatalf("after a restart: invalidations %v, emptied %d; want one restart, emptied twice", cc.invalidations, sink.emptied["e0"])
	}
	if !mem.has("e0", want[:2]) {
		t.Fatal("the restarted engine's first message was dropped")
	}
}
