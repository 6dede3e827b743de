package kvevents

import (
	"context"
	"testing"
)

// TestSeqTrackerDeliveredAfterReplayFromZero: a stream started by a replay
// from 0 (the live message that started it at 3, the replay reaching 5):
// once the live stream delivered 3, numbers at or below it are a restart,
// and each live duplicate raises that floor.
func TestSeqTrackerDeliveredAfterReplayFromZero(t *testing.T) {
	var s SeqTracker
	for q := int64(0); q <= 5; q++ {
		s.Replayed(q)
	}
	s.Delivered(3)
	if s.Observe(0) != SeqRestart || s.Observe(3) != SeqRestart || s.Observe(4) != SeqDuplicate || s.Observe(6) != SeqNext {
		t.Fatal("after the live 3")
	}
	s.Delivered(4)
	if s.Observe(4) != SeqRestart || s.Observe(5) != SeqDuplicate {
		t.Fatal("after the live 4")
	}
	s.Delivered(9) // past what was applied: the floor stays at last
	if s.Observe(5) != SeqRestart || s.Observe(6) != SeqNext {
		t.Fatal("after a live 9")
	}
	var u SeqTracker
	u.Delivered(3) // not started: nothing to raise
	if u.Observe(3) != SeqFirst {
		t.Fatal("not started")
	}
}

// TestRestartAfterReplayFromZero: a listen-mode stream starts at a live
// message the replay from 0 also covers; the engine then restarts before a
// live message past the replay arrives. Its new stream (seq 0 on) is a
// restart: the backend is invalidated and the dead process's claims are
// neither kept nor renewed. (The replay's floor stayed at -1, so 0 was
// taken for a duplicate and dropped.)
func TestRestartAfterReplayFromZero(t *testing.T) {
	sink := newMemSink(t)
	toks := tokens(16*12, 14)
	want := routerChain(t, "m", "", toks)
	old := make([][]byte, 6) // the old process's messages 0..5: blocks 0..5, one each
	for q := range old {
		old[q] = AppendBatch(nil, storedBatch(toks, q, q+1), EncodingArray)
	}
	c, now := clockedConsumer(t, sink, StreamConfig{Topic: "kv", Model: "m"},
		scriptedReplayer(func(_ context.Context, from int64, fn func(int64, []byte) bool) error {
			for q := from; q < int64(len(old)); q++ {
				if !fn(q, old[q]) {
					break
				}
			}
			return nil
		}))
	ctx := context.Background()
	c.handle(ctx, message(3, &Batch{DPRank: -1})) // starts the stream: the replay applies 0..5
	if !sink.has("e0", want[:6]) {
		t.Fatal("the replay did not claim blocks 0..5")
	}
	// The engine restarts: its first message (0) stores another prompt.
	other := tokens(16*2, 15)
	c.handle(ctx, message(0, storedBatch(other, 0, 2)))
	if sink.has("e0", want[:1]) {
		t.Fatal("the dead process's claims are still live after the restart")
	}
	if !sink.has("e0", routerChain(t, "m", "", other)) {
		t.Fatal("the restarted engine's first message was dropped")
	}
	*now += (c.cfg.LeaseTTL - c.cfg.RenewBefore + 1).Milliseconds()
	renewals(sink, c)
	if sink.has("e0", want[:1]) {
		t.Fatal("the dead process's claims were renewed")
	}
	if cc, _, _ := c.snapshot(); cc.invalidations[reasonRestart] != 1 || cc.duplicate != 0 {
		t.Fatalf("invalidations %v, duplicates %d", cc.invalidations, cc.duplicate)
	}
}
