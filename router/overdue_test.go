package router

import (
	"encoding/json"
	"math"
	"sync/atomic"
	"testing"
	"time"
)

// The queue learns the rate from first bytes (units booked ahead over the
// wait), measures the head's progress from when it reached the front, and
// moves the head on in order, whatever order the requests end in.
func TestPrefillQueueHead(t *testing.T) {
	var q prefillQueue
	t0 := time.Unix(1000, 0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	seqX, aheadX := q.book(100, 100, at(0))
	if b, p, g := q.head(at(0.5)); b != 0 || p != 0 || g != 0 {
		t.Fatalf("before any answer: head %v/%v/%v, want nothing (no rate)", b, p, g)
	}
	q.settle(seqX, aheadX, at(0), at(1), true) // 100 units in 1 s
	if r := queueRate(&q); math.Abs(r-100) > 1e-9 {
		t.Fatalf("rate %v, want 100 units/s", r)
	}
	seqA, aheadA := q.book(100, 1000, at(10)) // booked a tenth of its prompt
	seqB, aheadB := q.book(200, 200, at(10.5))
	if aheadA != 100 || aheadB != 300 {
		t.Fatalf("ahead %v and %v, want 100 and 300 (the bookings before each, its own included)", aheadA, aheadB)
	}
	if b, p, g := q.head(at(13)); b != 100 || p != 1000 || math.Abs(g-300) > 1e-6 {
		t.Fatalf("head at +3 s: %v/%v/%v, want A: booked 100, prompt 1000, progress 300", b, p, g)
	}
	// B ends first (an error, no first byte): A stays the head.
	q.settle(seqB, aheadB, at(10.5), at(14), false)
	if b, _, _ := q.head(at(14)); b != 100 {
		t.Fatalf("after B ended: head booked %v, want A's 100", b)
	}
	if r := queueRate(&q); math.Abs(r-100) > 1e-9 {
		t.Fatalf("an answer without a first byte taught the rate: %v", r)
	}
	// A's first byte: nothing is left; B, released already, is skipped.
	q.settle(seqA, aheadA, at(10), at(20), true)
	if b, p, g := q.head(at(21)); b != 0 || p != 0 || g != 0 {
		t.Fatalf("after A: head %v/%v/%v, want none", b, p, g)
	}
	// A new request after an idle spell is the head from its booking.
	q.book(50, 50, at(30))
	if _, _, g := q.head(at(30.5)); g <= 0 || g > queueRate(&q)*0.5+1e-9 {
		t.Fatalf("progress %v half a second after booking onto an empty queue, want up to %v", g, queueRate(&q)*0.5)
	}
}

// The queue's storage stays bounded under a steady stream of requests
// answered in order.
func TestPrefillQueueBounded(t *testing.T) {
	var q prefillQueue
	t0 := time.Unix(0, 0)
	type booking struct {
		seq   uint64
		ahead float64
		at    time.Time
	}
	var open []booking
	for i := 0; i < 100000; i++ {
		now := t0.Add(time.Duration(i) * time.Millisecond)
		s, a := q.book(10, 10, now)
		open = append(open, booking{s, a, now})
		if len(open) > 5 {
			b := open[0]
			open = open[1:]
			q.settle(b.seq, b.ahead, b.at, now, true)
		}
	}
	if n := cap(q.q); n > 256 {
		t.Fatalf("queue capacity %d with 5 requests pending", n)
	}
}

// kvmesh.overdue_factor: a head past its booking by the factor (plus the
// slack) adds what is left of its prompt beyond the booking; within it,
// or with the factor 0, nothing.
func TestOverduePricesTheHeadsHiddenPrefill(t *testing.T) {
	cfg := DefaultKVMeshConfig()
	l := LoadView{HeadBooked: 100, HeadPrompt: 1000, HeadProgress: 300}
	if got := cfg.overdue(&l, 1000); got != 0 {
		t.Fatalf("off: %v", got)
	}
	cfg.OverdueFactor, cfg.OverdueSlack = 2, 0.05
	if got := cfg.overdue(&l, 1000); got != 600 {
		t.Fatalf("progress 300 past 2 x 100 + 0.05 x 1000: got %v, want 1000 - 300 - 100", got)
	}
	cfg.OverdueSlack = 0.15
	if got := cfg.overdue(&l, 1000); got != 0 {
		t.Fatalf("within the slack (2 x 100 + 150 >= 300): got %v", got)
	}
	cfg.OverdueSlack = 0
	l.HeadProgress = 950
	if got := cfg.overdue(&l, 1000); got != 0 {
		t.Fatalf("nearly through its whole prompt: got %v, want 0 (never less than the booking)", got)
	}
}

// Through the proxy: a streamed answer's first byte teaches the backend's
// queue its rate, a streamed request waiting for its first byte is the
// head, and /admin/backends shows how far it has had time to get.
func TestOverdueQueueThroughTheProxy(t *testing.T) {
	hold := make(chan struct{})
	g, clock, _ := clockedRig(t, func(n int32, clock *atomic.Int64) {
		switch n {
		case 1:
			clock.Add(1000) // the first answer takes a second
		case 2:
			<-hold // the second waits until the test lets it go
		}
	})
	g.call("POST", "/v1/chat/completions", streamed(chat("m1", longText("first", 4000), "q")))
	b := g.rt.backendByName("a")
	rate := queueRate(&b.queue)
	if !(rate > 1000 && rate < 10000) {
		t.Fatalf("rate %v units/s after a ~4,000-unit prompt answered in 1 s", rate)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		g.call("POST", "/v1/chat/completions", streamed(chat("m1", longText("second", 8000), "q")))
	}()
	for i := 0; b.pendingRequests.Load() == 0; i++ {
		if i == 2000 {
			t.Fatal("the second request never reached the backend")
		}
		time.Sleep(time.Millisecond)
	}
	clock.Add(3000)
	_, body := adminCall(t, g, "GET", "/admin/backends", "")
	var list []BackendStatus
	if err := json.Unmarshal(body, &list); err != nil {
		t.Fatal(err)
	}
	l := list[0].Load
	if l.HeadBookedUnits < 8000 || l.HeadPromptUnits < l.HeadBookedUnits || math.Abs(l.HeadProgressUnits-3*rate) > 0.01*rate {
		t.Fatalf("head %+v; want the second request's booking (>= 8,000 units) and 3 s of progress at %v units/s", l, rate)
	}
	close(hold)
	<-done
	if bk, _, _ := b.queue.head(time.UnixMilli(clock.Load())); bk != 0 {
		t.Fatalf("after its first byte the head is still booked at %v", bk)
	}
}

// queueRate is q's learned rate, read under its lock.
func queueRate(q *prefillQueue) float64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.rateLocked()
}
