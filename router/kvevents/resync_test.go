package kvevents

import (
	"testing"
)

// TestTakeoverOfAnIdleEngine: what an engine stored while its stream had no
// owner (the old owner dead, the mesh not yet sure) is claimed as soon as
// the next owner connects, without waiting for the engine's next message,
// which an idle engine may not send for long.
func TestTakeoverOfAnIdleEngine(t *testing.T) {
	sink := newMemSink(t)
	pub := startPublisher(t, PublisherConfig{Endpoint: "tcp://127.0.0.1:0", ReplayEndpoint: "tcp://127.0.0.1:0", Topic: "kv"})
	toks := tokens(16*20, 11)
	want := routerChain(t, "m", "", toks)
	pub.Publish(storedBatch(toks, 0, 12)) // nobody listens
	pub.Publish(&Batch{DPRank: -1, Events: []Event{{Kind: Removed, Hashes: []Hash{12}, Group: -1}}})
	m := startManager(t, testConfig(), []StreamConfig{{Backend: "e0", Endpoint: pub.Addr(), ReplayEndpoint: pub.ReplayAddr(), Topic: "kv", Model: "m"}}, sink)
	m.SetOwned([]string{"e0"})
	waitFor(t, "the replayed claims", func() bool { n, _ := sink.count("e0"); return n == 11 })
	if !sink.has("e0", want[:11]) || sink.has("e0", want[11:12]) {
		t.Fatal("the replay did not rebuild blocks 0..10 without the removed block 11")
	}
	// The live stream goes on after the replay, with no second invalidation.
	waitFor(t, "a live message after the replay", func() bool {
		pub.Publish(storedBatch(toks, 11, 20))
		return sink.has("e0", want[11:20])
	})
	if _, inv := sink.count("e0"); inv != 1 {
		t.Fatalf("%d invalidations, want 1 (the new stream's)", inv)
	}
	// Without a replay socket, an idle engine's stream starts with its
	// first message, as before.
	sink2 := newMemSink(t)
	pub2 := startPublisher(t, PublisherConfig{Endpoint: "tcp://127.0.0.1:0", Topic: "kv"})
	m2 := startManager(t, testConfig(), []StreamConfig{{Backend: "e1", Endpoint: pub2.Addr(), Topic: "kv", Model: "m"}}, sink2)
	m2.SetOwned([]string{"e1"})
	waitFor(t, "the first message", func() bool {
		pub2.Publish(storedBatch(toks, 0, 4))
		return sink2.has("e1", want[:4])
	})
}
