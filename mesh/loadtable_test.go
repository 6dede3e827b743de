package mesh

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/kvmesh/kvmesh/tree"
)

// testLoadTable resolves "b0".."b3" to ids 0..3 and knows nothing else.
func testLoadTable() *loadTable {
	return newLoadTable(1000, 3000, 250, 16, func(name string) (tree.BackendID, bool) {
		if len(name) == 2 && name[0] == 'b' && name[1] >= '0' && name[1] <= '3' {
			return tree.BackendID(name[1] - '0'), true
		}
		return 0, false
	})
}

// snapshot is a snapshot from a peer of incarnation inc, its backend
// indexes 10+i standing for "b<i>".
func snapshot(seq, inc uint64, names bool, units ...uint64) *loadMsg {
	m := &loadMsg{Seq: seq, Snapshot: true, Names: names, Incarnation: inc}
	for i, u := range units {
		m.Entries = append(m.Entries, loadEntry{Idx: uint32(10 + i), Name: "b" + string(rune('0'+i)), Units: u, Requests: u / 100, InFlight: u / 100})
	}
	if !names {
		for i := range m.Entries {
			m.Entries[i].Name = ""
		}
	}
	return m
}

func delta(seq uint64, idx uint32, units uint64) *loadMsg {
	return &loadMsg{Seq: seq, Entries: []loadEntry{{Idx: idx, Units: units, Requests: units / 100, InFlight: units / 100}}}
}

func units(t *loadTable, id tree.BackendID) float64 { u, _, _ := t.sum(id); return u }

func TestLoadTableSnapshotThenDeltas(t *testing.T) {
	lt := testLoadTable()
	if got := lt.apply("p", delta(1, 10, 500), 10, 0); got != loadApplyUnsynced {
		t.Fatalf("a delta before any snapshot: %v, want unsynced", got)
	}
	if got := lt.apply("p", snapshot(2, 7, true, 100, 200), 40, 0); got != loadApplyOK {
		t.Fatalf("snapshot: %v", got)
	}
	lt.publish(0, 0)
	if units(lt, 0) != 100 || units(lt, 1) != 200 {
		t.Fatalf("after the snapshot: b0 %v b1 %v, want 100 200", units(lt, 0), units(lt, 1))
	}
	lt.apply("p", delta(3, 11, 900), 10, 10)
	lt.apply("p", delta(4, 10, 0), 10, 10) // b0 released everything
	lt.publish(10, 0)
	if units(lt, 0) != 0 || units(lt, 1) != 900 {
		t.Fatalf("after deltas: b0 %v b1 %v, want 0 900", units(lt, 0), units(lt, 1))
	}
	if got := lt.apply("p", delta(3, 11, 5), 10, 20); got != loadApplyStale {
		t.Fatalf("a replayed delta: %v, want stale", got)
	}
	lt.publish(20, 0)
	if units(lt, 1) != 900 {
		t.Fatalf("a stale delta changed b1 to %v", units(lt, 1))
	}
	// A later snapshot replaces everything: what it leaves out is zero.
	lt.apply("p", &loadMsg{Seq: 5, Snapshot: true, Incarnation: 7, Entries: []loadEntry{{Idx: 10, Units: 3}}}, 20, 30)
	lt.publish(30, 0)
	if units(lt, 0) != 3 || units(lt, 1) != 0 {
		t.Fatalf("after a second snapshot: b0 %v b1 %v, want 3 0", units(lt, 0), units(lt, 1))
	}
}

// Two peers' bookings at one backend add up; a backend this node does not
// know is counted and ignored.
func TestLoadTableSumsPeers(t *testing.T) {
	lt := testLoadTable()
	lt.apply("p", snapshot(1, 1, true, 100, 0, 0, 0), 40, 0)
	lt.apply("q", snapshot(1, 2, true, 50), 40, 0)
	m := &loadMsg{Seq: 2, Snapshot: true, Names: true, Incarnation: 2, Entries: []loadEntry{{Idx: 10, Name: "b0", Units: 50}, {Idx: 99, Name: "elsewhere", Units: 1e6}}}
	lt.apply("q", m, 40, 0)
	lt.publish(0, 0)
	if got := units(lt, 0); got != 150 {
		t.Fatalf("b0 = %v, want 150 (100 from p, 50 from q)", got)
	}
	if v := lt.view(0, func(id tree.BackendID) string { return "b" }); v[1].UnknownBackends != 1 {
		t.Fatalf("unknown backend entries: %+v", v[1])
	}
}

