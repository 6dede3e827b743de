package kvevents

import (
	"testing"
	"time"

	"github.com/kvmesh/kvmesh/tree"
)

// A stream's backend keeps its registry id for the process's life: its
// consumer holds the id, so the Index must never forget the name, even
// once a removal of it is past the forget horizon.
func TestStreamBackendIsNeverForgotten(t *testing.T) {
	sink := newMemSink(t)
	cfg := testConfig()
	cfg.Listen = "tcp://127.0.0.1:0"
	if _, err := NewManager(cfg, []StreamConfig{{Backend: "e0", Topic: "kv", Model: "m"}}, Deps{Index: sink.ix, Sink: sink}); err != nil {
		t.Fatal(err)
	}
	id, _ := sink.ix.BackendByName("e0")
	if _, err := sink.ix.EnsureBackend("other"); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for _, name := range []string{"e0", "other"} {
		if _, err := sink.ix.Invalidate(name, true, tree.MakeTimestamp(now.UnixMilli(), 0), 1); err != nil {
			t.Fatal(err)
		}
	}
	freed := sink.ix.ForgetRemoved(now.Add(7*time.Hour).UnixMilli(), nil)
	if len(freed) != 1 || freed[0] == id {
		t.Fatalf("freed %v; want only other's id, not e0's %d", freed, id)
	}
	if got, ok := sink.ix.BackendByName("e0"); !ok || got != id {
		t.Fatalf("e0: id %d %v, want kept at %d", got, ok, id)
	}
}
