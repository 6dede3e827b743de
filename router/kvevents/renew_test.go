package kvevents

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// clockedConsumer is backend e0's consumer of stream sc on sink, with a
// clock at *now (Unix ms) that the test moves.
func clockedConsumer(t *testing.T, sink *memSink, sc StreamConfig, rp Replayer) (*consumer, *int64) {
	t.Helper()
	id, err := sink.ix.EnsureBackend("e0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig()
	now := new(int64)
	*now = 1_700_000_000_000
	c := newConsumer("e0", id, sink.ix, sc, &cfg, sink, rp, func() time.Time { return time.UnixMilli(*now) }, zerolog.Nop())
	return c, now
}

// message is the multipart message of batch b at seq.
func message(seq int64, b *Batch) [][]byte {
	return [][]byte{[]byte("kv"), AppendSeq(nil, seq), AppendBatch(nil, b, EncodingArray)}
}

// renewals returns how many keys one renewal round of c learns.
func renewals(sink *memSink, c *consumer) int {
	before := sink.learns()
	c.renew()
	return sink.learns() - before
}

// TestResyncForgetsTheOldStream: a connect-mode stream without a replay
// socket that starts again (a reconnect, or ownership back after a
// handover) does not renew what the stream before mapped: those claims
// belong to a generation the new stream's first message ends, and the
// engine's evictions since are unknown.
func TestResyncForgetsTheOldStream(t *testing.T) {
	sink := newMemSink(t)
	c, now := clockedConsumer(t, sink, StreamConfig{Endpoint: "tcp://e0:5557", Topic: "kv", Model: "m"}, nil)
	ctx := context.Background()
	toks := tokens(16*10, 5)
	c.handle(ctx, message(0, storedBatch(toks, 0, 10)))
	if n := sink.learns(); n != 10 {
		t.Fatalf("%d keys learned, want 10", n)
	}
	c.resync(ctx)
	*now += c.cfg.LeaseTTL.Milliseconds()
	if n := renewals(sink, c); n != 0 {
		t.Fatalf("the old stream's map renewed %d claims after the resync", n)
	}
	if _, _, mapped := c.snapshot(); mapped != 0 {
		t.Fatalf("%d blocks still mapped after the resync", mapped)
	}
}

// TestNoRenewalAfterAnInvalidationElsewhere: in listen mode the engine's
// connection may move to another node (through a Service, say), which
// invalidates the backend as its first message arrives there. The old
// node's map is then of an old generation: it renews none of it, and the
// engine's messages that still reach it do not claim what chains on it.
func TestNoRenewalAfterAnInvalidationElsewhere(t *testing.T) {
	sink := newMemSink(t)
	c, now := clockedConsumer(t, sink, StreamConfig{Topic: "kv", Model: "m"}, nil)
	ctx := context.Background()
	toks := tokens(16*12, 6)
	c.handle(ctx, message(0, storedBatch(toks, 0, 10)))
	sink.Invalidate("e0", false) // the node the engine moved to
	// Due for renewal, and the engine was heard from within the lease.
	*now += (c.cfg.LeaseTTL - c.cfg.RenewBefore + time.Second).Milliseconds()
	if n := renewals(sink, c); n != 0 {
		t.Fatalf("%d claims of the old generation renewed into the new one", n)
	}
	c.handle(ctx, message(1, storedBatch(toks, 10, 12)))
	if n, _ := sink.count("e0"); n != 0 {
		t.Fatalf("%d claims chained on the old generation's blocks", n)
	}
	if _, st, mapped := c.snapshot(); mapped != 0 || st.UnknownParent != 2 {
		t.Fatalf("mapped %d, unknown parents %d: the old map was kept", mapped, st.UnknownParent)
	}
}

// TestConnectModeReannouncesAfterAnInvalidationElsewhere: a router that
// lost the engine for a while (or took it for restarted) invalidates the
// backend, but a connect-mode stream still receives the engine's every
// eviction: its map is announced again in the new generation, and blocks
// chained on it are claimed.
func TestConnectModeReannouncesAfterAnInvalidationElsewhere(t *testing.T) {
	sink := newMemSink(t)
	c, _ := clockedConsumer(t, sink, StreamConfig{Endpoint: "tcp://e0:5557", Topic: "kv", Model: "m"}, nil)
	ctx := context.Background()
	toks := tokens(16*12, 8)
	want := routerChain(t, "m", "", toks)
	c.handle(ctx, message(0, storedBatch(toks, 0, 10)))
	sink.Invalidate("e0", false) // another router
	if n := renewals(sink, c); n != 10 {
		t.Fatalf("%d claims announced in the new generation, want 10", n)
	}
	c.handle(ctx, message(1, storedBatch(toks, 10, 12)))
	if !sink.has("e0", want) {
		n, _ := sink.count("e0")
		t.Fatalf("%d of 12 claims after the invalidation elsewhere", n)
	}
	if cc, st, _ := c.snapshot(); cc.reannounced != 10 || st.UnknownParent != 0 {
		t.Fatalf("reannounced %d, unknown parents %d", cc.reannounced, st.UnknownParent)
	}
}

// TestListenModeRenewsOnlyWhileHeard: a listen-mode engine not heard from
// for a lease (gone, or now connected elsewhere) has its claims lapse; its
// next message here brings them back.
func TestListenModeRenewsOnlyWhileHeard(t *testing.T) {
	sink := newMemSink(t)
	c, now := clockedConsumer(t, sink, StreamConfig{Topic: "kv", Model: "m"}, nil)
	ctx := context.Background()
	toks := tokens(16*10, 7)
	c.handle(ctx, message(0, storedBatch(toks, 0, 10)))
	ttl, before := c.cfg.LeaseTTL.Milliseconds(), c.cfg.RenewBefore.Milliseconds()
	start := *now
	*now = start + ttl - before + 1
	if n := renewals(sink, c); n != 10 {
		t.Fatalf("%d renewals while the engine was heard within the lease, want 10", n)
	}
	*now = start + 2*ttl // due again, and nothing heard for longer than a lease
	if n := renewals(sink, c); n != 0 {
		t.Fatalf("%d renewals for an engine silent for %v", n, 2*c.cfg.LeaseTTL)
	}
	c.handle(ctx, message(1, &Batch{DPRank: -1}))
	if n := renewals(sink, c); n != 10 {
		t.Fatalf("%d renewals once the engine spoke again, want 10", n)
	}
}

// TestStreamEndStopsRenewal: a connect-mode stream handed over, or whose
// connection to the engine is lost, forgets its map at once, so nothing is
// renewed while the engine is unreachable.
func TestStreamEndStopsRenewal(t *testing.T) {
	sink := newMemSink(t)
	pub := startPublisher(t, PublisherConfig{Endpoint: "tcp://127.0.0.1:0", Topic: "kv"})
	m := startManager(t, testConfig(), []StreamConfig{{Backend: "e0", Endpoint: pub.Addr(), Topic: "kv", Model: "m"}}, sink)
	toks := tokens(16*10, 8)
	want := routerChain(t, "m", "", toks)
	mapped := func() int { _, _, n := m.consumers["e0"].snapshot(); return n }
	claim := func() {
		t.Helper()
		m.SetOwned([]string{"e0"})
		waitFor(t, "the stream's claims", func() bool {
			pub.Publish(storedBatch(toks, 0, 10))
			return mapped() == 10 && sink.has("e0", want[:10])
		})
	}
	claim()
	m.SetOwned(nil)
	if n := mapped(); n != 0 {
		t.Fatalf("%d blocks mapped after the handover", n)
	}
	claim()
	pub.Close()
	waitFor(t, "the lost connection to forget the map", func() bool { return mapped() == 0 })
}

// scriptedReplayer replays by calling fn.
type scriptedReplayer func(ctx context.Context, from int64, fn func(int64, []byte) bool) error

func (r scriptedReplayer) Replay(ctx context.Context, from int64, fn func(int64, []byte) bool) error {
	return r(ctx, from, fn)
}

// TestResyncReplayCutShort: a resync's replay cancelled by a handover is
// neither ok nor incomplete; one that fails is incomplete.
func TestResyncReplayCutShort(t *testing.T) {
	sink := newMemSink(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c, _ := clockedConsumer(t, sink, StreamConfig{Endpoint: "tcp://e0:5557", Topic: "kv", Model: "m"},
		scriptedReplayer(func(rctx context.Context, _ int64, _ func(int64, []byte) bool) error {
			cancel() // handed over meanwhile
			<-rctx.Done()
			return rctx.Err()
		}))
	c.resync(ctx)
	if cc, _, _ := c.snapshot(); cc.replayOK != 0 || cc.replayFailed != 0 {
		t.Fatalf("cancelled replay counted ok %d, incomplete %d", cc.replayOK, cc.replayFailed)
	}
	c.replay = scriptedReplayer(func(context.Context, int64, func(int64, []byte) bool) error { return context.DeadlineExceeded })
	c.resync(context.Background())
	if cc, _, _ := c.snapshot(); cc.replayOK != 0 || cc.replayFailed != 1 {
		t.Fatalf("failed replay counted ok %d, incomplete %d", cc.replayOK, cc.replayFailed)
	}
}

// TestBlocksCountedByTier: blocks of tiers other than GPU and CPU are
// counted as medium "other", not as CPU.
func TestBlocksCountedByTier(t *testing.T) {
	sink := newMemSink(t)
	cfg := testConfig()
	cfg.Listen = "tcp://127.0.0.1:0"
	reg := prometheus.NewRegistry()
	m, err := NewManager(cfg, []StreamConfig{{Backend: "e0", Topic: "kv", Model: "m"}}, Deps{Index: sink.ix, Sink: sink, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	toks := tokens(16*3, 9)
	b := storedBatch(toks, 0, 3) // GPU
	for _, md := range []Medium{MediumCPU, MediumOther} {
		e := stored([]Hash{100 + Hash(md)}, 0, false, toks[:16], 16)
		e.Medium = md
		b.Events = append(b.Events, e, Event{Kind: Removed, Hashes: []Hash{100 + Hash(md)}, Medium: md, Group: -1})
	}
	m.consumers["e0"].handle(context.Background(), message(0, b))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "kvmesh_kvevents_blocks_total" {
			continue
		}
		for _, mt := range mf.GetMetric() {
			var ev, md string
			for _, lp := range mt.GetLabel() {
				switch lp.GetName() {
				case "event":
					ev = lp.GetValue()
				case "medium":
					md = lp.GetValue()
				}
			}
			got[ev+"/"+md] = mt.GetCounter().GetValue()
		}
	}
	for k, v := range map[string]float64{"stored/gpu": 3, "stored/cpu": 1, "stored/other": 1, "removed/gpu": 0, "removed/cpu": 1, "removed/other": 1} {
		if got[k] != v {
			t.Errorf("blocks %s = %v, want %v (all: %v)", k, got[k], v, got)
		}
	}
}
