package kvevents

import (
	"context"
	"testing"
)

// TestMalformedPayloadInvalidates: a payload that does not decode may have
// held removals; counting it and going on renewed the removed blocks'
// claims for as long as the stream lasted. It invalidates the backend
// instead, and the stream goes on from the next message.
func TestMalformedPayloadInvalidates(t *testing.T) {
	for _, listen := range []bool{false, true} {
		sink := newMemSink(t)
		sc := StreamConfig{Endpoint: "tcp://e0:5557", Topic: "kv", Model: "m"}
		if listen {
			sc.Endpoint = ""
		}
		c, now := clockedConsumer(t, sink, sc, nil)
		ctx := context.Background()
		toks := tokens(16*6, 12)
		want := routerChain(t, "m", "", toks)
		c.handle(ctx, message(0, storedBatch(toks, 0, 4)))
		if !sink.has("e0", want[:4]) {
			t.Fatal("the stored blocks were not claimed")
		}
		// The removal of all 4, with a byte too many: malformed.
		rm := message(1, &Batch{DPRank: -1, Events: []Event{{Kind: Removed, Hashes: []Hash{4, 3, 2, 1}, Group: -1}}})
		rm[2] = append(rm[2], 0xc0)
		c.handle(ctx, rm)
		if n, _ := sink.count("e0"); n != 0 {
			t.Fatalf("listen %v: %d claims live after a malformed payload", listen, n)
		}
		*now += (c.cfg.LeaseTTL - c.cfg.RenewBefore + 1).Milliseconds()
		if n := renewals(sink, c); n != 0 {
			t.Fatalf("listen %v: %d claims renewed after a malformed payload", listen, n)
		}
		// The stream goes on: the next message is applied, no further invalidation.
		c.handle(ctx, message(2, storedBatch(toks, 0, 2)))
		if !sink.has("e0", want[:2]) {
			t.Fatalf("listen %v: the message after the malformed one was not applied", listen)
		}
		cc, _, _ := c.snapshot()
		if cc.malformed != 1 || cc.invalidations[reasonMalformed] != 1 || cc.invalidations[reasonFirst] != 1 || cc.duplicate != 0 {
			t.Fatalf("listen %v: malformed %d, invalidations %v, duplicates %d", listen, cc.malformed, cc.invalidations, cc.duplicate)
		}
	}
}

// TestMalformedPayloadInReplay: a replayed payload that does not decode
// ends the replay as a hole would: the gap is not repaired and the backend
// is invalidated.
func TestMalformedPayloadInReplay(t *testing.T) {
	sink := newMemSink(t)
	toks := tokens(16*6, 13)
	good := AppendBatch(nil, storedBatch(toks, 0, 4), EncodingArray)
	bad := append(AppendBatch(nil, &Batch{DPRank: -1, Events: []Event{{Kind: Removed, Hashes: []Hash{4}, Group: -1}}}, EncodingArray), 0xc0)
	c, _ := clockedConsumer(t, sink, StreamConfig{Topic: "kv", Model: "m"},
		scriptedReplayer(func(_ context.Context, from int64, fn func(int64, []byte) bool) error {
			for seq, p := range [][]byte{good, bad} {
				if int64(seq) >= from && !fn(int64(seq), p) {
					return nil
				}
			}
			return nil
		}))
	// A stream starting at 2: the replay of 0..1 stops at the malformed 1.
	c.handle(context.Background(), message(2, &Batch{DPRank: -1}))
	if n, _ := sink.count("e0"); n != 0 {
		t.Fatalf("%d claims live from a replay whose next payload was malformed", n)
	}
	if cc, _, _ := c.snapshot(); cc.replayFailed != 1 || cc.invalidations[reasonGap] != 1 {
		t.Fatalf("replays incomplete %d, invalidations %v", cc.replayFailed, cc.invalidations)
	}
}
