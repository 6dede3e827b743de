package kvevents

import (
	"context"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
)

// cutProxy forwards TCP connections to a target that can be changed, and
// can cut every connection it carries: a network blip between a node and
// an engine that goes on running, or, retargeted, an engine that restarted
// behind the same address.
type cutProxy struct {
	ln     net.Listener
	mu     sync.Mutex
	target string
	conns  []net.Conn
}

func newCutProxy(t *testing.T, target string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, target: strings.TrimPrefix(target, "tcp://")}
	go p.serve()
	t.Cleanup(func() { ln.Close(); p.cut() })
	return p
}

func (p *cutProxy) addr() string { return "tcp://" + p.ln.Addr().String() }

func (p *cutProxy) retarget(target string) {
	p.mu.Lock()
	p.target = strings.TrimPrefix(target, "tcp://")
	p.mu.Unlock()
}

func (p *cutProxy) serve() {
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		target := p.target
		p.mu.Unlock()
		out, err := net.Dial("tcp", target)
		if err != nil {
			in.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, in, out)
		p.mu.Unlock()
		go func() { io.Copy(out, in); out.Close(); in.Close() }()
		go func() { io.Copy(in, out); out.Close(); in.Close() }()
	}
}

// cut closes every connection carried so far.
func (p *cutProxy) cut() {
	p.mu.Lock()
	cs := p.conns
	p.conns = nil
	p.mu.Unlock()
	for _, c := range cs {
		c.Close()
	}
}

// A dropped connection to an engine that goes on running costs no
// invalidation: at the next connection the engine replays the last
// message applied, unchanged, and the stream resumes with what it
// published meanwhile (a store and a removal), in order. Without the
// resume, each blip invalidated the backend mesh-wide.
func TestReconnectResumesTheStream(t *testing.T) {
	sink := newMemSink(t)
	pub := startPublisher(t, PublisherConfig{Endpoint: "tcp://127.0.0.1:0", ReplayEndpoint: "tcp://127.0.0.1:0", Topic: "kv"})
	px := newCutProxy(t, pub.Addr())
	m := startManager(t, testConfig(), []StreamConfig{{Backend: "e0", Endpoint: px.addr(), ReplayEndpoint: pub.ReplayAddr(), Topic: "kv", Model: "m"}}, sink)
	m.SetOwned([]string{"e0"})
	toks := tokens(16*40, 21)
	want := routerChain(t, "m", "", toks)
	waitFor(t, "the stream to start", func() bool {
		pub.Publish(storedBatch(toks, 0, 10))
		return sink.has("e0", want[:10])
	})
	_, inv := sink.count("e0")
	c := m.consumers["e0"]
	live := c.liveMessages()

	px.cut()
	// Published while the connection is down or coming back: found by
	// the resume's replay, or live.
	pub.Publish(storedBatch(toks, 10, 20))
	pub.Publish(&Batch{DPRank: -1, Events: []Event{{Kind: Removed, Hashes: []Hash{20}, Group: -1}}})
	waitFor(t, "the resume", func() bool { cc, _, _ := c.snapshot(); return cc.resumed == 1 })
	waitFor(t, "the messages missed", func() bool { n, _ := sink.count("e0"); return n == 19 })
	if !sink.has("e0", want[:19]) || sink.has("e0", want[19:20]) {
		t.Fatal("the resumed stream did not apply the store and then the removal")
	}
	if _, now := sink.count("e0"); now != inv {
		t.Fatalf("%d invalidations after the blip, want %d (none)", now, inv)
	}
	// The live stream goes on (a new chain: block 20, the parent of the
	// rest, was removed).
	other := tokens(16*8, 24)
	wantOther := routerChain(t, "m", "", other)
	waitFor(t, "a live message after the resume", func() bool {
		pub.Publish(storedBatch(other, 0, 8))
		return sink.has("e0", wantOther) && c.liveMessages() > live
	})
	if _, now := sink.count("e0"); now != inv {
		t.Fatalf("%d invalidations after the resume, want %d", now, inv)
	}
}

