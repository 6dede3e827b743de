package kvevents

import (
	"context"
	"sync"
	"testing"
	"time"
)

// TestOwnerFailover: two nodes follow the same member list; the stream's
// owner consumes it, the other does not. When the owner leaves the list
// (serf marked it failed), the other takes the stream over, resyncs
// (invalidates, replays from 0) and events keep flowing into the shared
// claim state.
func TestOwnerFailover(t *testing.T) {
	sink := newMemSink(t)
	pub := startPublisher(t, PublisherConfig{Endpoint: "tcp://127.0.0.1:0", ReplayEndpoint: "tcp://127.0.0.1:0", Topic: "kv"})
	streams := []StreamConfig{{Backend: "e0", Endpoint: pub.Addr(), ReplayEndpoint: pub.ReplayAddr(), Topic: "kv", Model: "m"}}
	var mu sync.Mutex
	members := []string{"r1", "r2"}
	alive := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), members...)
	}
	owner := Owner("e0", members)
	other := "r1"
	if owner == "r1" {
		other = "r2"
	}
	nodes := map[string]*Manager{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, name := range members {
		m := startManager(t, testConfig(), streams, sink)
		nodes[name] = m
		go m.FollowMembers(ctx, name, alive, 20*time.Millisecond)
	}
	waitFor(t, "the owner to take the stream", func() bool { return len(nodes[owner].Owned()) == 1 })
	if len(nodes[other].Owned()) != 0 {
		t.Fatal("two owners")
	}
	toks := tokens(16*30, 9)
	want := routerChain(t, "m", "", toks)
	waitFor(t, "the owner's claims", func() bool {
		pub.Publish(&Batch{DPRank: -1})
		if pub.Seq() == 1 {
			pub.Publish(storedBatch(toks, 0, 10))
		}
		return sink.has("e0", want[:10])
	})
	// The owner fails.
	nodes[owner].Close()
	mu.Lock()
	members = []string{other}
	mu.Unlock()
	waitFor(t, "the takeover", func() bool { return len(nodes[other].Owned()) == 1 })
	pub.Publish(storedBatch(toks, 10, 20))
	// The new owner invalidated on its first message and replayed from 0:
	// the first chain is rebuilt and the new one claimed.
	waitFor(t, "events to continue under the new owner", func() bool {
		pub.Publish(&Batch{DPRank: -1})
		return sink.has("e0", want[:20])
	})
	cc, _, _ := nodes[other].consumers["e0"].snapshot()
	if cc.invalidations[reasonFirst] != 1 || cc.replayOK == 0 {
		t.Fatalf("new owner: %d first-message invalidations, %d replays", cc.invalidations[reasonFirst], cc.replayOK)
	}
}
