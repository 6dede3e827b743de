package mesh

import (
	"math/rand/v2"
	"testing"

	"github.com/kvmesh/kvmesh/tree"
)

// A delta overtaken by a later message of the same session still applies
// what the later one did not change. Before, the receiver applied only
// messages numbered above the last it applied: an answers message sent
// right after a bookings delta, arriving first (over QUIC each message has
// a stream of its own), got the delta dropped as stale.
func TestLoadTableDeltaOvertakenByALaterMessage(t *testing.T) {
	lt := testLoadTable()
	lt.apply("p", snapshot(10, 7, true, 100, 200), 40, 0)
	answers := &loadMsg{Seq: 13, Answers: true, Answered: answerTotals{N: 5, Prompt: 500, Cached: 100}}
	if got := lt.apply("p", answers, 10, 1); got != loadApplyOK {
		t.Fatalf("answers: %v", got)
	}
	if got := lt.apply("p", delta(12, 11, 900), 10, 2); got != loadApplyOK {
		t.Fatalf("the bookings delta sent before the answers, arriving after them: %v, want applied", got)
	}
	if got := lt.apply("p", delta(11, 10, 300), 10, 3); got != loadApplyOK {
		t.Fatalf("an older delta of another backend: %v, want applied", got)
	}
	lt.publish(3, 0)
	if u0, u1 := units(lt, 0), units(lt, 1); u0 != 300 || u1 != 900 {
		t.Fatalf("b0 %v b1 %v, want 300 900", u0, u1)
	}
	if n := lt.answered.n.Load(); n != 5 {
		t.Fatalf("answers %v, want 5", n)
	}
	// An older delta of a backend a later one set changes nothing.
	if got := lt.apply("p", delta(11, 11, 5), 10, 4); got != loadApplyStale {
		t.Fatalf("a delta older than b1's figures: %v, want stale", got)
	}
	lt.publish(4, 0)
	if u := units(lt, 1); u != 900 {
		t.Fatalf("b1 %v, want 900", u)
	}
}

// A release overtaken by the booking before it stays released: the zero
// figures keep their sequence.
func TestLoadTableReleaseOvertaken(t *testing.T) {
	lt := testLoadTable()
	lt.apply("p", snapshot(10, 7, true, 0, 0), 40, 0)
	lt.apply("p", delta(12, 10, 0), 10, 1) // released
	if got := lt.apply("p", delta(11, 10, 500), 10, 2); got != loadApplyStale {
		t.Fatalf("the booking sent before the release: %v, want stale", got)
	}
	lt.publish(2, 0)
	if u := units(lt, 0); u != 0 {
		t.Fatalf("b0 %v after the late booking, want 0 (released)", u)
	}
	for _, v := range lt.view(2, func(id tree.BackendID) string { return "b" }) {
		if len(v.Bookings) != 0 {
			t.Fatalf("the view shows zero bookings: %+v", v.Bookings)
		}
	}
}

// A snapshot replaces what was applied before it, and not what a later
// delta set; an older snapshot than one applied changes nothing.
func TestLoadTableSnapshotOvertaken(t *testing.T) {
	lt := testLoadTable()
	lt.apply("p", snapshot(10, 7, true, 100, 200, 300), 40, 0)
	lt.apply("p", delta(13, 11, 900), 10, 1)
	// Snapshot 12 (sent before delta 13) arrives after it.
	if got := lt.apply("p", &loadMsg{Seq: 12, Snapshot: true, Incarnation: 7, Entries: []loadEntry{{Idx: 10, Units: 3}, {Idx: 11, Units: 4}}}, 20, 2); got != loadApplyOK {
		t.Fatalf("snapshot 12: %v", got)
	}
	lt.publish(2, 0)
	if u0, u1, u2 := units(lt, 0), units(lt, 1), units(lt, 2); u0 != 3 || u1 != 900 || u2 != 0 {
		t.Fatalf("b0 %v b1 %v b2 %v, want 3 (the snapshot), 900 (the later delta), 0 (left out)", u0, u1, u2)
	}
	if got := lt.apply("p", &loadMsg{Seq: 11, Snapshot: true, Incarnation: 7, Entries: []loadEntry{{Idx: 10, Units: 50}, {Idx: 12, Units: 60}}}, 20, 3); got != loadApplyStale {
		t.Fatalf("snapshot 11 after 12: %v, want stale", got)
	}
	lt.publish(3, 0)
	if u0, u2 := units(lt, 0), units(lt, 2); u0 != 3 || u2 != 0 {
		t.Fatalf("an older snapshot changed b0 %v b2 %v, want 3 0", u0, u2)
	}
}

// Whatever order one session's messages arrive in, the peer's bookings
// end as the sender's last figures.
func TestLoadTableAnyOrder(t *testing.T) {
	for seed := range uint64(200) {
		r := rand.New(rand.NewPCG(seed, 1))
		var msgs []*loadMsg
		last := [4]uint64{}
		seq := uint64(100)
		msgs = append(msgs, snapshot(seq, 7, true, 0, 0, 0, 0))
		for range 30 {
			seq++
			if r.IntN(5) == 0 {
				msgs = append(msgs, &loadMsg{Seq: seq, Answers: true, Answered: answerTotals{N: seq}})
				continue
			}
			if r.IntN(8) == 0 {
				m := &loadMsg{Seq: seq, Snapshot: true, Incarnation: 7}
				for i, u := range last {
					if u > 0 {
						m.Entries = append(m.Entries, loadEntry{Idx: uint32(10 + i), Units: u})
					}
				}
				msgs = append(msgs, m)
				continue
			}
			b := r.IntN(4)
			last[b] = uint64(r.IntN(3)) * 100
			msgs = append(msgs, delta(seq, uint32(10+b), last[b]))
		}
		lt := testLoadTable()
		lt.apply("p", msgs[0], 10, 0) // the session's first snapshot starts it
		rest := msgs[1:]
		r.Shuffle(len(rest), func(i, j int) { rest[i], rest[j] = rest[j], rest[i] })
		for _, m := range rest {
			lt.apply("p", m, 10, 1)
		}
		lt.publish(1, 0)
		for b, want := range last {
			if got := units(lt, tree.BackendID(b)); got != float64(want) {
				t.Fatalf("seed %d: b%d %v, want %v", seed, b, got, want)
			}
		}
	}
}
