package router

import (
	"io"
	"math"
	"net/http"
	"sync/atomic"
	"testing"
	"time"
)

// A prompt the backend rejects (a 4xx, the last 5xx passed through, or a
// connection dropped before any answer) was not prefilled: its quick end
// releases its booking without teaching the queue a rate, and the prompt,
// ten capacities long, adds only what a dispatch writes at once, an
// eighth of the capacity (dispatchWriteShare), to what was written to
// the backend: far from the edge where its claims would be doubted.
func TestRejectedPromptTeachesNoRate(t *testing.T) {
	for _, c := range []struct {
		name   string
		status int // what the backend answers; 0: it drops the connection
		want   int // what the client sees
	}{
		{"Bad Request", http.StatusBadRequest, http.StatusBadRequest},
		{"Service Unavailable", http.StatusServiceUnavailable, http.StatusServiceUnavailable},
		{"connection dropped", 0, http.StatusBadGateway},
	} {
		t.Run(c.name, func(t *testing.T) {
			a := newFakeBackend(t, "a")
			var clock atomic.Int64
			clock.Store(time.Now().UnixMilli())
			a.setHook(func(w http.ResponseWriter, _ *http.Request, _ []byte) {
				clock.Add(5) // the backend looks at the prompt and refuses it
				if c.status == 0 {
					panic(http.ErrAbortHandler)
				}
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(c.status)
				_, _ = io.WriteString(w, `{"error":{"message":"too long"}}`)
			})
			g := newRig(t, func(c *Config, d *Deps) {
				d.Now = func() time.Time { return time.UnixMilli(clock.Load()) }
			}, a)
			b := g.rt.backendByName("a")
			const capacity = 1000
			b.belief.kappa.Store(math.Float64bits(capacity))
			body := streamed(chat("m1", longText("too long", 30000), "q"))
			if u := chainFor(t, g, EndpointChat, body, "").Units; u < 10*capacity {
				t.Fatalf("set-up: a prompt of %d units, want at least 10 capacities", u)
			}
			if got, _, _ := g.call("POST", "/v1/chat/completions", body); got != c.want {
				t.Fatalf("status %d, want %d", got, c.want)
			}
			if r := queueRate(&b.queue); r != 0 {
				t.Errorf("a rejected prompt taught the rate: %v units/s", r)
			}
			if w := b.written.Load(); w != capacity/dispatchWriteShare {
				t.Errorf("written %d units, want what a dispatch writes at once, %d", w, capacity/dispatchWriteShare)
			}
			if u, n := pendingOf(g, "a"); u != 0 || n != 0 {
				t.Errorf("pending %d units in %d requests after the answer", u, n)
			}
		})
	}
}

// A prompt of more than an eighth of the capacity that the backend
// answers writes an eighth at dispatch and the rest, up to one capacity
// in all, when its first byte comes.
func TestWrittenDeferredToFirstByte(t *testing.T) {
	a := newFakeBackend(t, "a")
	g := newRig(t, nil, a)
	b := g.rt.backendByName("a")
	var atBackend atomic.Int64
	a.setHook(func(w http.ResponseWriter, _ *http.Request, body []byte) {
		atBackend.Store(b.written.Load()) // before the first byte
		answerCached(w, body, 0)
	})
	const capacity = 1000
	b.belief.kappa.Store(math.Float64bits(capacity))
	body := streamed(chat("m1", longText("long", 30000), "q"))
	if u := chainFor(t, g, EndpointChat, body, "").Units; u < 10*capacity {
		t.Fatalf("set-up: a prompt of %d units, want at least 10 capacities", u)
	}
	if got, _, _ := g.call("POST", "/v1/chat/completions", body); got != http.StatusOK {
		t.Fatalf("status %d", got)
	}
	if w := atBackend.Load(); w != capacity/dispatchWriteShare {
		t.Errorf("written %d units before the answer, want %d", w, capacity/dispatchWriteShare)
	}
	if w := b.written.Load(); w != capacity {
		t.Errorf("written %d units after the answer, want the capacity, %d", w, capacity)
	}
}

// A dispatch writes its whole uncached prompt at once while it is at most
// an eighth of the backend's capacity (whatever the answer) or the
// capacity is unknown. Beyond, it writes an eighth at once and the rest,
// up to one capacity in all, only with the first byte of a 2xx answer
// (release with firstByte); a release without it drops the rest.
func TestWrittenCappedAtCapacity(t *testing.T) {
	g := newRig(t, nil, newFakeBackend(t, "a"))
	b := g.rt.backendByName("a")
	write := func(units int, firstByte bool) (atDispatch, total int64) {
		t.Helper()
		before := b.written.Load()
		p := b.addPending(units, units, time.Time{})
		atDispatch = b.written.Load() - before
		p.release(time.Time{}, firstByte)
		p.release(time.Time{}, true) // released already: writes nothing
		return atDispatch, b.written.Load() - before
	}
	for _, c := range []struct {
		kappa      float64
		units      int
		firstByte  bool
		now, total int64
	}{
		{0, 50000, false, 50000, 50000}, // capacity unknown: all at once
		{0, 50000, true, 50000, 50000},
		{8000, 999, false, 999, 999}, // within an eighth: all at once
		{8000, 1000, false, 1000, 1000},
		{8000, 7999, true, 1000, 7999}, // within the capacity: the rest with the first byte
		{8000, 7999, false, 1000, 1000},
		{8000, 50000, true, 1000, 8000}, // past it: up to one capacity
		{8000, 50000, false, 1000, 1000},
	} {
		b.belief.kappa.Store(math.Float64bits(c.kappa))
		if now, total := write(c.units, c.firstByte); now != c.now || total != c.total {
			t.Errorf("capacity %v, %d units, first byte %v: wrote %d at dispatch and %d in all, want %d and %d",
				c.kappa, c.units, c.firstByte, now, total, c.now, c.total)
		}
	}
	if u, n := b.pendingUnits.Load(), b.pendingRequests.Load(); u != 0 || n != 0 {
		t.Errorf("pending %d units in %d requests after the releases", u, n)
	}
}
