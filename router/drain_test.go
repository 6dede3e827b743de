package router

import (
	"math"
	"math/rand/v2"
	"sort"
	"testing"
	"time"
)

func TestPrefillDrainBasics(t *testing.T) {
	var d prefillDrain
	t0 := time.Unix(1_700_000_000, 0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

	// Before any answer there is no rate: what is pending is left.
	seq, ahead := d.book(1000, at(0))
	if ahead != 1000 {
		t.Fatalf("first booking: %v ahead, want 1000", ahead)
	}
	if left, rate := d.remaining(at(5)); left != 1000 || rate != 0 {
		t.Fatalf("no answer yet: left %v, rate %v, want 1000 and 0", left, rate)
	}
	// A request that ended without a first byte teaches nothing.
	d.settle(seq, ahead, at(0), at(1), false)
	if left, rate := d.remaining(at(1)); left != 0 || rate != 0 {
		t.Fatalf("an attempt without an answer: left %v, rate %v, want 0 and 0", left, rate)
	}
	// 1000 units ahead (its own) took 2 s: 500 units/s.
	seq, ahead = d.book(1000, at(2))
	d.settle(seq, ahead, at(2), at(4), true)
	if left, rate := d.remaining(at(4)); left != 0 || rate != 500 {
		t.Fatalf("after one answer: left %v, rate %v, want 0 and 500", left, rate)
	}
	// A second settle of the same booking changes nothing.
	d.settle(seq, ahead, at(2), at(100), true)
	if _, rate := d.remaining(at(4)); rate != 500 {
		t.Fatalf("a booking settled twice moved the rate to %v", rate)
	}

	// Three requests queued: only the head is computed, at most all of it.
	s1, _ := d.book(2000, at(10))
	s2, a2 := d.book(600, at(10))
	s3, a3 := d.book(400, at(11))
	if a2 != 2600 || a3 != 2500 {
		t.Fatalf("ahead of the 2nd and 3rd bookings: %v and %v, want 2600 and 2500 (the head 500 units in)", a2, a3)
	}
	if left, _ := d.remaining(at(12)); left != 2000 {
		t.Fatalf("2 s after the head was booked: left %v, want 2000 (3000 less 1000 of the head)", left)
	}
	if left, _ := d.remaining(at(20)); left != 1000 {
		t.Fatalf("long after: left %v, want 1000 (the head done, the rest waiting)", left)
	}
	// The second answers before the head: the head's progress stands.
	d.settle(s2, a2, at(10), at(13), true)
	if left, _ := d.remaining(at(13)); left != 900 {
		t.Fatalf("after the 2nd answered first: left %v, want 900 (2400 less the head's 1500)", left)
	}
	// The head answers: the third is the head and starts from 0.
	d.settle(s1, 2000, at(10), at(14), true)
	if left, _ := d.remaining(at(14)); left != 400 {
		t.Fatalf("after the head answered: left %v, want 400", left)
	}
	d.settle(s3, a3, at(11), at(15), true)
	if left, _ := d.remaining(at(15)); left != 0 {
		t.Fatalf("nothing pending: left %v, want 0", left)
	}
	// The clock going backwards computes nothing.
	d.book(800, at(20))
	if left, _ := d.remaining(at(19)); left != 800 {
		t.Fatalf("a clock read before the booking: left %v, want 800", left)
	}
}

// Bookings released in any order keep the queue's sum and reuse its
// storage: no growth under a steady load.
func TestPrefillDrainQueueStaysSmall(t *testing.T) {
	var d prefillDrain
	now := time.Unix(1_700_000_000, 0)
	type booked struct {
		seq   uint64
		ahead float64
	}
	var open []booked
	for i := range 10_000 {
		s, a := d.book(100, now)
		open = append(open, booked{s, a})
		if len(open) == 8 { // release out of order: 2nd, 1st, then the rest
			d.settle(open[1].seq, open[1].ahead, now, now, true)
			for j, b := range open {
				if j != 1 {
					d.settle(b.seq, b.ahead, now, now, i%2 == 0)
				}
			}
			open = open[:0]
		}
		now = now.Add(time.Millisecond)
	}
	if d.sum != 0 || d.h != len(d.q) {
		t.Fatalf("all released: sum %v, queue %d..%d", d.sum, d.h, len(d.q))
	}
	if cap(d.q) > 64 {
		t.Fatalf("queue storage grew to %d entries for at most 8 pending", cap(d.q))
	}
}

// drainEvent is one booking or first byte in the FIFO server below.
type drainEvent struct {
	t     float64
	req   int
	first bool // the first byte; else the booking
}

// The rate learned from answers settles near the rate a FIFO server really
// computes, and the units left it reports at each booking are closer to
// the work really queued than the pending sum is. The server is not the
// model: each request goes at its own speed (800 units/s +-25%) and its
// first token takes 30 ms more after its prefill.
func TestPrefillDrainLearnsAFIFOServer(t *testing.T) {
	const rate, firstToken = 800.0, 0.03
	rng := rand.New(rand.NewPCG(7, 7))
	n := 400
	arrive, size, speed := make([]float64, n), make([]float64, n), make([]float64, n)
	done, first := make([]float64, n), make([]float64, n) // prefill done, first byte
	tm, free := 0.0, 0.0
	var ev []drainEvent
	for i := range n {
		tm += 0.3 + 1.4*rng.Float64() // a request a second: the server busy 0.8 of the time
		arrive[i], size[i], speed[i] = tm, 100+float64(rng.IntN(1000)), rate*(0.75+0.5*rng.Float64())
		done[i] = max(tm, free) + size[i]/speed[i]
		first[i] = done[i] + firstToken
		free = first[i]
		ev = append(ev, drainEvent{t: arrive[i], req: i}, drainEvent{t: first[i], req: i, first: true})
	}
	sort.SliceStable(ev, func(a, b int) bool { return ev[a].t < ev[b].t })

	t0 := time.Unix(1_700_000_000, 0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	var d prefillDrain
	pending := 0.0
	ahead := make([]float64, n)
	seqs := make([]uint64, n)
	var errLeft, errSum float64
	counted := 0
	for _, e := range ev {
		i := e.req
		if e.first {
			pending -= size[i]
			d.settle(seqs[i], ahead[i], at(arrive[i]), at(e.t), true)
			continue
		}
		// The work really queued at the server when i arrives: every
		// earlier request's part not computed yet.
		queued := 0.0
		for j := 0; j < i; j++ {
			if done[j] > e.t {
				queued += min(size[j], (done[j]-e.t)*speed[j])
			}
		}
		if i >= n/4 { // once the rate has been learned
			left, _ := d.remaining(at(e.t))
			errLeft += math.Abs(left - queued)
			errSum += math.Abs(pending - queued)
			counted++
		}
		pending += size[i]
		seqs[i], ahead[i] = d.book(size[i], at(e.t))
	}
	_, learned := d.remaining(at(tm))
	t.Logf("learned %.0f units/s (true %.0f); mean error of the units left %.0f, of the pending sum %.0f, over %d bookings",
		learned, rate, errLeft/float64(counted), errSum/float64(counted), counted)
	if learned < 0.85*rate || learned > 1.15*rate {
		t.Errorf("learned rate %.0f, want within 15%% of %.0f", learned, rate)
	}
	if errLeft >= 0.5*errSum {
		t.Errorf("units left are off by %.0f on average, the pending sum by %.0f: want at most half", errLeft/float64(counted), errSum/float64(counted))
	}
}

// With pending_drain the kvmesh policy prices what is left of a
// backend's queue; without it, the whole pending sum.
func TestKVMeshPricesPendingLeft(t *testing.T) {
	pc := newPolicyCase(40, 21, "a", "b").match(0, 0).pending(9000, 4000)
	pc.cands[0].Load.PendingLeft, pc.cands[0].Load.PrefillRate = 1000, 500 // a's queue is nearly done
	pc.cands[1].Load.PendingLeft, pc.cands[1].Load.PrefillRate = 4000, 500 // b's has just formed
	if name, _ := pc.choose(newKVMeshPolicy(DefaultKVMeshConfig())); name != "b" {
		t.Fatalf("pending_drain off: chose %s (costs %v), want b (less pending in all)", name, pc.scores)
	}
	cfg := DefaultKVMeshConfig()
	cfg.PendingDrain = true
	if name, _ := pc.choose(newKVMeshPolicy(cfg)); name != "a" {
		t.Fatalf("pending_drain on: chose %s (costs %v), want a (less left to compute)", name, pc.scores)
	}
	if pc.scores[1]-pc.scores[0] != 3000 {
		t.Errorf("costs %v: want them 3000 apart (the units left, 1000 against 4000)", pc.scores)
	}
}
