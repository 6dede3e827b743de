package mesh

import (
	"testing"

	"github.com/kvmesh/kvmesh/tree"
)

// A backend id freed for a new name (tree.Index.ForgetRemoved) starts
// from nothing: the peers' bookings, written counts and lessons for the
// old backend, and the retired totals, go with it.
func TestLoadTableForgetsFreedIDs(t *testing.T) {
	lt := testLoadTable()
	m := snapshot(1, 1, true, 100, 200)
	m.Entries[0].Written, m.Entries[1].Written = 6400, 800
	lt.apply("p", m, 40, 0)
	lt.apply("p", &loadMsg{Seq: 2, Lessons: true, Entries: []loadEntry{{Idx: 10, Lesson: lessonWire{Stamp: 5, Scale: loadFracOne}}}}, 10, 0)
	r := snapshot(1, 1, true, 1) // q restarts (below): what it wrote to b0 is retired
	r.Entries[0].Written = 300
	lt.apply("q", r, 40, 0)
	lt.apply("q", snapshot(2, 2, true, 1), 40, 0)
	lt.publish(0, 0)
	if units(lt, 0) != 101 || lt.writtenSum(0) != 6400+300 || lt.lesson(0) == nil {
		t.Fatalf("before: b0 units %v written %v lesson %v (the test would prove nothing)", units(lt, 0), lt.writtenSum(0), lt.lesson(0))
	}
	lt.forget([]tree.BackendID{0})
	lt.publish(1, 0)
	if units(lt, 0) != 0 || lt.writtenSum(0) != 0 || lt.lesson(0) != nil {
		t.Fatalf("after forget: b0 units %v written %v lesson %v, want nothing", units(lt, 0), lt.writtenSum(0), lt.lesson(0))
	}
	if units(lt, 1) != 200 || lt.writtenSum(1) != 800 {
		t.Fatalf("b1 lost its state: units %v written %v", units(lt, 1), lt.writtenSum(1))
	}
	if _, ok := lt.peers["p"].ids[10]; ok {
		t.Fatal("p's index 10 still resolves to the freed id")
	}
}

// A peer that gives one of its indexes to another backend (it forgot the
// old one's name) says so in its next snapshot with names: the index is
// resolved again, and the entries go to the new backend's id.
func TestLoadTableIndexRenamed(t *testing.T) {
	lt := testLoadTable()
	lt.apply("p", snapshot(1, 1, true, 100), 40, 0) // index 10: b0
	lt.publish(0, 0)
	if units(lt, 0) != 100 {
		t.Fatalf("b0 %v, want 100", units(lt, 0))
	}
	m := &loadMsg{Seq: 2, Snapshot: true, Names: true, Incarnation: 1,
		Entries: []loadEntry{{Idx: 10, Name: "b2", Units: 70}}}
	lt.apply("p", m, 40, 1)
	lt.publish(1, 0)
	if units(lt, 0) != 0 || units(lt, 2) != 70 {
		t.Fatalf("after the rename: b0 %v b2 %v, want 0 and 70", units(lt, 0), units(lt, 2))
	}
}