// A restarted peer (new incarnation, its sequence numbers past the old
// one's: loadSeqBase) starts over: its old bookings go.
func TestLoadTableNewIncarnation(t *testing.T) {
	lt := testLoadTable()
	lt.apply("p", snapshot(50, 1, true, 100, 100), 40, 0)
	if got := lt.apply("p", snapshot(1050, 2, true, 7), 40, 10); got != loadApplyOK {
		t.Fatalf("the new incarnation's first snapshot: %v", got)
	}
	lt.publish(10, 0)
	if units(lt, 0) != 7 || units(lt, 1) != 0 {
		t.Fatalf("after restart: b0 %v b1 %v, want 7 0", units(lt, 0), units(lt, 1))
	}
	// A snapshot without names after a restart cannot be resolved yet.
	lt.apply("p", snapshot(2050, 3, false, 9), 20, 20)
	lt.publish(20, 0)
	if units(lt, 0) != 0 {
		t.Fatalf("entries of an unnamed incarnation were applied: b0 %v", units(lt, 0))
	}
}

// A silent peer's bookings weigh less after fresh and are gone at maxAge.
func TestLoadTableAges(t *testing.T) {
	lt := testLoadTable() // fresh 1 s, max age 3 s
	lt.apply("p", snapshot(1, 1, true, 1000), 40, 0)
	for _, c := range []struct {
		at   int64
		want float64
	}{{500, 1000}, {1000, 1000}, {2000, 500}, {2999, 0.5}} {
		lt.publish(c.at, 0)
		if got := units(lt, 0); math.Abs(got-c.want) > 1e-9 {
			t.Fatalf("at %d ms: %v, want %v", c.at, got, c.want)
		}
	}
	if gone := lt.expire(3000, nil); len(gone) != 1 || gone[0] != "p" {
		t.Fatalf("expired %v at max age, want [p]", gone)
	}
	lt.publish(3000, 0)
	if units(lt, 0) != 0 {
		t.Fatal("an expired peer's bookings remain")
	}
}

// publish recomputes the sums only when they can have changed: a message
// applied, a peer forgotten, the local rate changed, or a peer's weight
// falling with age; the sums it leaves are the same either way.
func TestLoadTablePublishSkipsWhatDidNotChange(t *testing.T) {
	lt := testLoadTable() // fresh 1 s, max age 3 s
	lt.apply("p", snapshot(1, 1, true, 1000), 40, 0)
	lt.publish(0, 5)
	for at := int64(1); at <= 1000; at += 10 { // fresh: weight 1 throughout
		lt.publish(at, 5)
	}
	if lt.recomputed != 1 || units(lt, 0) != 1000 {
		t.Fatalf("101 publishes of an unchanged fresh table: %d recomputed, units %v; want 1 and 1000", lt.recomputed, units(lt, 0))
	}
	lt.publish(1000, 6) // the local rate changed
	lt.publish(1001, 6) // p's weight starts falling
	lt.publish(2000, 6)
	if lt.recomputed != 4 || units(lt, 0) != 500 {
		t.Fatalf("after a rate change and aging: %d recomputed, units %v; want 4 and 500", lt.recomputed, units(lt, 0))
	}
	lt.apply("p", snapshot(2, 1, false, 10), 40, 2000) // heard again: fresh until 3000
	lt.publish(2000, 6)
	lt.publish(2500, 6)
	if lt.recomputed != 5 || units(lt, 0) != 10 {
		t.Fatalf("after a message: %d recomputed, units %v; want 5 and 10", lt.recomputed, units(lt, 0))
	}
	lt.expire(2600, map[string]struct{}{})
	lt.publish(2600, 6)
	if lt.recomputed != 6 || units(lt, 0) != 0 {
		t.Fatalf("after the peer left: %d recomputed, units %v; want 6 and 0", lt.recomputed, units(lt, 0))
	}
}

