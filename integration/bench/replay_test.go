package bench

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/kvmesh/kvmesh/integration/workload"
)

// fakeBackend answers every chat request with a short stream after hold,
// recording when each request (identified by its body) arrived and ended
// and how many were in flight at most.
type fakeBackend struct {
	hold  time.Duration
	index map[string]int // body -> request index

	mu       sync.Mutex
	arrived  map[int]time.Time
	inFlight int
	maxIn    int
	hits     int
}

func newFakeBackend(t *testing.T, w *workload.Workload, hold time.Duration) (*fakeBackend, *httptest.Server) {
	fb := &fakeBackend{hold: hold, index: map[string]int{}, arrived: map[int]time.Time{}}
	for i := range w.Requests {
		fb.index[string(w.Requests[i].BodyBytes())] = i
	}
	srv := httptest.NewServer(fb)
	t.Cleanup(srv.Close)
	return fb, srv
}

// arrival returns when request i arrived (zero if it did not).
func (fb *fakeBackend) arrival(i int) time.Time {
	fb.mu.Lock()
	defer fb.mu.Unlock()
	return fb.arrived[i]
}

// stats returns the requests seen and the most in flight at once.
func (fb *fakeBackend) stats() (hits, maxIn int) {
	fb.mu.Lock()
	defer fb.mu.Unlock()
	return fb.hits, fb.maxIn
}

func (fb *fakeBackend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	i, ok := fb.index[string(body)]
	fb.mu.Lock()
	fb.hits++
	if ok {
		fb.arrived[i] = time.Now()
	}
	fb.inFlight++
	fb.maxIn = max(fb.maxIn, fb.inFlight)
	fb.mu.Unlock()
	time.Sleep(fb.hold)
	w.Header().Set("Content-Type", "text/event-stream")
	io.WriteString(w, roleEvent+tokenEvent+usageEvent+doneEvent)
	fb.mu.Lock()
	fb.inFlight--
	fb.mu.Unlock()
}

