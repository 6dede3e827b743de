package crdt

import (
	"strconv"
	"strings"
	"testing"

	"github.com/kvmesh/kvmesh/tree"
)

// skewNode is a replica whose wall clock runs skew ms off the real time.
type skewNode struct {
	r    *Replica
	skew int64
}

func newSkewNode(t *testing.T, name string, inc uint64, mod func(*Config, *tree.Config)) *skewNode {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Name = name
	icfg := tree.DefaultConfig()
	icfg.Capacity = 1 << 14
	icfg.CheckpointTokens = 64
	if mod != nil {
		mod(&cfg, &icfg)
	}
	ix, err := tree.New(icfg)
	if err != nil {
		t.Fatal(err)
	}
	r, err := New(cfg, ix, inc)
	if err != nil {
		t.Fatal(err)
	}
	return &skewNode{r: r}
}

func (n *skewNode) now(real int64) int64 { return real + n.skew }

// skewPump runs rounds of 10 ms: every node's messages go through Encode
// and Decode to their receiver, each node at its own clock. Messages the
// decoder refuses are dropped and counted.
func skewPump(t *testing.T, real *int64, rounds int, nodes ...*skewNode) (refused int) {
	t.Helper()
	by := map[string]*skewNode{}
	for _, n := range nodes {
		by[n.r.Name()] = n
	}
	for i := 0; i < rounds; i++ {
		*real += 10
		for _, n := range nodes {
			for _, e := range n.r.Outgoing(n.now(*real), nil) {
				data, err := Encode(nil, e.Msg)
				if err != nil {
					t.Fatal(err)
				}
				m, err := Decode(data)
				if err != nil {
					refused++
					continue
				}
				if to := by[e.To]; to != nil {
					if err := to.r.Receive(m, to.now(*real)); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
	}
	return refused
}

func (n *skewNode) learn(t *testing.T, toks []uint32, ttl, real int64) {
	t.Helper()
	id, err := n.r.Index().EnsureBackend("x")
	if err != nil {
		t.Fatal(err)
	}
	var ch tree.Chain
	n.r.Index().Keyer().Tokens(&ch, tree.NewSeed("m", "", ""), toks, nil)
	n.r.Learn(&ch, id, ttl, n.now(real))
}

func (n *skewNode) depth(toks []uint32, real int64) int32 {
	id, ok := n.r.Index().BackendByName("x")
	if !ok {
		return 0
	}
	var ch tree.Chain
	n.r.Index().Keyer().Tokens(&ch, tree.NewSeed("m", "", ""), toks, nil)
	var res tree.Result
	n.r.Index().Lookup(&ch, n.now(real), &res)
	return res.Depth(id)
}

// A node whose clock runs 20 minutes ahead (less than MaxTTL) fills its
// index and evicts. Its floor, an expiry on its clock, must not end the
// claims honest peers learned after the ones it evicted (in real time), nor
// make them refuse new ones; the two honest peers still agree on a floor.
func TestSkewedFloorIsReadOnItsClock(t *testing.T) {
	real := int64(1_000_000_000)
	mod := func(c *Config, ic *tree.Config) { ic.Capacity = 64; c.DigestBuckets = 1 }
	a := newSkewNode(t, "a", 1, mod)
	b := newSkewNode(t, "b", 2, mod)
	c := newSkewNode(t, "c", 3, mod)
	a.skew = 20 * 60_000 // MaxTTL is 1 h, the TTL 10 min
	for _, n := range []*skewNode{a, b, c} {
		for _, m := range []*skewNode{a, b, c} {
			n.r.AddPeer(m.r.Name(), n.now(real))
		}
	}
	const ttl = 600_000
	for i := 0; i < 40; i++ { // a serves traffic: its index fills, it evicts
		a.learn(t, prompt(i, i, 16, 0), ttl, real)
		skewPump(t, &real, 10, a, b, c)
	}
	if a.r.Index().Stats().Evicted == 0 {
		t.Fatal("a did not evict")
	}
	// b learns after every claim a evicted was learned.
	pb := prompt(100, 100, 4, 0)
	b.learn(t, pb, ttl, real)
	skewPump(t, &real, 20, a, b, c)
	if d := b.depth(pb, real); d != 4 {
		t.Fatalf("b's claim learned after a's evicted ones was ended by a's floor: depth %d, floor now+%d ms; a's floor now+%d ms; b %+v",
			d, b.r.Index().Floor()-real, a.r.Index().Floor()-real, b.r.Stats())
	}
	if f := b.r.Index().Floor() - real; f > ttl {
		t.Fatalf("b's floor is %d ms ahead, past a TTL", f)
	}
	// Fresh claims are taken, here and at c.
	pc := prompt(200, 200, 4, 0)
	b.learn(t, pc, ttl, real)
	skewPump(t, &real, 20, a, b, c)
	if db, dc := b.depth(pc, real), c.depth(pc, real); db != 4 || dc != 4 {
		t.Fatalf("a fresh claim was refused: depth %d on b, %d on c", db, dc)
	}
	if b.r.Stats().FloorsShifted == 0 {
		t.Fatal("no floor was shifted")
	}
	if fb, fc := b.r.Index().Floor(), c.r.Index().Floor(); fb != fc {
		t.Fatalf("honest floors differ: b %d, c %d", fb, fc)
	}
}

// Honest floors are adopted as they are, never shifted.
func TestHonestFloorIsNotShifted(t *testing.T) {
	real := int64(1_000_000_000)
	mod := func(c *Config, ic *tree.Config) { ic.Capacity = 64; c.DigestBuckets = 1 }
	a := newSkewNode(t, "a", 1, mod)
	b := newSkewNode(t, "b", 2, mod)
	a.skew = 400 // within MaxSkew
	a.r.AddPeer("b", a.now(real))
	b.r.AddPeer("a", b.now(real))
	for i := 0; i < 40; i++ {
		a.learn(t, prompt(i, i, 16, 0), 600_000, real)
		real += 100
	}
	skewPump(t, &real, 20, a, b)
	a.r.StartDigest("b", a.now(real))
	skewPump(t, &real, 20, a, b)
	if fa, fb := a.r.Index().Floor(), b.r.Index().Floor(); fa != fb || b.r.Stats().FloorsShifted != 0 {
		t.Fatalf("floor %d on a, %d on b, %d shifted", fa, fb, b.r.Stats().FloorsShifted)
	}
}

// A snapshot written by a clock running ahead (it was made "after" now)
// carries a floor on that clock: applied as is, it would end most claims'
// life and refuse new claims.
func TestSnapshotFloorOfAClockAhead(t *testing.T) {
	const ttl = 600_000
	now := int64(1_000_000_000)
	ahead := now + 20*60_000 // written while the clock ran 20 min ahead
	ix, _ := tree.New(tree.DefaultConfig())
	ix.EnsureBackend("x")
	ix.RaiseFloor(ahead+ttl-60_000, ahead) // it evicted claims of 9 minutes' life
	data, _, err := AppendSnapshot(nil, ix, ahead)
	if err != nil {
		t.Fatal(err)
	}
	snap, err := ParseSnapshot(data)
	if err != nil {
		t.Fatal(err)
	}
	fresh, _ := tree.New(tree.DefaultConfig())
	snap.Apply(fresh, now, 3_600_000)
	if f := fresh.Floor(); f > now+ttl-60_000 {
		t.Fatalf("floor restored at now+%d ms", f-now)
	}
	// Applied at or after the time it was written, it is restored as is.
	again, _ := tree.New(tree.DefaultConfig())
	snap.Apply(again, ahead+5, 3_600_000)
	if again.Floor() != ix.Floor() {
		t.Fatalf("floor %d restored as %d", ix.Floor(), again.Floor())
	}
}

// An End made on a node whose clock runs ahead (beyond MaxSkew) must end
// the claim on every node: the clamp of its time must keep its expiry, at
// which alone a tombstone dominates the claim it ends.
func TestClampedTombstoneEndsTheClaim(t *testing.T) {
	real := int64(1_000_000_000)
	a := newSkewNode(t, "a", 1, nil)
	b := newSkewNode(t, "b", 2, nil)
	a.skew = 2000 // MaxSkew is 500 ms
	a.r.AddPeer("b", a.now(real))
	b.r.AddPeer("a", b.now(real))
	toks := prompt(1, 1, 4, 0)
	b.learn(t, toks, 600_000, real)
	skewPump(t, &real, 20, a, b)
	if d := a.depth(toks, real); d != 4 {
		t.Fatalf("a did not get b's claims: depth %d", d)
	}
	ida, _ := a.r.Index().BackendByName("x")
	var ch tree.Chain
	a.r.Index().Keyer().Tokens(&ch, tree.NewSeed("m", "", ""), toks, nil)
	if n := a.r.End(ch.Keys[3:4], ida, a.now(real)); n != 1 {
		t.Fatalf("ended %d", n)
	}
	skewPump(t, &real, 50, a, b)
	if da, db := a.depth(toks, real), b.depth(toks, real); da != 0 || db != 0 {
		t.Fatalf("after the End on a: depth %d on a, %d on b; want 0 (its one claim ended)", da, db)
	}
}

// A full transfer that starts on a nearly empty index must complete after
// the index has grown past what one chunk message may hold.
func TestFullTransferOutlivesIndexGrowth(t *testing.T) {
	real := int64(1_000_000_000)
	mod := func(c *Config, ic *tree.Config) { ic.Capacity = 1 << 20 }
	a := newSkewNode(t, "a", 1, mod)
	b := newSkewNode(t, "b", 2, mod)
	ix := a.r.Index()
	id, _ := ix.EnsureBackend("x")
	a.r.AddPeer("b", real) // one chunk: the index is empty
	// Claims from other peers arrive meanwhile (not logged here).
	const n = MaxClaimsPerMessage + 40_000
	claims := make([]tree.Claim, 0, 4096)
	for i := 0; i < n; i++ {
		claims = append(claims, tree.Claim{Key: tree.Key(uint64(i+1) * 0x9e3779b97f4a7c15), Backend: id,
			Time: tree.MakeTimestamp(real, 0), Expires: real + 600_000, Origin: 7})
		if len(claims) == cap(claims) || i == n-1 {
			ix.UpsertBatch(claims, real, nil)
			claims = claims[:0]
		}
	}
	b.r.AddPeer("a", real)
	refused := skewPump(t, &real, 100, a, b)
	if refused != 0 || a.r.Stats().FullSyncsDone != 1 || b.r.Index().Len() != n {
		t.Fatalf("%d messages refused, %d transfers done, b holds %d of %d claims",
			refused, a.r.Stats().FullSyncsDone, b.r.Index().Len(), n)
	}
}

// crdt.New refuses an index whose registry may outgrow what one message
// carries (full chunks and repairs carry the whole registry).
func TestNewRefusesRegistryWiderThanABatch(t *testing.T) {
	icfg := tree.DefaultConfig()
	icfg.MaxBackends = MaxBackendsPerBatch + 1
	ix, err := tree.New(icfg)
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.Name = "a"
	if _, err := New(cfg, ix, 1); err == nil || !strings.Contains(err.Error(), "MaxBackends") {
		t.Fatalf("got %v, want a refusal naming MaxBackends", err)
	}
	icfg.MaxBackends = MaxBackendsPerBatch
	ix, _ = tree.New(icfg)
	if _, err := New(cfg, ix, 1); err != nil {
		t.Fatal(err)
	}
}

// A snapshot of an index with more backends than a batch may carry (tree
// allows 65,535) parses and restores every backend and claim.
func TestSnapshotOfAWideRegistry(t *testing.T) {
	now := int64(1_000_000_000)
	icfg := tree.DefaultConfig()
	icfg.MaxBackends = 3 * MaxBackendsPerBatch
	ix, _ := tree.New(icfg)
	const backends = 2*MaxBackendsPerBatch + 10
	var claims []tree.Claim
	for i := 0; i < backends; i++ {
		id, err := ix.EnsureBackend("http://10.0.0.1:" + strconv.Itoa(i))
		if err != nil {
			t.Fatal(err)
		}
		if i%2 == 0 { // half the backends with claims
			claims = append(claims, tree.Claim{Key: tree.Key(uint64(i+1) * 0x9e3779b97f4a7c15), Backend: id,
				Time: tree.MakeTimestamp(now, 0), Expires: now + 600_000, Origin: 7})
		}
	}
	ix.UpsertBatch(claims, now, nil)
	data, info, err := AppendSnapshot(nil, ix, now)
	if err != nil {
		t.Fatal(err)
	}
	snap, err := ParseSnapshot(data)
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	fresh, _ := tree.New(icfg)
	got := snap.Apply(fresh, now, 3_600_000)
	if got.Claims != len(claims) || got.Backends != backends || info.Claims != len(claims) {
		t.Fatalf("applied %+v (written %+v), want %d claims and %d backends", got, info, len(claims), backends)
	}
	if a, b := sortedContents(ix, now), sortedContents(fresh, now); strings.Join(a, ",") != strings.Join(b, ",") {
		t.Fatal("restored claims differ")
	}
}

// An ack beyond our last sequence number must not stop our next changes
// from going to that peer.
func TestAckBeyondLastIsClamped(t *testing.T) {
	s := newSimNet(t, 9, nil)
	a := s.add("a")
	s.add("b")
	s.learn("a", prompt(1, 1, 4, 0), "http://x", 600_000)
	s.settle(50)
	last := a.r.log.last()
	bad := &Message{Type: MsgAck, From: "b", Incarnation: s.node("b").r.inc, AckFor: a.r.inc, AckUpTo: last + 1000}
	if err := a.r.Receive(bad, s.now); err != nil {
		t.Fatal(err)
	}
	p := prompt(2, 2, 4, 0)
	s.learn("a", p, "http://x", 600_000)
	for i := 0; i < 5; i++ { // deltas alone: no digests, before any ack reset
		s.round()
	}
	if d := s.depth("b", p, "http://x"); d != 4 {
		t.Fatalf("a change made after an ack beyond our last did not reach b: depth %d", d)
	}
}
