package mesh

import (
	"context"
	"testing"
	"time"

	"github.com/kvmesh/kvmesh/crdt"
)

// While the apply loop is behind (here it waits for the node's lock, as
// while a large full transfer is joined), a peer's load messages are still
// applied: the claim messages past applyQ wait in the receive loop (up to
// maxPendingApply). The receive loop used to block on the first claim
// message applyQ had no room for, and every booking behind it waited.
func TestLoadMessagesPassAStalledApplyLoop(t *testing.T) {
	c := newTestCluster(t, nil)
	c.startN(2)
	c.waitMesh(time.Minute)
	a, b := c.node(nodeName(0)), c.node(nodeName(1))
	received := func() uint64 {
		b.n.loadMu.Lock()
		defer b.n.loadMu.Unlock()
		if p := b.n.loads.peers[a.name]; p != nil {
			return p.msgs
		}
		return 0
	}

	b.n.mu.Lock() // the apply loop stalls in handle
	unlocked := false
	unlock := func() {
		if !unlocked {
			unlocked = true
			b.n.mu.Unlock()
		}
	}
	defer unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	a.n.mu.Lock()
	inc := a.n.inc
	a.n.mu.Unlock()
	// A claim-protocol message that decodes (an ack of nothing, from a's
	// current life): the apply loop takes it to the lock and waits there.
	ack, err := crdt.Encode(nil, &crdt.Message{Type: crdt.MsgAck, From: a.name, Incarnation: inc})
	if err != nil {
		t.Fatal(err)
	}
	for range cap(b.n.applyQ) + 1 + maxPendingApply/2 {
		if err := a.ep.Send(ctx, b.name, ack); err != nil {
			t.Fatal(err)
		}
	}
	before := received()
	load := appendLoad(nil, &loadMsg{Seq: 1 << 40, Snapshot: true, Incarnation: 7})
	if err := a.ep.Send(ctx, b.name, load); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "the load message applied past the stalled apply loop", func() bool { return received() > before })
	unlock()
	// Once the apply loop moves, the messages behind it (applyQ's and the
	// receive loop's) drain: none is left queued and the node goes on.
	waitFor(t, 20*time.Second, "the queued claim messages handled", func() bool {
		return len(b.n.applyQ) == 0
	})
	before = received()
	if err := a.ep.Send(ctx, b.name, appendLoad(nil, &loadMsg{Seq: 1<<40 + 1, Snapshot: true, Incarnation: 7})); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "a load message after the stall", func() bool { return received() > before })
}
