package mesh

import (
	"testing"
	"time"

	"github.com/kvmesh/kvmesh/transport"
	"github.com/kvmesh/kvmesh/tree"
)

// loadSession is one process of a node that shares its bookings: a Node,
// not started, on a clock the test sets, whose load messages are caught
// instead of sent.
type loadSession struct {
	n   *Node
	src *fakeLoad
	out *sender
	now int64 // ms: the node's clock
}

// newLoadSession starts a process of node name at start (Unix ms).
func newLoadSession(t *testing.T, name string, start int64) *loadSession {
	t.Helper()
	ix, err := tree.New(testIndexConfig())
	if err != nil {
		t.Fatal(err)
	}
	ep, err := transport.NewMemNetwork(1).Endpoint(name)
	if err != nil {
		t.Fatal(err)
	}
	s := &loadSession{now: start}
	n, err := New(testConfig(name), Deps{Index: ix, Transport: ep, Now: func() time.Time { return time.UnixMilli(s.now) }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Close() })
	s.n, s.src = n, newFakeLoad(t, ix)
	n.SetLoadSource(s.src)
	s.out = &sender{peer: "rx", lq: make(chan []byte, 1<<12)}
	n.loadOut.Store(&[]*sender{s.out})
	return s
}

// send lets ms pass, books units at backend b (what it adds is written)
// and runs the load loop's send; it returns the messages sent.
func (s *loadSession) send(ms int64, b int, units int64) [][]byte {
	s.now += ms
	s.src.book(b, units, 1, 1)
	s.n.loadMu.Lock()
	s.n.publishLoad(s.src, s.now)
	s.n.loadMu.Unlock()
	var out [][]byte
	for {
		select {
		case d := <-s.out.lq:
			out = append(out, d)
		default:
			return out
		}
	}
}

// deliver decodes data and applies it to lt as from peer at now.
func deliver(t *testing.T, lt *loadTable, peer string, data []byte, now int64) loadApplied {
	t.Helper()
	var m loadMsg
	if err := decodeLoad(data, &m); err != nil {
		t.Fatal(err)
	}
	return lt.apply(peer, &m, len(data), now)
}

// deliverAll delivers every message, each to be applied.
func deliverAll(t *testing.T, lt *loadTable, peer string, msgs [][]byte, now int64) {
	t.Helper()
	for _, d := range msgs {
		if got := deliver(t, lt, peer, d, now); got != loadApplyOK {
			t.Fatalf("a message in order was not applied: %v", got)
		}
	}
}

const t0 = 1_790_000_000_000 // Unix ms, 2026

// A message of a process that has since restarted, arriving after the new
// process's first snapshot (the transport does not order them), is dropped:
// the new process's sequence starts above every number the old one used,
// whatever the old one sent. Before, the late message took the old number
// (say 1,000) over the new session's, and every later message of the new
// process (numbered from 1) was dropped as stale.
func TestLoadRestartLateMessageOfOldProcess(t *testing.T) {
	lt := testLoadTable()
	old := newLoadSession(t, "p", t0)
	var late []byte
	for i := range 1000 {
		msgs := old.send(1, 0, int64(1000+i))
		if i == 999 {
			late = msgs[0] // the old process's last delta, delayed
			continue
		}
		deliverAll(t, lt, "p", msgs, old.now)
	}
	// p restarts two seconds later.
	nw := newLoadSession(t, "p", old.now+2000)
	deliverAll(t, lt, "p", nw.send(0, 0, 50), nw.now)
	if got := deliver(t, lt, "p", late, nw.now); got != loadApplyStale {
		t.Fatalf("the old process's late delta: %v, want stale", got)
	}
	lt.publish(nw.now, 0)
	if u := units(lt, 0); u != 50 {
		t.Fatalf("b0 at %v units after the late delta, want the new process's 50", u)
	}
	for i := range 10 {
		deliverAll(t, lt, "p", nw.send(1, 0, int64(60+i)), nw.now)
	}
	lt.publish(nw.now, 0)
	if u := units(lt, 0); u != 69 {
		t.Fatalf("b0 at %v units, want the new process's last booking, 69", u)
	}
}