// Whatever happens (messages from peers that restart, fall silent, leave;
// the local rate changing), a table that skips publishes publishes what one
// that recomputes every time does.
func TestLoadTableSkippingPublishesTheSame(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	skip, every := testLoadTable(), testLoadTable()
	peers := []string{"p", "q", "r"}
	seq := map[string]uint64{}
	inc := map[string]uint64{"p": 1, "q": 1, "r": 1}
	now := int64(0)
	for step := range 5000 {
		now += int64(rng.IntN(300))
		switch peer := peers[rng.IntN(len(peers))]; rng.IntN(10) {
		case 0: // a restart: a new incarnation's snapshot, its sequence past the last
			inc[peer]++
			seq[peer] += 1000
			fallthrough
		case 1, 2: // a snapshot
			seq[peer]++
			m := snapshot(seq[peer], inc[peer], rng.IntN(2) == 0, uint64(rng.IntN(500)), uint64(rng.IntN(500)), uint64(rng.IntN(500)))
			for i := range m.Entries {
				m.Entries[i].Written = uint64(step)
			}
			skip.apply(peer, m, 40, now)
			every.apply(peer, m, 40, now)
		case 3, 4, 5: // a delta
			seq[peer]++
			m := delta(seq[peer], uint32(10+rng.IntN(3)), uint64(rng.IntN(500)))
			skip.apply(peer, m, 10, now)
			every.apply(peer, m, 10, now)
		case 6: // a member left
			keep := map[string]struct{}{}
			for _, p := range peers {
				if p != peer {
					keep[p] = struct{}{}
				}
			}
			skip.expire(now, keep)
			every.expire(now, keep)
		}
		skip.expire(now, nil)
		every.expire(now, nil)
		rate := float64(rng.IntN(3))
		skip.publish(now, rate)
		every.dirty = true // recompute every time
		every.publish(now, rate)
		for id := range tree.BackendID(4) {
			su, sr, sf := skip.sum(id)
			eu, er, ef := every.sum(id)
			// Equal but for the order of the float sums (map order).
			near := func(a, b float64) bool { return math.Abs(a-b) <= 1e-9*max(1, math.Abs(b)) }
			if !near(su, eu) || !near(sr, er) || !near(sf, ef) || !near(skip.writtenSum(id), every.writtenSum(id)) ||
				!near(math.Float64frombits(skip.share.Load()), math.Float64frombits(every.share.Load())) {
				t.Fatalf("step %d, %d ms, b%d: skipping %v %v %v %v, recomputing %v %v %v %v", step, now, id,
					su, sr, sf, skip.writtenSum(id), eu, er, ef, every.writtenSum(id))
			}
		}
	}
	if skip.recomputed >= every.recomputed || skip.recomputed == 0 {
		t.Fatalf("the skipping table recomputed %d times of %d: the test never skipped or never published", skip.recomputed, every.recomputed)
	}
}

