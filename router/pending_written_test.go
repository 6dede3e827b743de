package router

import (
	"io"
	"math"
	"net/http"
	"sync/atomic"
	"testing"
	"time"
)

// A prompt the backend rejects (a 4xx, or the last 5xx passed through) was
// not prefilled: its quick error answer releases its booking without
// teaching the queue a rate, and the prompt adds at most the backend's
// capacity to what was written to it.
func TestRejectedPromptTeachesNoRate(t *testing.T) {
	for _, status := range []int{http.StatusBadRequest, http.StatusServiceUnavailable} {
		t.Run(http.StatusText(status), func(t *testing.T) {
			a := newFakeBackend(t, "a")
			var clock atomic.Int64
			clock.Store(time.Now().UnixMilli())
			a.setHook(func(w http.ResponseWriter, _ *http.Request, _ []byte) {
				clock.Add(5) // the backend looks at the prompt and refuses it
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(status)
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
			if got, _, _ := g.call("POST", "/v1/chat/completions", body); got != status {
				t.Fatalf("status %d, want %d", got, status)
			}
			if r := queueRate(&b.queue); r != 0 {
				t.Errorf("a %d answer taught the rate: %v units/s", status, r)
			}
			if w := b.written.Load(); w != capacity {
				t.Errorf("written %d units, want the capacity, %d", w, capacity)
			}
			if u, n := pendingOf(g, "a"); u != 0 || n != 0 {
				t.Errorf("pending %d units in %d requests after the answer", u, n)
			}
		})
	}
}

// A dispatch writes its whole uncached prompt while it fits in the
// backend's capacity or the capacity is unknown, and one capacity when it
// does not fit.
func TestWrittenCappedAtCapacity(t *testing.T) {
	g := newRig(t, nil, newFakeBackend(t, "a"))
	b := g.rt.backendByName("a")
	write := func(units int) int64 {
		t.Helper()
		before := b.written.Load()
		p := b.addPending(units, units, time.Time{})
		p.release(time.Time{}, false)
		return b.written.Load() - before
	}
	if got := write(50000); got != 50000 {
		t.Errorf("capacity unknown: wrote %d units, want all 50000", got)
	}
	b.belief.kappa.Store(math.Float64bits(8000))
	if got := write(7999); got != 7999 {
		t.Errorf("a prompt within the capacity: wrote %d units, want 7999", got)
	}
	if got := write(50000); got != 8000 {
		t.Errorf("a prompt past the capacity: wrote %d units, want 8000", got)
	}
	if u, n := b.pendingUnits.Load(), b.pendingRequests.Load(); u != 0 || n != 0 {
		t.Errorf("pending %d units in %d requests after the releases", u, n)
	}
}