// A snapshot of a process that has since restarted, arriving late, neither
// brings its incarnation back nor retires what it wrote a second time.
// Before, each flip of the incarnation moved the current count into the
// retired totals again: what the peer wrote was counted twice.
func TestLoadRestartLateSnapshotOfOldProcess(t *testing.T) {
	lt := testLoadTable()
	old := newLoadSession(t, "p", t0)
	deliverAll(t, lt, "p", old.send(0, 0, 64_000), old.now) // a snapshot: 64,000 written
	var late [][]byte
	for i := range 2 {
		msgs := old.send(500, 0, 64_000+64*int64(i+1)) // LoadRefresh passed: snapshots
		var m loadMsg
		if err := decodeLoad(msgs[0], &m); err != nil || !m.Snapshot {
			t.Fatalf("the old process sent %+v (%v), want a snapshot", m, err)
		}
		if i == 0 {
			deliverAll(t, lt, "p", msgs, old.now)
		} else {
			late = msgs // its last snapshot, delayed
		}
	}
	lt.publish(old.now, 0)
	if w := lt.writtenSum(0); w != 64_064 {
		t.Fatalf("written %v before the restart, want 64064", w)
	}
	nw := newLoadSession(t, "p", old.now+1000)
	deliverAll(t, lt, "p", nw.send(0, 0, 640), nw.now)
	if got := deliver(t, lt, "p", late[0], nw.now); got != loadApplyStale {
		t.Fatalf("the old process's late snapshot: %v, want stale", got)
	}
	deliverAll(t, lt, "p", nw.send(500, 0, 1280), nw.now) // the new process's next snapshot
	lt.publish(nw.now, 0)
	// The old process's 64,064 (its late snapshot's 64,128 never counted)
	// and the new one's 1,280.
	if w := lt.writtenSum(0); w != 64_064+1_280 {
		t.Fatalf("written %v, want 65344 (the old process's once, and the new one's)", w)
	}
	if u := units(lt, 0); u != 1280 {
		t.Fatalf("b0 at %v units, want the new process's 1280", u)
	}
}

// A peer whose new process numbers its messages below the old one's (its
// clock stepped back, or it runs an earlier release whose sequences start
// at 1) is taken for a late message at first, and switched to once its
// current session has applied nothing for fresh: after at most LoadFresh
// of silence.
func TestLoadRestartSwitchesAfterSilence(t *testing.T) {
	for _, tc := range []struct {
		name  string
		start int64 // the new process's clock
		seq   uint64
	}{
		{"clock stepped back", t0 - 60_000, 0},
		{"earlier release", t0 + 2_000, 1}, // its sequence starts at 1
	} {
		t.Run(tc.name, func(t *testing.T) {
			lt := testLoadTable() // fresh 1 s, max age 3 s
			old := newLoadSession(t, "p", t0)
			deliverAll(t, lt, "p", old.send(0, 0, 100), 0)
			deliverAll(t, lt, "p", old.send(1, 0, 200), 1)
			nw := newLoadSession(t, "p", tc.start)
			if tc.seq > 0 {
				nw.n.lp.seq = tc.seq - 1
			}
			if got := deliver(t, lt, "p", nw.send(0, 1, 7)[0], 10); got != loadApplyStale {
				t.Fatalf("the new process's first snapshot: %v, want stale (its numbers are below the old one's)", got)
			}
			// Until fresh has passed since the old process's last message,
			// the new one's messages are dropped.
			for _, at := range []int64{110, 300, 600, 900, 1000} {
				for _, d := range nw.send(100, 1, 7+at) {
					if got := deliver(t, lt, "p", d, at); got == loadApplyOK {
						t.Fatalf("at %d ms, within fresh of the last applied message, the new process's message was applied", at)
					}
				}
			}
			// At fresh, its next snapshot starts the new session.
			for _, d := range nw.send(500, 1, 9_000) {
				if got := deliver(t, lt, "p", d, 1_001); got != loadApplyOK {
					t.Fatalf("after fresh of silence: %v, want applied", got)
				}
			}
			lt.publish(1_001, 0)
			if u0, u1 := units(lt, 0), units(lt, 1); u0 != 0 || u1 != 9_000 {
				t.Fatalf("b0 %v b1 %v after the switch, want the new process's 0 and 9000", u0, u1)
			}
			deliverAll(t, lt, "p", nw.send(1, 1, 9_100), 1_002) // and its deltas follow
			lt.publish(1_002, 0)
			if u := units(lt, 1); u != 9_100 {
				t.Fatalf("b1 %v, want 9100", u)
			}
		})
	}
}

// Only applied messages make a peer heard: one whose every message is
// dropped (stale here) is forgotten at maxAge and starts over. Before, the
// dropped messages kept it alive, bookings frozen, for as long as they came.
func TestLoadTableDroppedMessagesDoNotKeepAPeer(t *testing.T) {
	lt := testLoadTable() // max age 3 s
	lt.apply("p", snapshot(100_000, 1, true, 500), 40, 0)
	for at := int64(100); at < 3000; at += 100 {
		if got := lt.apply("p", delta(uint64(at), 10, 1), 10, at); got != loadApplyStale {
			t.Fatalf("at %d: %v, want stale", at, got)
		}
	}
	if gone := lt.expire(3000, nil); len(gone) != 1 {
		t.Fatalf("a peer whose messages were all dropped for max age is kept (gone: %v)", gone)
	}
	// It starts over: its next snapshot is taken whatever its number.
	if got := lt.apply("p", snapshot(5, 2, true, 70), 40, 3001); got != loadApplyOK {
		t.Fatalf("after it was forgotten: %v, want applied", got)
	}
	lt.publish(3001, 0)
	if u := units(lt, 0); u != 70 {
		t.Fatalf("b0 %v, want 70", u)
	}
}

