package router

import (
	"math"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// streamed is a chat body for model m1 asking for a streamed answer.
func streamed(body string) string {
	return strings.Replace(body, `"model":"m1"`, `"model":"m1","stream":true`, 1)
}

// A silent request (one that does not stream: its first byte comes after
// its generation) is not counted as work ahead of later requests, it is
// never the head and its first byte teaches no rate; releasing it leaves
// the head and how long it has been at the front as they were.
func TestPrefillQueueSilentEntry(t *testing.T) {
	var q prefillQueue
	t0 := time.Unix(1000, 0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	seqX, aheadX := q.book(100, 100, at(0))
	q.settle(seqX, aheadX, at(0), at(1), true) // 100 units/s
	seqS, aheadS := q.bookAs(1000, 1000, true, at(10))
	if b, p, g := q.head(at(11)); b != 0 || p != 0 || g != 0 {
		t.Fatalf("only a silent request pending: head %v/%v/%v, want none", b, p, g)
	}
	seqA, aheadA := q.book(100, 500, at(12))
	if aheadA != 100 {
		t.Fatalf("ahead of A %v, want its own 100 (the silent request may be decoding)", aheadA)
	}
	if b, p, g := q.head(at(13)); b != 100 || p != 500 || math.Abs(g-100) > 1e-6 {
		t.Fatalf("head %v/%v/%v, want A (100/500) at the front since its booking (progress 100)", b, p, g)
	}
	q.settle(seqA, aheadA, at(12), at(14), true) // 100 units in 2 s: taught
	rate := queueRate(&q)
	seqB, aheadB := q.book(200, 200, at(20))
	q.settle(seqS, aheadS, at(10), at(30), true) // the silent answer, after its generation
	if r := queueRate(&q); r != rate {
		t.Fatalf("a silent first byte taught the rate: %v, was %v", r, rate)
	}
	if b, _, g := q.head(at(31)); b != 200 || math.Abs(g-11*rate) > 1e-6 {
		t.Fatalf("head %v with progress %v, want B (200) at the front since its booking at +20 s (%v)", b, g, 11*rate)
	}
	q.settle(seqB, aheadB, at(20), at(32), true)
	if q.h != len(q.q) || q.lead != len(q.q) || q.sum != 0 {
		t.Fatalf("all released: h %d, lead %d, %d entries, sum %v", q.h, q.lead, len(q.q), q.sum)
	}
}

// A streamed request booked behind a silent one that is decoding counts
// as work ahead of it its own units and the streamed ones' only: 10,000
// silent units ahead of a 100-unit prompt answered in 0.1 s would teach
// ~100,000 units/s.
func TestPrefillQueueSilentNotAhead(t *testing.T) {
	var q prefillQueue
	t0 := time.Unix(1000, 0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	seqS, aheadS := q.bookAs(10000, 10000, true, at(0)) // prefilled long ago, decoding since
	seqX, aheadX := q.book(200, 200, at(5))
	seqA, aheadA := q.book(100, 100, at(5.05))
	if aheadX != 200 || aheadA != 300 {
		t.Fatalf("ahead of X %v and of A %v, want 200 and 300 (the streamed work only)", aheadX, aheadA)
	}
	q.settle(seqX, aheadX, at(5), at(5.1), true)    // 200 units in 0.1 s
	q.settle(seqA, aheadA, at(5.05), at(5.2), true) // 300 in 0.15 s
	want := (200*(1-queueMemory) + 300) / (0.1*(1-queueMemory) + 0.15)
	if r := queueRate(&q); math.Abs(r-want) > 1e-6*want {
		t.Fatalf("rate %v units/s, want %v (about 2,000)", r, want)
	}
	q.settle(seqS, aheadS, at(0), at(30), true)
	if q.h != len(q.q) || q.sum != 0 {
		t.Fatalf("all released: h %d, %d entries, sum %v", q.h, len(q.q), q.sum)
	}
	// The next booking counts its own units only.
	if _, ahead := q.book(50, 50, at(31)); ahead != 50 {
		t.Fatalf("ahead %v on an empty queue, want 50", ahead)
	}
}

// Whatever the order of bookings and releases, silent or not, the queue
// reports as the head the oldest unreleased request that is not silent,
// at the front since it was booked or the one before it was released.
func TestPrefillQueueSilentRandom(t *testing.T) {
	type entry struct {
		seq            uint64
		ahead          float64
		at             time.Time
		booked         float64
		silent, closed bool
	}
	var q prefillQueue
	var all []*entry
	rng := rand.New(rand.NewPCG(1, 2))
	now := time.Unix(0, 0)
	var head *entry // the model's head and when it became so
	var headAt time.Time
	modelHead := func() *entry {
		for _, e := range all {
			if !e.closed && !e.silent {
				return e
			}
		}
		return nil
	}
	for i := 0; i < 20000; i++ {
		now = now.Add(time.Duration(1+rng.IntN(50)) * time.Millisecond)
		open := 0
		for _, e := range all {
			if !e.closed {
				open++
			}
		}
		if open == 0 || (open < 60 && rng.IntN(2) == 0) {
			e := &entry{at: now, booked: float64(i + 1), silent: rng.IntN(3) == 0}
			e.seq, e.ahead = q.bookAs(e.booked, e.booked, e.silent, now)
			all = append(all, e)
		} else {
			k := rng.IntN(open)
			for _, e := range all {
				if e.closed {
					continue
				}
				if k == 0 {
					e.closed = true
					q.settle(e.seq, e.ahead, e.at, now, rng.IntN(4) != 0)
					break
				}
				k--
			}
		}
		if h := modelHead(); h != head {
			head, headAt = h, now
		}
		want, wantProgress := 0.0, 0.0
		if r := queueRate(&q); head != nil && r > 0 {
			want, wantProgress = head.booked, r*now.Add(time.Second).Sub(headAt).Seconds()
		}
		if b, _, g := q.head(now.Add(time.Second)); b != want || math.Abs(g-wantProgress) > 1e-6*max(1, wantProgress) {
			t.Fatalf("step %d: head %v with progress %v, want %v with %v", i, b, g, want, wantProgress)
		}
		if len(all) > 4096 { // forget what is released from the front, as the queue does
			n := 0
			for n < len(all) && all[n].closed {
				n++
			}
			all = all[n:]
		}
	}
	if n := cap(q.q); n > 4096 {
		t.Fatalf("queue capacity %d with at most 60 requests pending", n)
	}
}

// Through the proxy: a request that does not stream, answered only after
// its generation, counts as pending while it runs but is not the head,
// and its late first byte teaches no rate.
func TestSilentAnswerThroughTheProxy(t *testing.T) {
	hold := make(chan struct{})
	g, clock, n := clockedRig(t, func(n int32, clock *atomic.Int64) {
		switch n {
		case 1:
			clock.Add(1000) // the first, streamed, answer takes a second
		case 2:
			<-hold // the second generates until the test lets it go
		}
	})
	g.call("POST", "/v1/chat/completions", streamed(chat("m1", longText("first", 4000), "q")))
	b := g.rt.backendByName("a")
	rate := queueRate(&b.queue)
	if !(rate > 0) {
		t.Fatal("set-up: a streamed first byte taught no rate")
	}
	body := chat("m1", longText("second", 8000), "q")
	done := make(chan struct{})
	go func() {
		defer close(done)
		g.call("POST", "/v1/chat/completions", body)
	}()
	waitFor(t, "the second request at the backend", func() bool { return n.Load() == 2 })
	clock.Add(20000) // a long generation
	if u, _ := pendingOf(g, "a"); u != int64(chainFor(t, g, EndpointChat, body, "").Units) {
		t.Errorf("pending %d units while the silent request runs, want its prompt", u)
	}
	if bk, _, g := b.queue.head(time.UnixMilli(clock.Load())); bk != 0 || g != 0 {
		t.Errorf("a silent request is the head: booked %v, progress %v", bk, g)
	}
	close(hold)
	<-done
	if r := queueRate(&b.queue); r != rate {
		t.Errorf("the silent answer taught the rate: %v, was %v", r, rate)
	}
	if u, n := pendingOf(g, "a"); u != 0 || n != 0 {
		t.Errorf("pending %d units in %d requests after the answer", u, n)
	}
}

// Through the proxy: a streamed request answered while a silent one
// decodes at the same backend teaches the rate from its own booking, not
// from the silent request's units.
func TestSilentWorkNotAheadThroughTheProxy(t *testing.T) {
	hold := make(chan struct{})
	g, clock, n := clockedRig(t, func(n int32, clock *atomic.Int64) {
		if n == 1 {
			<-hold // the silent request generates until the test lets it go
		} else {
			clock.Add(100) // the streamed one answers in 0.1 s
		}
	})
	b := g.rt.backendByName("a")
	silent := chat("m1", longText("silent", 40000), "q")
	done := make(chan struct{})
	go func() {
		defer close(done)
		g.call("POST", "/v1/chat/completions", silent)
	}()
	waitFor(t, "the silent request at the backend", func() bool { return n.Load() == 1 })
	clock.Add(5000) // it has long been decoding
	body := streamed(chat("m1", longText("streamed", 400), "q"))
	own := float64(chainFor(t, g, EndpointChat, body, "").Units)
	if s := float64(chainFor(t, g, EndpointChat, silent, "").Units); s < 10*own {
		t.Fatalf("set-up: a silent prompt of %v units, want at least ten times the streamed one's %v", s, own)
	}
	if got, _, _ := g.call("POST", "/v1/chat/completions", body); got != http.StatusOK {
		t.Fatalf("status %d", got)
	}
	b.queue.mu.Lock()
	work, waited := b.queue.work, b.queue.waited
	b.queue.mu.Unlock()
	if !(work > 0 && work <= own) || math.Abs(waited-0.1) > 1e-9 {
		t.Errorf("taught %v units over %v s, want at most the streamed prompt's %v units over 0.1 s", work, waited, own)
	}
	close(hold)
	<-done
	if u, n := pendingOf(g, "a"); u != 0 || n != 0 {
		t.Errorf("pending %d units in %d requests after the answers", u, n)
	}
}

// A request is silent when it does not stream, unless it is an embedding:
// its answer follows its prefill.
func TestSilentAnswer(t *testing.T) {
	for _, c := range []struct {
		p    Prompt
		want bool
	}{
		{Prompt{Endpoint: EndpointChat}, true},
		{Prompt{Endpoint: EndpointCompletions}, true},
		{Prompt{Endpoint: EndpointChat, Stream: true}, false},
		{Prompt{Endpoint: EndpointEmbeddings}, false},
	} {
		if got := silentAnswer(&c.p); got != c.want {
			t.Errorf("%v stream %v: silent %v, want %v", c.p.Endpoint, c.p.Stream, got, c.want)
		}
	}
}

// clockedRig is a router over one fake backend "a" on a fake clock (Unix
// ms, from now), whose backend calls before(k, clock) with each request's
// number k (from 1) and then answers it with nothing cached. It returns
// the rig, the clock and the count of requests the backend received.
func clockedRig(t *testing.T, before func(k int32, clock *atomic.Int64)) (*testRig, *atomic.Int64, *atomic.Int32) {
	t.Helper()
	a := newFakeBackend(t, "a")
	clock, n := new(atomic.Int64), new(atomic.Int32)
	clock.Store(time.Now().UnixMilli())
	a.setHook(func(w http.ResponseWriter, r *http.Request, body []byte) {
		before(n.Add(1), clock)
		answerCached(w, body, 0)
	})
	g := newRig(t, func(c *Config, d *Deps) {
		d.Now = func() time.Time { return time.UnixMilli(clock.Load()) }
	}, a)
	return g, clock, n
}
