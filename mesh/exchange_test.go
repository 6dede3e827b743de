package mesh

import (
	"context"
	"testing"
	"time"

	"github.com/kvmesh/kvmesh/crdt"
)

// TestDigestFloodIsThrottled: a member that sends digests faster than any
// anti-entropy schedule (a bug, or a hostile member) gets one answered per
// half an interval. A one-bucket digest (tens of bytes) differs from every
// bucket of this node's state: each one answered makes the node walk its
// index and queue a repair of its whole state, and the repairs leave at the
// next flush, which frees the next digest to do it again.
func TestDigestFloodIsThrottled(t *testing.T) {
	c := newTestCluster(t, func(cfg *Config) { cfg.AntiEntropyInterval = time.Hour })
	c.startN(2)
	c.waitMesh(time.Minute)
	c.learnRandom(newRand(21), 20)
	c.waitConverged(time.Minute)

	n00, n01 := c.node("n00").n, c.node("n01")
	n01.n.mu.Lock()
	inc := n01.n.inc
	n01.n.mu.Unlock()
	digest, err := crdt.Encode(nil, &crdt.Message{Type: crdt.MsgDigest, From: "n01", Incarnation: inc,
		Now: time.Now().UnixMilli(), Digest: []uint64{1}})
	if err != nil {
		t.Fatal(err)
	}
	drops0 := counterValue(n00.m.sendDrops.WithLabelValues("queue_full"))
	throttled := n00.m.exchangesThrottled.WithLabelValues(crdt.MsgDigest.String())
	requestsSent := n00.m.sentBy[crdt.MsgRepairRequest]
	const flood = 5
	for i := 1; i <= flood; i++ {
		if err := n01.ep.Send(context.Background(), "n00", digest); err != nil {
			t.Fatal(err)
		}
		// Wait until n00 has dealt with it, and sent what it answered (so a
		// repair queued for it no longer holds the next one back).
		waitFor(t, 20*time.Second, "the digest to be handled", func() bool {
			st := n00.stats()
			return int(st.DigestMismatches+st.DigestsIgnored)+int(counterValue(throttled)) == i &&
				counterValue(requestsSent) == float64(st.DigestMismatches)
		})
	}
	// The one answered differs in all 4,096 buckets; its repairs share
	// messages, so they and the request fit the send queue (one message
	// per bucket overflowed it, and the request, queued last, was lost).
	if d := counterValue(n00.m.sendDrops.WithLabelValues("queue_full")) - drops0; d != 0 {
		t.Errorf("%v messages to n01 dropped on its full send queue", d)
	}
	st := n00.stats()
	if st.DigestMismatches != 1 || counterValue(throttled) != flood-1 {
		t.Fatalf("%d digests compared (%d buckets repaired), %v throttled; want 1 compared, %d throttled",
			st.DigestMismatches, st.BucketsRepaired, counterValue(throttled), flood-1)
	}
}
