package crdt

import (
	"testing"

	"github.com/kvmesh/kvmesh/tree"
)

// A node whose clock runs an hour ahead fills its index with claims that
// expire an hour ahead and raises its floor there. Honest peers must ignore
// that floor (it would wipe all their claims and refuse every new one).
func TestRunawayFloorIsIgnored(t *testing.T) {
	s := newSimNet(t, 1, nil)
	a, b := s.add("a"), s.add("b")
	p := prompt(1, 1, 8, 0)
	s.learn("a", p, "http://x", 60_000)
	s.settle(50)
	m := &Message{Type: MsgRepair, From: "b", Incarnation: 99, Batch: Batch{Floor: s.now + 2*3_600_000}}
	if err := a.r.Receive(m, s.now); err != nil {
		t.Fatal(err)
	}
	if st := a.r.Stats(); st.FloorsIgnored != 1 {
		t.Fatalf("floors ignored: %d", st.FloorsIgnored)
	}
	if d := s.depth("a", p, "http://x"); d != 8 {
		t.Fatalf("claims wiped by a runaway floor: depth %d", d)
	}
	// An honest floor (within MaxTTL) is adopted.
	m.Batch.Floor = s.now + 1000
	a.r.Receive(m, s.now)
	if a.r.Index().Floor() != s.now+1000 {
		t.Fatalf("honest floor not adopted: %d", a.r.Index().Floor())
	}
	_ = b
}

// A claim with a plausible time but an expiry far beyond MaxTTL is capped,
// so no peer can pin a claim forever.
func TestClaimExpiryIsCappedAtMaxTTL(t *testing.T) {
	s := newSimNet(t, 2, nil)
	a := s.add("a")
	s.add("b")
	ix := a.r.Index()
	if _, err := ix.EnsureBackend("http://x"); err != nil {
		t.Fatal(err)
	}
	far := s.now + 10*24*3_600_000
	m := &Message{Type: MsgDelta, From: "b", Incarnation: 7, ToSeq: 1, Batch: Batch{
		Backends: []tree.BackendEntry{{Name: "http://x", State: tree.BackendActive}},
		Claims:   []WireClaim{{Key: 42, Backend: 0, Time: tree.MakeTimestamp(s.now, 0), Expires: far, Origin: 9}},
	}}
	if err := a.r.Receive(m, s.now); err != nil {
		t.Fatal(err)
	}
	var got []tree.Claim
	ix.Range(s.now, func(c *tree.Claim) bool { got = append(got, *c); return true })
	if len(got) != 1 || got[0].Expires != s.now+DefaultConfig().MaxTTL.Milliseconds() || a.r.Stats().ExpiryCaps != 1 {
		t.Fatalf("claims %+v, caps %d", got, a.r.Stats().ExpiryCaps)
	}
}

// A repair request naming the same bucket over and over queues it once, and
// a second request while repairs are queued is ignored.
func TestRepairRequestIsBounded(t *testing.T) {
	s := newSimNet(t, 3, nil)
	a := s.add("a")
	s.add("b")
	for i := 0; i < 20; i++ {
		s.learn("a", prompt(i, i, 8, 0), "http://x", 60_000)
	}
	buckets := make([]uint32, 60_000)
	for i := range buckets {
		buckets[i] = uint32(i % 3)
	}
	req := &Message{Type: MsgRepairRequest, From: "b", Incarnation: 5, Buckets: buckets}
	a.r.Receive(req, s.now)
	a.r.Receive(req, s.now)
	repairs := 0
	for _, e := range a.r.Outgoing(s.now, nil) {
		if e.Msg.Type == MsgRepair {
			repairs++
		}
	}
	// The three buckets' few claims share one message.
	if st := a.r.Stats(); repairs != 1 || st.BucketsRepaired != 3 || st.RepairsIgnored != 1 {
		t.Fatalf("%d repair messages queued for %d buckets, %d requests ignored", repairs, st.BucketsRepaired, st.RepairsIgnored)
	}
}

// A backend the receiver cannot register (its registry is full) costs only
// that backend's claims: the rest of the batch applies and is acknowledged.
func TestUnregistrableBackendDoesNotBlockReplication(t *testing.T) {
	s := newSimNet(t, 4, func(_ *Config, ic *tree.Config) { ic.MaxBackends = 1 })
	a := s.add("a")
	s.add("b")
	if _, err := a.r.Index().EnsureBackend("http://x"); err != nil {
		t.Fatal(err)
	}
	m := &Message{Type: MsgDelta, From: "b", Incarnation: 3, FromSeq: 0, ToSeq: 2, Batch: Batch{
		Backends: []tree.BackendEntry{{Name: "http://x", State: tree.BackendActive}, {Name: "http://y", State: tree.BackendActive}},
		Claims: []WireClaim{
			{Key: 1, Backend: 0, Time: tree.MakeTimestamp(s.now, 0), Expires: s.now + 1000, Origin: 9},
			{Key: 2, Backend: 1, Time: tree.MakeTimestamp(s.now, 0), Expires: s.now + 1000, Origin: 9},
		},
	}}
	if err := a.r.Receive(m, s.now); err != nil {
		t.Fatalf("batch refused: %v", err)
	}
	if st := a.r.Stats(); st.BackendsRejected != 1 || st.ClaimsApplied != 1 {
		t.Fatalf("stats %+v", st)
	}
	acked := false
	for _, e := range a.r.Outgoing(s.now, nil) {
		if e.To == "b" && e.Msg.AckUpTo == 2 {
			acked = true
		}
	}
	if !acked {
		t.Fatal("the batch was not acknowledged")
	}
}

func TestDeltaLogRing(t *testing.T) {
	l := newDeltaLog(4)
	for i := 0; i < 6; i++ {
		l.append(logEntry{claim: tree.Claim{Key: tree.Key(i + 1)}})
	}
	// Capacity 4: 1 and 2 were dropped.
	if l.first() != 3 || l.last() != 6 || l.covers(1) || !l.covers(2) {
		t.Fatalf("first %d last %d", l.first(), l.last())
	}
	var seqs []uint64
	l.each(4, func(e *logEntry) bool { seqs = append(seqs, e.seq); return true })
	if len(seqs) != 2 || seqs[0] != 5 || seqs[1] != 6 {
		t.Fatalf("each(4): %v", seqs)
	}
	l.gc(4)
	seqs = seqs[:0]
	l.each(0, func(e *logEntry) bool { seqs = append(seqs, e.seq); return true })
	if len(seqs) != 2 || seqs[0] != 5 || l.first() != 5 {
		t.Fatalf("after gc(4): %v first %d", seqs, l.first())
	}
	l.gc(100)
	if l.n != 0 || l.first() != 7 {
		t.Fatalf("after gc(100): n %d first %d", l.n, l.first())
	}
}
