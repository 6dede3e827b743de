package kvevents

import (
	"testing"

	"github.com/kvmesh/kvmesh/tree"
)

func tokens(n int, base uint32) []uint32 {
	t := make([]uint32, n)
	for i := range t {
		t[i] = base + uint32(i)*2654435761
	}
	return t
}

// routerChain is what the router computes for a prompt in precise mode.
func routerChain(t *testing.T, model, salt string, toks []uint32) []tree.Key {
	cfg := tree.DefaultConfig()
	var ch tree.Chain
	tree.NewKeyer(cfg).Tokens(&ch, Seed(model, salt), toks, nil)
	return ch.Keys
}

func stored(hashes []Hash, parent Hash, hasParent bool, toks []uint32, bs int) Event {
	return Event{Kind: Stored, Hashes: hashes, Parent: parent, HasParent: hasParent, Tokens: toks, BlockSize: bs, LoraID: -1, Group: -1}
}

func TestMapperKeysMatchRouterChain(t *testing.T) {
	toks := tokens(16*5, 7)
	want := routerChain(t, "llama", "", toks)
	mp := NewMapper(MapperConfig{BlockTokens: 16, MaxBlocks: 100, Model: "llama"})
	var ops Ops
	e1 := stored([]Hash{11, 12}, 0, false, toks[:32], 16)
	mp.Apply(&e1, 1000, &ops)
	e2 := stored([]Hash{13, 14, 15}, 12, true, toks[32:], 16)
	mp.Apply(&e2, 1000, &ops)
	if len(ops.Store) != 5 {
		t.Fatalf("store %d keys", len(ops.Store))
	}
	for i := range want {
		if ops.Store[i] != want[i] {
			t.Fatalf("block %d: event key %x, router key %x", i, ops.Store[i], want[i])
		}
	}
	// Engine blocks of 32 tokens map to kvmesh's every second key.
	mp2 := NewMapper(MapperConfig{BlockTokens: 16, MaxBlocks: 100, Model: "llama"})
	ops.Reset()
	e3 := stored([]Hash{21, 22}, 0, false, toks[:64], 32)
	mp2.Apply(&e3, 1000, &ops)
	if len(ops.Store) != 2 || ops.Store[0] != want[1] || ops.Store[1] != want[3] {
		t.Fatalf("32-token blocks: %x, want %x %x", ops.Store, want[1], want[3])
	}
	// Removal ends the claim; a second removal of the same block is unknown.
	ops.Reset()
	rm := Event{Kind: Removed, Hashes: []Hash{15, 15}, Group: -1}
	mp.Apply(&rm, 0, &ops)
	if len(ops.End) != 1 || ops.End[0] != want[4] || mp.Stats.UnknownRemoved != 1 || mp.Len() != 4 {
		t.Fatalf("end %x (want %x), stats %+v", ops.End, want[4], mp.Stats)
	}
	// A clear forgets everything.
	ops.Reset()
	cl := Event{Kind: Cleared}
	mp.Apply(&cl, 0, &ops)
	if !ops.Clear || mp.Len() != 0 {
		t.Fatalf("clear: %+v, len %d", ops, mp.Len())
	}
}

func TestMapperLoraSaltAndUnmatchable(t *testing.T) {
	toks := tokens(32, 99)
	mp := NewMapper(MapperConfig{BlockTokens: 16, MaxBlocks: 100, Model: "base"})
	var ops Ops
	e := stored([]Hash{1, 2}, 0, false, toks, 16)
	e.LoraName = "sql"
	e.ExtraOff = []int32{0, 2, 3}
	e.Extra = []ExtraKey{{Str: "sql", IsStr: true}, {Str: "tenant-salt", IsStr: true}, {Str: "sql", IsStr: true}}
	mp.Apply(&e, 1000, &ops)
	want := routerChain(t, "sql", "tenant-salt", toks)
	if len(ops.Store) != 2 || ops.Store[0] != want[0] || ops.Store[1] != want[1] {
		t.Fatalf("lora+salt keys %x, want %x", ops.Store, want)
	}
	// A multimodal hash (not reproducible) on block 1 stops the chain there.
	ops.Reset()
	e2 := stored([]Hash{3, 4}, 0, false, toks, 16)
	e2.ExtraOff = []int32{0, 0, 1}
	e2.Extra = []ExtraKey{{}}
	mp.Apply(&e2, 1000, &ops)
	if len(ops.Store) != 1 || mp.Stats.Unmatchable != 1 {
		t.Fatalf("unmatchable: store %d, stats %+v", len(ops.Store), mp.Stats)
	}
	// Unknown parent, CPU tier, secondary group, bad block size: counted, no claims.
	ops.Reset()
	for _, ev := range []Event{
		stored([]Hash{5}, 777, true, toks[:16], 16),
		func() Event { e := stored([]Hash{6}, 0, false, toks[:16], 16); e.Medium = MediumCPU; return e }(),
		func() Event { e := stored([]Hash{7}, 0, false, toks[:16], 16); e.Group = 1; return e }(),
		stored([]Hash{8}, 0, false, toks[:24], 24),
	} {
		mp.Apply(&ev, 1000, &ops)
	}
	s := mp.Stats
	if len(ops.Store) != 0 || s.UnknownParent != 1 || s.StoredCPU != 1 || s.OtherGroup != 1 || s.BadBlockSize != 1 {
		t.Fatalf("store %d, stats %+v", len(ops.Store), s)
	}
}