// A peer's answer and prompt totals count once its incarnation is known,
// keep their newest value (an answers message leaves the prompt totals
// alone, and a prompts message the answer totals), and stay in the sums
// (retired) when it restarts or leaves: the mesh's totals never go back.
func TestLoadTableAnswers(t *testing.T) {
	lt := testLoadTable()
	answers := func(seq, n, prompt, cached uint64) *loadMsg {
		return &loadMsg{Seq: seq, Answers: true, Answered: answerTotals{N: n, Prompt: prompt, Cached: cached}}
	}
	prompts := func(seq, n, units uint64) *loadMsg {
		return &loadMsg{Seq: seq, Prompts: true, Answered: answerTotals{Routed: n, RoutedUnits: units}}
	}
	total := func() answerTotals {
		a := &lt.answered
		return answerTotals{N: a.n.Load(), Prompt: a.prompt.Load(), Cached: a.cached.Load(), Routed: a.routed.Load(), RoutedUnits: a.routedUnits.Load()}
	}
	if got := lt.apply("p", answers(1, 10, 1000, 500), 10, 0); got != loadApplyUnsynced {
		t.Fatalf("answers before any snapshot: %v, want unsynced", got)
	}
	if got := lt.apply("p", prompts(1, 10, 1000), 10, 0); got != loadApplyUnsynced {
		t.Fatalf("prompts before any snapshot: %v, want unsynced", got)
	}
	lt.apply("p", snapshot(2, 1, true, 0), 40, 0)
	lt.apply("p", answers(3, 10, 1000, 500), 10, 0)
	lt.apply("p", prompts(4, 12, 3000), 10, 0)
	lt.apply("q", snapshot(1, 7, true, 0), 40, 0)
	lt.apply("q", prompts(2, 5, 900), 10, 0)
	lt.apply("q", answers(3, 4, 400, 100), 10, 0)
	lt.publish(1, 0)
	want := answerTotals{N: 14, Prompt: 1400, Cached: 600, Routed: 17, RoutedUnits: 3900}
	if got := total(); got != want {
		t.Fatalf("two peers' totals: %+v, want %+v", got, want)
	}
	lt.apply("p", snapshot(5, 2, true, 0), 40, 2) // p restarted: its totals start over
	lt.apply("p", answers(6, 1, 100, 100), 10, 2)
	lt.apply("p", prompts(7, 2, 50), 10, 2)
	lt.expire(3, map[string]struct{}{"p": {}}) // q left
	lt.publish(3, 0)
	want = answerTotals{N: 15, Prompt: 1500, Cached: 700, Routed: 19, RoutedUnits: 3950}
	if got := total(); got != want {
		t.Fatalf("after a restart and a departure: %+v, want %+v (nothing lost)", got, want)
	}
}

// Departed members are forgotten at once.
func TestLoadTableExpireKeeps(t *testing.T) {
	lt := testLoadTable()
	lt.apply("p", snapshot(1, 1, true, 10), 40, 0)
	lt.apply("q", snapshot(1, 1, true, 20), 40, 0)
	if gone := lt.expire(1, map[string]struct{}{"q": {}}); len(gone) != 1 || gone[0] != "p" {
		t.Fatalf("gone %v, want [p]", gone)
	}
	lt.publish(1, 0)
	if units(lt, 0) != 20 {
		t.Fatalf("b0 = %v, want q's 20", units(lt, 0))
	}
}

// The mesh share follows the routing rates peers report in snapshots.
func TestLoadTableShare(t *testing.T) {
	lt := testLoadTable()
	lt.publish(0, 10)
	if s := math.Float64frombits(lt.share.Load()); s != 1 {
		t.Fatalf("share alone = %v, want 1", s)
	}
	// Peer p routes 30 requests per second: 0, then 30 after 1 s, 60 after 2 s.
	for i, routed := range []uint64{0, 30, 60, 90, 120, 150, 180, 210} {
		m := snapshot(uint64(i+1), 1, true, 1)
		m.Routed = routed
		lt.apply("p", m, 40, int64(i)*1000)
	}
	lt.publish(7000, 10)
	if s := math.Float64frombits(lt.share.Load()); math.Abs(s-0.25) > 0.01 {
		t.Fatalf("share = %v, want 0.25 (10 of 40 requests/s)", s)
	}
}

// A backend this node registers only after the peer named it (its router
// starts later than its mesh node) is resolved when it is next used.
func TestLoadTableResolvesLateBackends(t *testing.T) {
	known := false
	lt := newLoadTable(1000, 3000, 250, 16, func(name string) (tree.BackendID, bool) {
		if name == "late" && known {
			return 5, true
		}
		return 0, false
	})
	m := &loadMsg{Seq: 1, Snapshot: true, Names: true, Incarnation: 1, Entries: []loadEntry{{Idx: 3, Name: "late", Units: 10}}}
	lt.apply("p", m, 20, 0)
	lt.publish(0, 0)
	if units(lt, 5) != 0 {
		t.Fatal("an unknown backend got bookings")
	}
	known = true
	lt.apply("p", delta(2, 3, 70), 10, 1)
	lt.publish(1, 0)
	if got := units(lt, 5); got != 70 {
		t.Fatalf("after the backend was registered here: %v units, want 70", got)
	}
}

