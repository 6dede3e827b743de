package mesh

import (
	"testing"

	"github.com/kvmesh/kvmesh/crdt"
)

// A peer whose sends block has its queue refilled with large messages:
// the claims waiting for it are bounded (SendQueueClaims), not only the
// message count, and what the sender takes out frees room again. A single
// message larger than the bound still goes into an empty queue.
func TestSenderQueueBoundsClaims(t *testing.T) {
	s := &sender{q: make(chan *crdt.Message, 1024), maxQueued: 10_000}
	big := &crdt.Message{Type: crdt.MsgDelta, Batch: crdt.Batch{Claims: make([]crdt.WireClaim, 4096)}}
	queued := 0
	for range 100 {
		if s.enqueue(big) {
			queued++
		}
	}
	if queued != 2 || s.queued.Load() != 2*4097 {
		t.Fatalf("%d messages of 4,096 claims queued (%d counted) under a bound of 10,000, want 2", queued, s.queued.Load())
	}
	small := &crdt.Message{Type: crdt.MsgAck}
	if !s.enqueue(small) {
		t.Fatal("a claimless message refused with room left")
	}
	m := <-s.q
	s.queued.Add(-weight(m)) // as runSender does
	if !s.enqueue(big) {
		t.Fatal("no room after a message was taken out")
	}
	huge := &crdt.Message{Type: crdt.MsgFull, Batch: crdt.Batch{Claims: make([]crdt.WireClaim, 20_000)}}
	empty := &sender{q: make(chan *crdt.Message, 4), maxQueued: 10_000}
	if !empty.enqueue(huge) {
		t.Fatal("an empty queue refused a message over the bound")
	}
	if empty.enqueue(small) {
		t.Fatal("a queue over its bound took another message")
	}
}
