package kvevents

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/kvmesh/kvmesh/tree"
)

// memSink records the claim state events produce: live keys per backend,
// and how many keys were learned (renewals included). Its invalidations
// start a new generation in ix, as a mesh node's do.
type memSink struct {
	ix      *tree.Index
	mu      sync.Mutex
	live    map[string]map[tree.Key]bool
	inv     map[string]int
	learned int
}

func newMemSink(t *testing.T) *memSink {
	ix, err := tree.New(tree.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	return &memSink{ix: ix, live: map[string]map[tree.Key]bool{}, inv: map[string]int{}}
}

func (s *memSink) name(b tree.BackendID) string { e, _ := s.ix.Backend(b); return e.Name }

func (s *memSink) Learn(ch *tree.Chain, b tree.BackendID, ttl time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.name(b)
	if s.live[n] == nil {
		s.live[n] = map[tree.Key]bool{}
	}
	for _, d := range ch.Learn {
		s.live[n][ch.Keys[d-1]] = true
	}
	s.learned += len(ch.Learn)
}

func (s *memSink) End(keys []tree.Key, b tree.BackendID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, k := range keys {
		delete(s.live[s.name(b)], k)
	}
}

func (s *memSink) Invalidate(backend string, removed bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.live, backend)
	s.inv[backend]++
	if _, err := s.ix.Invalidate(backend, removed, tree.MakeTimestamp(time.Now().UnixMilli(), 0), 1); err != nil {
		panic(err)
	}
}

// learns returns how many keys were learned so far.
func (s *memSink) learns() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.learned
}

func (s *memSink) has(backend string, keys []tree.Key) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, k := range keys {
		if !s.live[backend][k] {
			return false
		}
	}
	return true
}

func (s *memSink) count(backend string) (int, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.live[backend]), s.inv[backend]
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// storedBatch stores blocks [from, to) of toks as one chain (block i has hash i+1).
func storedBatch(toks []uint32, from, to int) *Batch {
	e := stored(nil, Hash(from), from > 0, toks[from*16:to*16], 16)
	for i := from; i < to; i++ {
		e.Hashes = append(e.Hashes, Hash(i+1))
	}
	return &Batch{DPRank: -1, Events: []Event{e}}
}

func testConfig() Config {
	cfg := DefaultConfig()
	cfg.ReplayTimeout = 5 * time.Second
	cfg.DialRetry = 20 * time.Millisecond
	return cfg
}

