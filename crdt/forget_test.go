package crdt

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"strings"
	"testing"

	"github.com/kvmesh/kvmesh/tree"
)

// forgetNet is two replicas, a and b, that forget a removed backend's name
// a minute after its removal.
func forgetNet(t *testing.T) *simNet {
	s := newSimNet(t, 5, func(_ *Config, ic *tree.Config) { ic.ForgetRemovedMillis = 60_000 })
	s.add("a")
	s.add("b")
	return s
}

// A claim logged for a backend whose id is freed and given to a new name
// must not leave under the new name: the scrub makes it unsendable even
// while it is alive (here the horizon is shorter than the claims' life,
// which package mesh refuses; the scrub does not rely on expiry).
func TestForgetRemovedScrubsTheLog(t *testing.T) {
	s := forgetNet(t)
	a := s.node("a").r
	s.hold = true // nothing is delivered: a's log keeps every change
	s.learn("a", prompt(1, 1, 6, 2), "x", 600_000)
	if _, err := a.Invalidate("x", true, s.now); err != nil {
		t.Fatal(err)
	}
	x, _ := a.Index().BackendByName("x")
	s.now += 61_000
	if n := len(a.ForgetRemoved(s.now)); n != 1 {
		t.Fatalf("forgot %d names, want 1", n)
	}
	y, err := a.Index().EnsureBackend("y")
	if err != nil || y != x {
		t.Fatalf("y got id %d (%v), want x's %d", y, err, x)
	}
	var out []Envelope
	for i := 0; i < 3; i++ { // deltas, and retransmissions after RetransmitAfter
		out = a.Outgoing(s.now, out[:0])
		for _, e := range out {
			for _, b := range e.Msg.Batch.Backends {
				if b.Name == "y" || b.Name == "x" {
					t.Fatalf("message to %s names %+v", e.To, b)
				}
			}
			if n := len(e.Msg.Batch.Claims); n > 0 {
				t.Fatalf("message to %s carries %d claims of the forgotten backend", e.To, n)
			}
		}
		s.now += a.cfg.RetransmitAfter.Milliseconds() + 1
	}
}

// A peer that has not forgotten yet sends the old removal (and, in a full
// transfer, everything): the node that forgot keeps the name without an
// id, and once both have forgotten they converge.
func TestLateRemovalFromAPeerThatHasNotForgotten(t *testing.T) {
	s := forgetNet(t)
	toks := prompt(1, 1, 6, 2)
	s.learn("a", toks, "x", 30_000)
	s.settle(200)
	if s.depth("b", toks, "x") == 0 {
		t.Fatal("b never learned x's claims (the test would prove nothing)")
	}
	if _, err := s.node("a").r.Invalidate("x", true, s.now); err != nil {
		t.Fatal(err)
	}
	s.settle(200)
	s.now += 61_000
	a, b := s.node("a").r, s.node("b").r
	if n := len(a.ForgetRemoved(s.now)); n != 1 {
		t.Fatalf("a forgot %d names, want 1", n)
	}
	// b still holds x's removal and sends its whole state to a.
	b.RemovePeer("a")
	b.AddPeer("a", s.now)
	for i := 0; i < 40; i++ {
		if i%5 == 0 {
			s.antiEntropy()
		}
		s.round()
	}
	if _, ok := a.Index().BackendByName("x"); ok {
		t.Fatal("a took an id for x again from b's old removal")
	}
	if a.Stats().BackendsForgotten == 0 {
		t.Fatal("a counted no forgotten entry: b's full transfer never reached it (the test would prove nothing)")
	}
	if _, ok := b.Index().BackendByName("x"); !ok {
		t.Fatal("b forgot x although it never ran ForgetRemoved")
	}
	if len(b.ForgetRemoved(s.now)) != 1 {
		t.Fatal("b did not forget x")
	}
	s.settle(200)
}

// Forgotten names are saved in a snapshot and come back without an id:
// a late copy is still refused after a restart, and they do not fill the
// registry of the restored node.
func TestSnapshotKeepsForgottenNames(t *testing.T) {
	s := forgetNet(t)
	a := s.node("a").r
	s.learn("a", prompt(1, 1, 6, 2), "x", 30_000)
	s.learn("a", prompt(2, 1, 6, 2), "live", 600_000)
	removal, err := a.Invalidate("x", true, s.now)
	if err != nil {
		t.Fatal(err)
	}
	s.now += 61_000
	a.ForgetRemoved(s.now)
	data, info, err := AppendSnapshot(nil, a.Index(), s.now)
	if err != nil {
		t.Fatal(err)
	}
	if info.Backends != 2 {
		t.Fatalf("snapshot holds %d registry entries, want 2 (live, and x forgotten)", info.Backends)
	}
	snap, err := ParseSnapshot(data)
	if err != nil {
		t.Fatal(err)
	}
	icfg := s.icfg
	icfg.MaxBackends = 1 // room for "live" only: x must not need an id
	fresh, err := tree.New(icfg)
	if err != nil {
		t.Fatal(err)
	}
	got := snap.Apply(fresh, s.now, 3_600_000)
	if got.Backends != 2 || got.Claims == 0 {
		t.Fatalf("applied %+v, want 2 backends and live's claims", got)
	}
	if _, ok := fresh.BackendByName("live"); !ok {
		t.Fatal("live lost")
	}
	if e, ok := fresh.Forgotten("x"); !ok || e != removal {
		t.Fatalf("x restored as %+v, %v; want forgotten %+v", e, ok, removal)
	}
	if _, _, err := fresh.JoinBackend(tree.BackendEntry{Name: "x", State: tree.BackendActive}); !errors.Is(err, tree.ErrBackendForgotten) {
		t.Fatalf("late copy of x after the restore: %v, want refused", err)
	}
}