// An engine that restarted behind the same addresses while the connection
// was down cannot replay the last message applied as it was: the stream is
// resynced (invalidated and rebuilt from the new engine's replay), never
// resumed on top of the old engine's map.
func TestReconnectToARestartedEngineResyncs(t *testing.T) {
	sink := newMemSink(t)
	pub := startPublisher(t, PublisherConfig{Endpoint: "tcp://127.0.0.1:0", ReplayEndpoint: "tcp://127.0.0.1:0", Topic: "kv"})
	px := newCutProxy(t, pub.Addr())
	rx := newCutProxy(t, pub.ReplayAddr())
	m := startManager(t, testConfig(), []StreamConfig{{Backend: "e0", Endpoint: px.addr(), ReplayEndpoint: rx.addr(), Topic: "kv", Model: "m"}}, sink)
	m.SetOwned([]string{"e0"})
	toks := tokens(16*40, 22)
	other := tokens(16*40, 23)
	want, wantOther := routerChain(t, "m", "", toks), routerChain(t, "m", "", other)
	// Enough messages that the restarted engine's numbers pass the old
	// last one: only the payload tells the processes apart.
	waitFor(t, "the stream to start", func() bool {
		pub.Publish(storedBatch(toks, 0, 10))
		return sink.has("e0", want[:10])
	})
	_, inv := sink.count("e0")
	c := m.consumers["e0"]

	pub2 := startPublisher(t, PublisherConfig{Endpoint: "tcp://127.0.0.1:0", ReplayEndpoint: "tcp://127.0.0.1:0", Topic: "kv"})
	for pub2.Seq() <= pub.Seq()+2 {
		pub2.Publish(storedBatch(other, 0, 5))
	}
	px.retarget(pub2.Addr())
	rx.retarget(pub2.ReplayAddr())
	pub.Close()
	px.cut()
	waitFor(t, "the new engine's blocks", func() bool { return sink.has("e0", wantOther[:5]) })
	if sink.has("e0", want[:1]) {
		t.Fatal("the old engine's claims survived its restart")
	}
	if _, now := sink.count("e0"); now <= inv {
		t.Fatalf("%d invalidations, want more than %d", now, inv)
	}
	if cc, _, _ := c.snapshot(); cc.resumed != 0 {
		t.Fatalf("resumed %d times on a restarted engine", cc.resumed)
	}
}

// A stream handed over (or closing) while its resume's replay waits is
// left to the next owner: no invalidation from the node that gave it away
// (it would drop the claims the next owner has just announced), and the
// cut-short replay is neither ok nor incomplete.
func TestResumeCutShortByAHandover(t *testing.T) {
	sink := newMemSink(t)
	toks := tokens(16*4, 31)
	first := AppendBatch(nil, storedBatch(toks, 0, 2), EncodingArray)
	entered := make(chan struct{})
	c, _ := clockedConsumer(t, sink, StreamConfig{Topic: "kv", Model: "m", Endpoint: "tcp://127.0.0.1:1"},
		scriptedReplayer(func(ctx context.Context, from int64, fn func(int64, []byte) bool) error {
			if from == 0 {
				return nil // the stream's first replay: nothing buffered
			}
			if from != 5 {
				t.Errorf("the resume asked for %d, want the last applied, 5", from)
				return nil
			}
			close(entered)
			<-ctx.Done() // the resume's replay: the engine is slow to answer
			return ctx.Err()
		}))
	live := context.Background()
	c.handle(live, [][]byte{[]byte("kv"), AppendSeq(nil, 5), first}) // the stream starts at 5 (nothing buffered before)
	c.lost(live)                                                     // the connection dropped: kept for a resume
	cc, _, _ := c.snapshot()
	invalidations, failed := cc.invalidations[reasonFirst], cc.replayFailed

	ctx, cancel := context.WithCancel(live)
	done := make(chan struct{})
	go func() { c.resync(ctx); close(done) }()
	<-entered
	cancel() // handed over while the replay waits
	<-done
	cc, _, mapped := c.snapshot()
	if cc.invalidations[reasonFirst] != invalidations || cc.replayFailed != failed || cc.resumed != 0 {
		t.Fatalf("after a handover during the resume: invalidations %d (was %d), replays failed %d (was %d), resumed %d",
			cc.invalidations[reasonFirst], invalidations, cc.replayFailed, failed, cc.resumed)
	}
	if mapped != 0 {
		t.Fatalf("the handed-over stream kept %d blocks mapped", mapped)
	}
}
