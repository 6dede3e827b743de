package sim

import (
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/kvmesh/kvmesh/router/kvevents"
	"github.com/kvmesh/kvmesh/tree"
)

// claimSink keeps the live claims per backend that events produce.
type claimSink struct {
	ix   *tree.Index
	mu   sync.Mutex
	live map[tree.Key]bool
	inv  int
}

func (s *claimSink) Learn(ch *tree.Chain, _ tree.BackendID, _ time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, d := range ch.Learn {
		s.live[ch.Keys[d-1]] = true
	}
}

func (s *claimSink) End(keys []tree.Key, _ tree.BackendID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, k := range keys {
		delete(s.live, k)
	}
}

func (s *claimSink) Invalidate(string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.live)
	s.inv++
}

func (s *claimSink) state(keys []tree.Key) (held, total, inv int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, k := range keys {
		if s.live[k] {
			held++
		}
	}
	return held, len(s.live), s.inv
}

// TestKVEventsMatchTokenizeKeys: the engine's KV events, consumed by a
// kvmesh subscriber, claim exactly the keys a router computes from the
// engine's own /tokenize answer for the same request (in both event
// encodings); a restart's AllBlocksCleared drops them.
func TestKVEventsMatchTokenizeKeys(t *testing.T) {
	for _, useMap := range []bool{false, true} {
		in, srv := startServer(t, func(c *Config) {
			c.KVEvents = KVEventsConfig{Endpoint: "tcp://127.0.0.1:0", ReplayEndpoint: "tcp://127.0.0.1:0", Topic: "kv", Map: useMap}
			c.CacheBlocks = 64 // small: the second prompt evicts the first's tail
		})
		ix, err := tree.New(tree.DefaultConfig())
		if err != nil {
			t.Fatal(err)
		}
		sink := &claimSink{ix: ix, live: map[tree.Key]bool{}}
		m, err := kvevents.NewManager(kvevents.DefaultConfig(), []kvevents.StreamConfig{{Backend: "sim", Endpoint: in.KVEventsEndpoint(),
			ReplayEndpoint: in.KVEventsReplayEndpoint(), Topic: "kv", Model: "m"}}, kvevents.Deps{Index: ix, Sink: sink})
		if err != nil {
			t.Fatal(err)
		}
		if err := m.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Close() })
		m.SetOwned([]string{"sim"})
		// The engine publishes each event once, and a repeated prompt adds
		// none: a message sent before the subscription reached the engine's
		// PUB socket (ZMQ's slow joiner: the subscriber has dialled, the
		// engine does not know its topic yet) would be lost, found only at
		// a next message that never comes. Once the publisher has the
		// subscription, each message either precedes the subscriber's
		// resync (which replays it) or reaches it live.
		waitFor(t, "the subscription to reach the engine's publisher", in.eng.kv.pub.Subscribed)

		body := chatBody(t, 1, map[string]any{"cache_salt": "tenant-a"}, msg{"system", words("sys", 300)}, msg{"user", words("q", 40)})
		resp, raw := post(t, srv.URL, "/tokenize", body, nil)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("/tokenize: %d %s", resp.StatusCode, raw)
		}
		var tok struct {
			Count  int      `json:"count"`
			Tokens []uint32 `json:"tokens"`
		}
		if err := json.Unmarshal(raw, &tok); err != nil || tok.Count != len(tok.Tokens) || tok.Count < 300 {
			t.Fatalf("/tokenize answer %s (%v)", raw, err)
		}
		var ch tree.Chain
		tree.NewKeyer(tree.DefaultConfig()).Tokens(&ch, kvevents.Seed("m", "tenant-a"), tok.Tokens, nil)
		chat(t, srv.URL, body)
		waitFor(t, "the prompt's blocks to be claimed", func() bool {
			held, _, _ := sink.state(ch.Keys)
			return held == len(ch.Keys)
		})
		// Another prompt that does not fit beside it evicts blocks: their
		// claims end.
		other := chatBody(t, 1, nil, msg{"user", words("other", 700)})
		chat(t, srv.URL, other)
		waitFor(t, "evictions to end claims", func() bool {
			held, _, _ := sink.state(ch.Keys)
			return held < len(ch.Keys)
		})
		_, _, before := sink.state(nil)
		in.Restart()
		waitFor(t, "the restart's clear", func() bool {
			_, total, inv := sink.state(nil)
			return inv > before && total == 0
		})
	}
}