// Sequence bases grow with the clock, 1,024 a millisecond, fit a uvarint
// of 7 bytes until 2042, and are 0 before the epoch.
func TestLoadSeqBase(t *testing.T) {
	if b := loadSeqBase(t0); b>>49 != 0 || loadSeqBase(t0+1)-b != 1<<loadSeqShift {
		t.Fatalf("base %d (%#x) at %d: want below 2^49, 1024 more a ms later", b, b, int64(t0))
	}
	if b := loadSeqBase(2_272_000_000_000); b>>49 != 0 { // 2041-12
		t.Fatalf("base %#x in 2041 does not fit 7 bytes", b)
	}
	if loadSeqBase(0) != 0 || loadSeqBase(loadSeqEpoch) != 0 {
		t.Fatal("a clock at or before the epoch does not give 0")
	}
	if b := loadSeqBase(1 << 62); b != 1<<63 {
		t.Fatalf("a clock far ahead gives %#x, want the cap 2^63", b)
	}
	// A session starts at its base: its first message is numbered one more.
	s := newLoadSession(t, "p", t0)
	msgs := s.send(0, 0, 1)
	var m loadMsg
	if err := decodeLoad(msgs[0], &m); err != nil || m.Seq != loadSeqBase(t0)+1 {
		t.Fatalf("first message %+v (%v), want seq %d", m, err, loadSeqBase(t0)+1)
	}
}

// A node restarted in place (the same name and address, before membership
// notices: no member joined as far as its peers know) hears its peers'
// backend names at once: a peer that sees its new incarnation sends a
// snapshot with names, as for a member that joined. With LoadRefresh an
// hour, no periodic snapshot ever brings them, so the restarted node sees
// its peer's bookings only through that answer (before, it waited for the
// loadNamesEvery-th snapshot: 5 s at the defaults).
func TestLoadChannelRestartInPlace(t *testing.T) {
	c, srcs := startLoadCluster(t, 2, func(cfg *Config) {
		cfg.LoadInterval = 5 * time.Millisecond
		cfg.LoadRefresh = time.Hour
		cfg.LoadFresh, cfg.LoadMaxAge = time.Hour, 2*time.Hour
		lanProbes(cfg) // serf must not notice the restart: that would be a join
		cfg.Membership.SuspicionMult = 20
	})
	a, b := c.node("n00"), c.node("n01")
	// As in TestLoadChannelSendsOnWakeUp: once both know each other, have
	// both send their names (the snapshots sent at the join may have come
	// before the receiver accepted the sender as a member).
	waitFor(t, 10*time.Second, "n00 and n01 to know each other", func() bool {
		_, ab := (*a.n.known.Load())["n01"]
		_, ba := (*b.n.known.Load())["n00"]
		return ab && ba && len(*a.n.loadOut.Load()) == 1 && len(*b.n.loadOut.Load()) == 1
	})
	srcs[0].book(2, 3_000, 1, 1)
	for _, tn := range []*testNode{a, b} {
		tn.n.loadJoined.Store(true)
		tn.n.wakeLoad()
	}
	waitFor(t, 10*time.Second, "n01 to see n00's booking", func() bool { u, _, _ := peerUnits(b, "b2"); return u == 3_000 })
	snaps := func() int {
		a.n.loadMu.Lock()
		defer a.n.loadMu.Unlock()
		return a.n.lp.snaps
	}
	before := snaps()

	c.kill("n01")
	b = c.start("n01")
	b.n.SetLoadSource(newFakeLoad(t, b.ix))
	// n00 hears the new incarnation in n01's first snapshot and answers
	// with its names: n01 resolves n00's bookings though no periodic
	// snapshot comes.
	waitFor(t, 30*time.Second, "the restarted n01 to see n00's booking", func() bool { u, _, _ := peerUnits(b, "b2"); return u == 3_000 })
	if got := snaps(); got <= before {
		t.Fatalf("n00 sent no snapshot after n01 restarted (%d before, %d after)", before, got)
	}
	if got := a.n.Admin().Load.Peers; len(got) != 1 || got[0].Peer != "n01" {
		t.Fatalf("n00's load peers: %+v, want n01's new session", got)
	}
}