// Many forgotten names go into batches of at most MaxBackendsPerBatch, so
// the snapshot still parses.
func TestSnapshotWithManyForgottenNames(t *testing.T) {
	s := newSimNet(t, 6, func(_ *Config, ic *tree.Config) { ic.ForgetRemovedMillis = 60_000; ic.MaxBackends = 8 })
	s.add("a")
	a := s.node("a").r
	n := 0
	for round := 0; n < MaxBackendsPerBatch+10; round++ {
		for i := 0; i < 8; i++ {
			name := fmtSprintf("pod-%d-%d", round, i)
			if _, err := a.Index().EnsureBackend(name); err != nil {
				t.Fatal(err)
			}
			if _, err := a.Invalidate(name, true, s.now); err != nil {
				t.Fatal(err)
			}
			n++
		}
		s.now += 61_000
		a.ForgetRemoved(s.now)
	}
	data, info, err := AppendSnapshot(nil, a.Index(), s.now)
	if err != nil {
		t.Fatal(err)
	}
	snap, err := ParseSnapshot(data)
	if err != nil {
		t.Fatalf("snapshot of %d forgotten names does not parse: %v", info.Backends, err)
	}
	fresh, _ := tree.New(s.icfg)
	if got := snap.Apply(fresh, s.now, 3_600_000); got.Backends != n {
		t.Fatalf("restored %d names, want %d", got.Backends, n)
	}
	if fresh.Stats().Forgotten != n {
		t.Fatalf("%d forgotten after the restore, want %d", fresh.Stats().Forgotten, n)
	}
}

// Every snapshot is written as version 3, with the index's key scheme;
// versions 1 and 2 (no scheme; 2 with forgotten names) still load.
func TestSnapshotVersions(t *testing.T) {
	s := forgetNet(t)
	a := s.node("a").r
	s.learn("a", prompt(1, 1, 6, 2), "x", 30_000)
	if _, err := a.Invalidate("x", true, s.now); err != nil {
		t.Fatal(err)
	}
	s.now += 61_000
	a.ForgetRemoved(s.now)
	s.learn("a", prompt(2, 1, 6, 2), "y", 30_000)
	data, info, err := AppendSnapshot(nil, a.Index(), s.now)
	if err != nil || string(data[:8]) != snapshotMagicScheme || info.KeyScheme != s.icfg.KeyScheme() {
		t.Fatalf("magic %q, scheme %q, %v; want %q, %q", data[:8], info.KeyScheme, err, snapshotMagicScheme, s.icfg.KeyScheme())
	}
	for _, magic := range []string{snapshotMagicScheme, snapshotMagicForgotten, snapshotMagic} {
		d := data
		if magic != snapshotMagicScheme {
			d = withoutScheme(t, data, magic)
		}
		snap, err := ParseSnapshot(d)
		if err != nil {
			t.Fatalf("%s: %v", magic, err)
		}
		fresh, _ := tree.New(s.icfg)
		if err := snap.Fits(fresh); err != nil {
			t.Fatalf("%s: %v", magic, err)
		}
		if magic != snapshotMagicScheme {
			// No scheme recorded: it fits any index, as before version 3.
			other := s.icfg
			other.BlockTokens *= 2
			oix, _ := tree.New(other)
			if snap.Info.KeyScheme != "" || snap.Fits(oix) != nil {
				t.Fatalf("%s: scheme %q, fits another index: %v", magic, snap.Info.KeyScheme, snap.Fits(oix))
			}
		}
		if got := snap.Apply(fresh, s.now, 3_600_000); got.Claims == 0 || fresh.Stats().Forgotten != 1 {
			t.Fatalf("%s: applied %+v, %d forgotten", magic, got, fresh.Stats().Forgotten)
		}
	}
}

// withoutScheme rewrites a version 3 snapshot as an earlier version: the
// magic, no key scheme, the checksum again.
func withoutScheme(t *testing.T, data []byte, magic string) []byte {
	t.Helper()
	r := data[len(snapshotMagicScheme):]
	_, k := binary.Uvarint(r) // creation time
	size, k2 := binary.Uvarint(r[k:])
	out := append([]byte(magic), r[:k]...)
	out = append(out, r[k+k2+int(size):len(r)-sha256.Size]...)
	sum := sha256.Sum256(out)
	return append(out, sum[:]...)
}

// A snapshot taken under another key scheme (index.block_tokens or checkpoint_tokens changed)
// parses, but does not fit: its claims could never match.
func TestSnapshotOfAnotherSchemeDoesNotFit(t *testing.T) {
	s := forgetNet(t)
	s.learn("a", prompt(1, 1, 6, 2), "x", 30_000)
	data, _, err := AppendSnapshot(nil, s.node("a").r.Index(), s.now)
	if err != nil {
		t.Fatal(err)
	}
	snap, err := ParseSnapshot(data)
	if err != nil {
		t.Fatal(err)
	}
	other := s.icfg
	other.BlockTokens *= 2
	ix, _ := tree.New(other)
	err = snap.Fits(ix)
	if err == nil || !strings.Contains(err.Error(), "derived as "+s.icfg.KeyScheme()+" and this index derives them as "+other.KeyScheme()) {
		t.Fatalf("Fits = %v", err)
	}
}
