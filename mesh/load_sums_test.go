package mesh

import (
	"math"
	"runtime"
	"testing"
	"unsafe"
)

// The written and answer totals saturate instead of wrapping: a peer that
// restarts again and again, each time having written the wire's largest
// count, leaves totals that only grow, up to math.MaxUint64. A wrapped one
// went back, and the router's PeerWritten must never decrease.
func TestLoadTableTotalsSaturate(t *testing.T) {
	lt := testLoadTable()
	const most = maxLoadValue * loadWrittenStep // 2^54: the largest written figure on the wire
	lastW, lastN, lastP := 0.0, uint64(0), uint64(0)
	for i := range uint64(1100) { // 1,024 restarts at 2^54 reach 2^64
		m := snapshot(2*i+1, i+1, true, 1)
		m.Entries[0].Written = most
		lt.apply("p", m, 40, int64(i))
		lt.apply("p", &loadMsg{Seq: 2*i + 2, Answers: true, Answered: answerTotals{N: maxLoadValue, Prompt: maxLoadValue, Cached: maxLoadValue}}, 10, int64(i))
		lt.publish(int64(i), 0)
		w := lt.writtenSum(0)
		n, p, _ := lt.answered.n.Load(), lt.answered.prompt.Load(), lt.answered.cached.Load()
		if w < lastW || n < lastN || p < lastP {
			t.Fatalf("restart %d: written %v (was %v), answers %d (was %d), prompt %d (was %d): a total went back", i, w, lastW, n, lastN, p, lastP)
		}
		lastW, lastN, lastP = w, n, p
	}
	if lastW != math.MaxUint64 {
		t.Fatalf("written %v after 1,100 restarts at 2^54, want saturated at 2^64", lastW)
	}
	if lastN != 1100*maxLoadValue {
		t.Fatalf("%d answers, want %d (not saturated yet)", lastN, uint64(1100*maxLoadValue))
	}
	// Answers saturate too.
	lt.retiredAnswers = answerTotals{N: math.MaxUint64 - 5, Prompt: math.MaxUint64 - 5, Cached: 1}
	lt.dirty = true
	lt.publish(2000, 0)
	if n := lt.answered.n.Load(); n != math.MaxUint64 {
		t.Fatalf("answers %d, want saturated", n)
	}
	if got := addSat(math.MaxUint64-1, 1); got != math.MaxUint64 {
		t.Fatalf("addSat(max-1, 1) = %d", got)
	}
	if got := addSat(math.MaxUint64, math.MaxUint64); got != math.MaxUint64 {
		t.Fatalf("addSat(max, max) = %d", got)
	}
}

// A snapshot right after the last (members joining send one at once)
// does not make a routing-rate sample: one request in 2 ms would read as
// 500 requests a second. It keeps the base, and the next snapshot samples
// over the whole span.
func TestLoadTableRateIgnoresCloseSnapshots(t *testing.T) {
	lt := testLoadTable() // rate samples span at least 250 ms
	rate := func() float64 { return lt.peers["p"].rate }
	for i, s := range []struct {
		at     int64
		routed uint64
		want   float64
	}{
		{1000, 0, 0},
		{2000, 10, 5},   // 10/s, averaged in by half
		{2002, 11, 5},   // 2 ms later: no sample
		{3000, 20, 7.5}, // 10/s over the second since 2000
	} {
		m := snapshot(uint64(i+1), 1, true, 1)
		m.Routed = s.routed
		lt.apply("p", m, 40, s.at)
		if got := rate(); math.Abs(got-s.want) > 1e-9 {
			t.Fatalf("after the snapshot at %d ms (routed %d): rate %v, want %v", s.at, s.routed, got, s.want)
		}
	}
}

// The sending side samples its own rate the same way.
func TestLoadRateIgnoresCloseSnapshotsSent(t *testing.T) {
	s := newLoadSession(t, "p", t0)
	s.send(0, 0, 1) // the first snapshot: the base
	s.src.routed.Store(10)
	s.send(500, 0, 2) // LoadRefresh later: a snapshot, 20/s
	if got := s.n.lp.rate; math.Abs(got-10) > 1e-9 {
		t.Fatalf("rate %v after 10 requests in 500 ms, want 10 (20/s averaged in by half)", got)
	}
	s.src.routed.Store(11)
	s.n.loadJoined.Store(true) // a member joined: a snapshot at once
	msgs := s.send(2, 0, 3)
	var m loadMsg
	if err := decodeLoad(msgs[0], &m); err != nil || !m.Snapshot {
		t.Fatalf("sent %+v (%v), want a snapshot", m, err)
	}
	if got := s.n.lp.rate; math.Abs(got-10) > 1e-9 {
		t.Fatalf("rate %v after a snapshot 2 ms later, want 10 (no sample)", got)
	}
}

// decodeLoad's allocation bound is written in terms of loadEntryBytes.
func TestLoadEntrySize(t *testing.T) {
	if got := unsafe.Sizeof(loadEntry{}); got != loadEntryBytes {
		t.Fatalf("a loadEntry takes %d bytes, loadEntryBytes says %d: update it and decodeLoad's comment", got, loadEntryBytes)
	}
	if loadEntryBytes/5.0+1 > 24 { // the entries, and the names copied
		t.Fatalf("a 5-byte wire entry decodes to %d bytes: more than decodeLoad's comment says", loadEntryBytes)
	}
}

// Decoding a message of the smallest entries allocates no more than
// decodeLoad's comment says: about 24 times the message's bytes.
func TestLoadDecodeAllocates(t *testing.T) {
	m := loadMsg{Seq: 1}
	for range 20_000 {
		m.Entries = append(m.Entries, loadEntry{}) // 5 bytes each on the wire
	}
	data := appendLoad(nil, &m)
	var got loadMsg
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	if err := decodeLoad(data, &got); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	if n := after.TotalAlloc - before.TotalAlloc; n > 24*uint64(len(data)) {
		t.Fatalf("decoding %d bytes allocated %d bytes (%.1f times)", len(data), n, float64(n)/float64(len(data)))
	}
}