// The peers' written totals only grow: a peer's count survives its
// bookings going to zero, its departure and its restart.
func TestLoadTableWrittenNeverGoesBack(t *testing.T) {
	lt := testLoadTable()
	w := func() float64 { lt.publish(0, 0); return lt.writtenSum(0) }
	m := snapshot(1, 1, true, 100)
	m.Entries[0].Written = 6400
	lt.apply("p", m, 40, 0)
	if got := w(); got != 6400 {
		t.Fatalf("written %v, want 6400", got)
	}
	d := delta(2, 10, 0) // p's bookings at b0 drop to zero
	d.Entries[0].Written = 8000
	lt.apply("p", d, 10, 0)
	if got := w(); got != 8000 {
		t.Fatalf("after a release: written %v, want 8000", got)
	}
	r := snapshot(3, 2, true, 5) // p restarts: its count starts over
	r.Entries[0].Written = 64
	lt.apply("p", r, 40, 0)
	if got := w(); got != 8064 {
		t.Fatalf("after a restart: written %v, want 8064 (8000 retired + 64)", got)
	}
	lt.expire(1, map[string]struct{}{}) // p leaves
	if got := w(); got != 8064 {
		t.Fatalf("after p left: written %v, want 8064", got)
	}
}

// A peer forgotten while its process lives on (silent for maxAge, or
// taken for failed by membership) and heard again with the same
// incarnation sends the same cumulative totals: they count once. One that
// restarted meanwhile keeps its old totals retired and adds its new ones.
func TestLoadTableForgottenPeerComesBack(t *testing.T) {
	for _, tc := range []struct {
		name   string
		forget func(lt *loadTable)
		inc    uint64 // the incarnation it comes back with
		want   float64
	}{
		{"silent, same process", func(lt *loadTable) { lt.expire(3000, nil) }, 7, 6400},
		{"left membership, same process", func(lt *loadTable) { lt.expire(1, map[string]struct{}{}) }, 7, 6400},
		{"silent, restarted", func(lt *loadTable) { lt.expire(3000, nil) }, 8, 6400 + 64},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lt := testLoadTable()
			m := snapshot(1, 7, true, 100)
			m.Entries[0].Written = 6400
			lt.apply("p", m, 40, 0)
			lt.apply("p", &loadMsg{Seq: 2, Answers: true, Answered: answerTotals{N: 10, Prompt: 1000, Cached: 500}}, 10, 0)
			tc.forget(lt)
			lt.publish(3000, 0)
			if got := lt.writtenSum(0); got != 6400 {
				t.Fatalf("forgotten: written %v, want 6400 (retired)", got)
			}
			back := snapshot(3, tc.inc, true, 100)
			back.Entries[0].Written = 6400
			if tc.inc != 7 {
				back.Entries[0].Written = 64
			}
			lt.apply("p", back, 40, 3001)
			answers := answerTotals{N: 10, Prompt: 1000, Cached: 500}
			if tc.inc != 7 {
				answers = answerTotals{N: 1, Prompt: 100, Cached: 100}
			}
			lt.apply("p", &loadMsg{Seq: 4, Answers: true, Answered: answers}, 10, 3001)
			lt.publish(3001, 0)
			if got := lt.writtenSum(0); got != tc.want {
				t.Fatalf("back: written %v, want %v", got, tc.want)
			}
			wantN := uint64(10)
			if tc.inc != 7 {
				wantN = 11
			}
			if got := lt.answered.n.Load(); got != wantN {
				t.Fatalf("back: %d answers, want %d", got, wantN)
			}
			lt.expire(10_000, nil) // and gone again: still counted once
			lt.publish(10_000, 0)
			if got := lt.writtenSum(0); got != tc.want {
				t.Fatalf("gone again: written %v, want %v", got, tc.want)
			}
		})
	}
}