// smallMultiTurn is a tiny multi-turn workload: conversations of several
// turns, a few hundred tokens each.
func smallMultiTurn(t *testing.T, convs int) *workload.Workload {
	t.Helper()
	o := workload.DefaultMultiTurnOptions()
	o.Conversations, o.MinTurns, o.MaxTurns = convs, 3, 4
	o.CommonPrefixTokens, o.ConversationPrefixTokens, o.ConversationPrefixMaxTokens = 32, 64, 128
	o.MinUserTokens, o.MaxUserTokens, o.MinAssistantTokens, o.MaxAssistantTokens = 8, 16, 4, 8
	w, err := workload.MultiTurn(o)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func testReplayConfig(mode Mode, conc int, scale float64) ReplayConfig {
	rc := DefaultReplayConfig()
	rc.Mode, rc.Concurrency, rc.TimeScale = mode, conc, scale
	rc.RequestTimeout = 20 * time.Second
	return rc
}

func TestReplayOpenLoopFollowsArrivalTimes(t *testing.T) {
	w := smallMultiTurn(t, 2)
	w.Requests = w.Requests[:4]
	for i := range w.Requests {
		w.Requests[i].At = time.Duration(i) * 120 * time.Millisecond
	}
	fb, srv := newFakeBackend(t, w, 0)
	const scale = 2 // 120 ms apart in workload time, 60 ms apart in wall time
	start := time.Now()
	samples, wall, err := Replay(context.Background(), w, []string{srv.URL}, testReplayConfig(OpenLoop, 8, scale), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(samples) != 4 || wall <= 0 {
		t.Fatalf("%d samples, wall %v", len(samples), wall)
	}
	for i, s := range samples {
		if !s.OK() || s.Index != i {
			t.Fatalf("sample %d = %v", i, &s)
		}
		due := w.Requests[i].At / scale
		// Never early (a slow machine may make it late, never early).
		if s.Start < due-time.Millisecond {
			t.Errorf("request %d sent at %v, scheduled at %v", i, s.Start, due)
		}
		if got := fb.arrival(i).Sub(start); got < due-time.Millisecond {
			t.Errorf("request %d arrived at %v, before its time %v", i, got, due)
		}
	}
}

func TestReplayOpenLoopCapsInFlight(t *testing.T) {
	w := smallMultiTurn(t, 3)
	for i := range w.Requests {
		w.Requests[i].At = 0 // a burst
	}
	fb, srv := newFakeBackend(t, w, 20*time.Millisecond)
	samples, _, err := Replay(context.Background(), w, []string{srv.URL}, testReplayConfig(OpenLoop, 2, 1), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, maxIn := fb.stats(); maxIn > 2 {
		t.Errorf("%d requests in flight at once, cap 2", maxIn)
	}
	// The first two found free slots (which requests the cap held back
	// after them depends on the machine's speed here: see
	// TestReplayOpenLoopMarksCappedRequests).
	for _, s := range samples[:2] {
		if s.Capped || !s.OK() {
			t.Errorf("sample %d: capped %v, err %q; want sent at once", s.Index, s.Capped, s.Err)
		}
	}
}

// heldTransport answers every request after hold with a short stream: a
// backend on synctest's clock, where a request's lateness is exact.
type heldTransport struct{ hold time.Duration }

func (h heldTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	_, _ = io.Copy(io.Discard, r.Body)
	r.Body.Close()
	time.Sleep(h.hold)
	return &http.Response{
		StatusCode: http.StatusOK, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Request: r,
		Header: http.Header{"Content-Type": {"text/event-stream"}},
		Body:   io.NopCloser(strings.NewReader(roleEvent + tokenEvent + usageEvent + doneEvent)),
	}, nil
}

// The open loop marks Capped exactly the requests its in-flight cap held
// back (its wait, or an earlier request's wait while they were due) and
// keeps their lateness, the backlog's, out of the load generator's own
// (DispatchLateP99) but in the run's lateness. On synctest's clock no time
// passes but the backend's, so each lateness is exact.
func TestReplayOpenLoopMarksCappedRequests(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const hold = 100 * time.Millisecond
		w := smallMultiTurn(t, 3)
		w.Requests = w.Requests[:6]
		// A burst of five over a cap of two, then one due after the
		// backlog has cleared.
		for i := range w.Requests {
			w.Requests[i].At = 0
		}
		w.Requests[5].At = time.Second
		rp := newReplayer(w, []string{"http://backend"}, testReplayConfig(OpenLoop, 2, 1), nil)
		rp.client = &http.Client{Transport: heldTransport{hold}}
		// Whenever the loop gets a slot it waited for, every other request
		// ending then frees its slot first.
		rp.capWaited = synctest.Wait
		samples, _, err := rp.run(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		// 0 and 1 take the two slots; 2 waits for one until 0 and 1 end
		// together at 100 ms; 3 was due during that wait and finds the
		// other slot free; 4 waits for 2 and 3 to end at 200 ms; 5 is sent
		// on time.
		wantCapped := []bool{false, false, true, true, true, false}
		wantLate := []time.Duration{0, 0, hold, hold, 2 * hold, 0}
		for i, s := range samples {
			if !s.OK() || s.Capped != wantCapped[i] || s.Late != wantLate[i] {
				t.Errorf("sample %d: ok %v capped %v late %v; want capped %v late %v",
					i, s.OK(), s.Capped, s.Late, wantCapped[i], wantLate[i])
			}
		}
		var res RunResult
		fillResult(&res, samples, nil, time.Second, 10, func(i int) int { return w.Requests[i].Conversation })
		if res.CappedRequests != 3 || res.DispatchLateP99 != 0 {
			t.Errorf("capped %d, dispatch late p99 %v s; want 3 and 0 (the uncapped were on time)", res.CappedRequests, res.DispatchLateP99)
		}
		// The run's lateness, in simulated seconds, is the capped ones'.
		if res.Late.N != 3 || !near(res.Late.Max, 2) {
			t.Errorf("late %+v; want 3 requests, at most 2 simulated seconds", res.Late)
		}
	})
}

func TestReplayClosedLoopKeepsTurnOrder(t *testing.T) {
	w := smallMultiTurn(t, 4)
	fb, srv := newFakeBackend(t, w, 10*time.Millisecond)
	var done int
	var mu sync.Mutex
	samples, _, err := Replay(context.Background(), w, []string{srv.URL}, testReplayConfig(ClosedLoop, 3, 1), func() {
		mu.Lock()
		done++
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	hits, maxIn := fb.stats()
	if done != len(w.Requests) || hits != len(w.Requests) {
		t.Fatalf("done %d, backend saw %d, want %d", done, hits, len(w.Requests))
	}
	if maxIn > 3 || maxIn < 2 {
		t.Errorf("max in flight %d, want 2..3 with 3 clients", maxIn)
	}
	last := map[int]int{} // conversation -> last request index seen
	for i := range w.Requests {
		r := &w.Requests[i]
		if !samples[i].OK() {
			t.Fatalf("sample %d: %v", i, &samples[i])
		}
		if p, ok := last[r.Conversation]; ok {
			// Sent only after the previous turn's answer ended, so it
			// reached the backend at least one hold after the previous.
			if samples[i].Start < samples[p].Start+samples[p].E2E {
				t.Errorf("turn %d of conversation %d sent before turn %d ended", r.Turn, r.Conversation, w.Requests[p].Turn)
			}
			if fb.arrival(i).Sub(fb.arrival(p)) < fb.hold {
				t.Errorf("turn %d of conversation %d arrived %v after the previous turn, less than its hold", r.Turn, r.Conversation, fb.arrival(i).Sub(fb.arrival(p)))
			}
		}
		last[r.Conversation] = i
	}
}

func TestReplaySpreadsOverFronts(t *testing.T) {
	w := smallMultiTurn(t, 8)
	for i := range w.Requests {
		w.Requests[i].At = 0
	}
	a, srvA := newFakeBackend(t, w, 0)
	b, srvB := newFakeBackend(t, w, 0)
	if _, _, err := Replay(context.Background(), w, []string{srvA.URL, srvB.URL}, testReplayConfig(OpenLoop, 16, 1), nil); err != nil {
		t.Fatal(err)
	}
	n := len(w.Requests)
	ha, _ := a.stats()
	hb, _ := b.stats()
	if ha+hb != n || ha < n/5 || hb < n/5 {
		t.Errorf("spread %d/%d over two fronts for %d requests", ha, hb, n)
	}
}

func TestReplayCancelled(t *testing.T) {
	w := smallMultiTurn(t, 2)
	for i := range w.Requests {
		w.Requests[i].At = time.Duration(i) * time.Hour
	}
	_, srv := newFakeBackend(t, w, 0)
	// Cancelled once the first request (due at once) has its answer; the
	// others are due an hour apart.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	samples, _, err := Replay(ctx, w, []string{srv.URL}, testReplayConfig(OpenLoop, 4, 1), cancel)
	if err == nil {
		t.Fatal("a cancelled replay reported no error")
	}
	if !samples[0].OK() || samples[len(samples)-1].Err != "timeout" {
		t.Errorf("first %v, last %v: want the first sent, the rest not", &samples[0], &samples[len(samples)-1])
	}
}

func TestReplayConfigValidate(t *testing.T) {
	bad := []func(*ReplayConfig){
		func(c *ReplayConfig) { c.Mode = "sideways" },
		func(c *ReplayConfig) { c.Concurrency = 0 },
		func(c *ReplayConfig) { c.TimeScale = 0 },
		func(c *ReplayConfig) { c.RequestTimeout = -1 },
		func(c *ReplayConfig) { c.Path = "v1" },
	}
	for i, mut := range bad {
		c := DefaultReplayConfig()
		mut(&c)
		if c.Validate() == nil {
			t.Errorf("bad config %d accepted", i)
		}
	}
	if err := DefaultReplayConfig().Validate(); err != nil {
		t.Errorf("default config: %v", err)
	}
}