func TestMapperBoundAndRenewal(t *testing.T) {
	toks := tokens(16*4, 5)
	mp := NewMapper(MapperConfig{BlockTokens: 16, MaxBlocks: 3, Model: "m"})
	var ops Ops
	e := stored([]Hash{1, 2, 3, 4}, 0, false, toks, 16)
	mp.Apply(&e, 1000, &ops)
	if len(ops.Store) != 3 || mp.Stats.Full != 1 || mp.Len() != 3 {
		t.Fatalf("bound: store %d, stats %+v", len(ops.Store), mp.Stats)
	}
	if due := mp.Due(500, 100, 2000, nil); len(due) != 0 {
		t.Fatalf("due too early: %d", len(due))
	}
	if due := mp.Due(950, 100, 2000, nil); len(due) != 3 {
		t.Fatalf("due = %d, want 3", len(due))
	}
	if due := mp.Due(950, 100, 3000, nil); len(due) != 0 {
		t.Fatalf("renewed twice: %d", len(due))
	}
}

func TestSeqTracker(t *testing.T) {
	var s SeqTracker
	if s.Observe(5) != SeqFirst {
		t.Fatal("first")
	}
	s.Applied(5)
	if s.Observe(6) != SeqNext || s.Observe(9) != SeqGap || s.Observe(5) != SeqRestart || s.Observe(0) != SeqRestart {
		t.Fatal("next/gap/restart")
	}
	if from, to := s.Missing(9); from != 6 || to != 8 {
		t.Fatalf("missing %d..%d", from, to)
	}
	// Replayed 6..12 while the live queue held 6..9: those are duplicates.
	for q := int64(6); q <= 12; q++ {
		s.Replayed(q)
	}
	if s.Observe(9) != SeqDuplicate || s.Observe(13) != SeqNext || s.Observe(4) != SeqRestart {
		t.Fatal("after replay")
	}
	s.Applied(13)
	if s.Observe(12) != SeqRestart {
		t.Fatal("live applied past the replay: going back is a restart")
	}
	s.Reset()
	if s.Observe(0) != SeqFirst {
		t.Fatal("reset")
	}
}

func TestOwnerRendezvous(t *testing.T) {
	members := []string{"r1", "r2", "r3"}
	backends := make([]string, 60)
	for i := range backends {
		backends[i] = "engine-" + string(rune('a'+i%26)) + string(rune('0'+i/26))
	}
	count := map[string]int{}
	for _, b := range backends {
		o := Owner(b, members)
		count[o]++
		// Losing a member that does not own b keeps b where it is; losing
		// the owner moves it to one of the others.
		for i, m := range members {
			rest := append(append([]string(nil), members[:i]...), members[i+1:]...)
			o2 := Owner(b, rest)
			if m != o && o2 != o {
				t.Fatalf("%s moved from %s to %s when %s left", b, o, o2, m)
			}
			if m == o && o2 == o {
				t.Fatalf("%s stayed on departed %s", b, o)
			}
		}
	}
	for _, m := range members {
		if count[m] < 10 {
			t.Fatalf("uneven ownership: %v", count)
		}
	}
	if Owner("x", nil) != "" {
		t.Fatal("owner of no members")
	}
	if got := Owned("r1", members, backends); len(got) != count["r1"] {
		t.Fatalf("Owned = %d, want %d", len(got), count["r1"])
	}
}