func startManager(t *testing.T, cfg Config, streams []StreamConfig, sink *memSink) *Manager {
	t.Helper()
	m, err := NewManager(cfg, streams, Deps{Index: sink.ix, Sink: sink})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

func startPublisher(t *testing.T, cfg PublisherConfig) *Publisher {
	t.Helper()
	p, err := NewPublisher(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// TestSubscriberRepairsGapByReplay: a subscriber that joins late replays
// from 0, and a lost message is replayed from the engine's ROUTER socket;
// neither costs an invalidation beyond the stream's first.
func TestSubscriberRepairsGapByReplay(t *testing.T) {
	for _, enc := range []Encoding{EncodingArray, EncodingMap} {
		sink := newMemSink(t)
		pub := startPublisher(t, PublisherConfig{Endpoint: "tcp://127.0.0.1:0", ReplayEndpoint: "tcp://127.0.0.1:0", Topic: "kv", Encoding: enc})
		m := startManager(t, testConfig(), []StreamConfig{{Backend: "e0", Endpoint: pub.Addr(), ReplayEndpoint: pub.ReplayAddr(), Topic: "kv", Model: "m"}}, sink)
		toks := tokens(16*40, 3)
		want := routerChain(t, "m", "", toks)
		pub.Publish(storedBatch(toks, 0, 10)) // before the subscriber is connected: found by replay from 0
		m.SetOwned([]string{"e0"})
		// Keep publishing harmless messages until the subscriber is connected.
		waitFor(t, "the subscriber to connect", func() bool {
			pub.Publish(&Batch{DPRank: -1})
			return sink.has("e0", want[:10])
		})
		pub.Drop(storedBatch(toks, 10, 20)) // lost on the way
		pub.Publish(storedBatch(toks, 20, 30))
		waitFor(t, "the gap to be replayed", func() bool { return sink.has("e0", want[:30]) })
		if _, inv := sink.count("e0"); inv != 1 {
			t.Fatalf("%d invalidations, want 1 (the stream's first message)", inv)
		}
		cc, _, mapped := m.consumers["e0"].snapshot()
		if cc.replayOK < 2 || mapped != 30 {
			t.Fatalf("enc %d: replays ok %d, mapped %d", enc, cc.replayOK, mapped)
		}
		// A removal ends claims; AllBlocksCleared invalidates.
		rm := Event{Kind: Removed, Hashes: []Hash{30, 29}, Group: -1}
		pub.Publish(&Batch{DPRank: -1, Events: []Event{rm}})
		waitFor(t, "the removal", func() bool { n, _ := sink.count("e0"); return n == 28 })
		pub.Publish(&Batch{DPRank: -1, Events: []Event{{Kind: Cleared}}})
		waitFor(t, "the clear", func() bool { n, inv := sink.count("e0"); return n == 0 && inv == 2 })
	}
}

// TestSubscriberInvalidatesUnrepairableGap: without a replay socket a gap
// invalidates the backend, and the stream goes on from there.
func TestSubscriberInvalidatesUnrepairableGap(t *testing.T) {
	sink := newMemSink(t)
	pub := startPublisher(t, PublisherConfig{Endpoint: "tcp://127.0.0.1:0", Topic: "kv"})
	m := startManager(t, testConfig(), []StreamConfig{{Backend: "e0", Endpoint: pub.Addr(), Topic: "kv", Model: "m"}}, sink)
	m.SetOwned([]string{"e0"})
	toks := tokens(16*30, 4)
	want := routerChain(t, "m", "", toks)
	waitFor(t, "the subscriber to connect", func() bool {
		pub.Publish(storedBatch(toks, 0, 10))
		return sink.has("e0", want[:10])
	})
	_, before := sink.count("e0")
	pub.Drop(&Batch{DPRank: -1})
	pub.Publish(storedBatch(toks, 10, 20))
	waitFor(t, "the gap's invalidation", func() bool { _, inv := sink.count("e0"); return inv == before+1 })
	// The chain's parent was forgotten with the invalidation: blocks 10..19
	// cannot be keyed, and are counted.
	waitFor(t, "the unknown parent to be counted", func() bool {
		_, st, _ := m.consumers["e0"].snapshot()
		return st.UnknownParent == 10
	})
	if n, _ := sink.count("e0"); n != 0 {
		t.Fatalf("%d claims after the invalidation", n)
	}
}

// TestSubscriberListenMode: engines connect to the node's listen socket and
// are told apart by topic.
func TestSubscriberListenMode(t *testing.T) {
	sink := newMemSink(t)
	cfg := testConfig()
	cfg.Listen = "tcp://127.0.0.1:0"
	m := startManager(t, cfg, []StreamConfig{{Backend: "a", Topic: "engine-a", Model: "m"}, {Backend: "b", Topic: "engine-b", Model: "m"}}, sink)
	pa := startPublisher(t, PublisherConfig{Connect: m.ListenAddr(), Topic: "engine-a"})
	pb := startPublisher(t, PublisherConfig{Connect: m.ListenAddr(), Topic: "engine-b", Encoding: EncodingMap})
	ta, tb := tokens(16*4, 10), tokens(16*6, 20)
	wa, wb := routerChain(t, "m", "", ta), routerChain(t, "m", "", tb)
	waitFor(t, "both engines", func() bool {
		pa.Publish(storedBatch(ta, 0, 4))
		pb.Publish(storedBatch(tb, 0, 6))
		return sink.has("a", wa) && sink.has("b", wb)
	})
	if sink.has("a", wb[:1]) || sink.has("b", wa[:1]) {
		t.Fatal("engines' claims mixed up")
	}
}

// TestListenModeOutlivesAnEngine: one engine leaving the listen socket (a
// restart, a dropped connection) does not stop the others' streams.
func TestListenModeOutlivesAnEngine(t *testing.T) {
	sink := newMemSink(t)
	cfg := testConfig()
	cfg.Listen = "tcp://127.0.0.1:0"
	m := startManager(t, cfg, []StreamConfig{{Backend: "a", Topic: "engine-a", Model: "m"}, {Backend: "b", Topic: "engine-b", Model: "m"}}, sink)
	pa := startPublisher(t, PublisherConfig{Connect: m.ListenAddr(), Topic: "engine-a"})
	pb := startPublisher(t, PublisherConfig{Connect: m.ListenAddr(), Topic: "engine-b"})
	ta, tb := tokens(16*4, 10), tokens(16*6, 20)
	wa, wb := routerChain(t, "m", "", ta), routerChain(t, "m", "", tb)
	waitFor(t, "both engines", func() bool {
		pa.Publish(storedBatch(ta, 0, 4))
		pb.Publish(storedBatch(tb, 0, 3))
		return sink.has("a", wa) && sink.has("b", wb[:3])
	})
	pa.Close()
	waitFor(t, "engine a's connection to end", func() bool { return m.listenErrors.Load() > 0 })
	waitFor(t, "engine b after engine a left", func() bool {
		pb.Publish(storedBatch(tb, 3, 6))
		return sink.has("b", wb)
	})
	// And an engine that comes back is read again.
	pa2 := startPublisher(t, PublisherConfig{Connect: m.ListenAddr(), Topic: "engine-a"})
	tc := tokens(16*2, 30)
	wc := routerChain(t, "m", "", tc)
	waitFor(t, "engine a back", func() bool {
		pa2.Publish(storedBatch(tc, 0, 2))
		return sink.has("a", wc)
	})
}
