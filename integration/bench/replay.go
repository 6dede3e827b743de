package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	"github.com/kvmesh/kvmesh/integration/workload"
)

// Mode is how requests are paced.
type Mode string

const (
	// OpenLoop sends each request at its workload arrival time (divided by
	// the time scale), whether or not earlier ones have finished: the
	// offered load is the workload's, as with real users.
	OpenLoop Mode = "open"
	// ClosedLoop runs Concurrency clients, each sending the next request as
	// soon as its previous one finished (arrival times are ignored); a turn
	// of a conversation waits for the conversation's previous turn.
	ClosedLoop Mode = "closed"
)

// ReplayConfig says how a workload is replayed.
type ReplayConfig struct {
	// Mode is OpenLoop or ClosedLoop. Default OpenLoop: latencies mean what
	// users would see at the workload's own request rate.
	Mode Mode
	// Concurrency is, in closed loop, the number of clients; in open loop,
	// the most requests in flight at once (an arrival beyond it waits, and
	// its delay is recorded as Sample.Late). Default 2048: far above what 8
	// simulated backends hold at the trace's rate, so it only stops a
	// runaway, while bounding goroutines and connections.
	Concurrency int
	// TimeScale divides the workload's arrival times: the simulated
	// backends' TimeScale, so both run on the same clock. Default 1.
	TimeScale float64
	// RequestTimeout bounds one request in wall-clock time (0 = none).
	// Default 10 min: longer than any answer at any time scale; it only
	// keeps a stuck run from hanging.
	RequestTimeout time.Duration
	// Path is the request path. Default /v1/chat/completions, what the
	// workload generators render.
	Path string
	// Seed seeds the random spread over several front URLs. Default 1.
	Seed uint64
	// Shadow, if set, is asked where each request should go just before it
	// is sent (see shadowRouter). Default none.
	Shadow func(body []byte) (backend, reason string) `json:"-"`
	// Available, if set, is asked just before each request is sent how many
	// of its prompt tokens the best-placed backend holds in its cache right
	// then (the simulator's real caches): the most a router could have
	// reused (Sample.Available), and which backend that is
	// (Sample.AvailableAt). Default none.
	Available func(body []byte) (tokens int, backend string) `json:"-"`
	// Explain, if set, is asked after Available what the router at url
	// thinks of that backend (Sample.Holder; see explainAt). Default none.
	Explain func(url string, body []byte, holder string) *HolderView `json:"-"`
	// Answered, if set, is told each successful answer's prompt and cached
	// token counts (the shadow router learns the fleet's reuse from them,
	// as the nodes do from their answers). Default none.
	Answered func(promptTokens, cachedTokens int) `json:"-"`
}

// before combines the hooks that look at a request before it is sent
// (Shadow, Available, Explain) into one for send; nil when none is set.
func (rc *ReplayConfig) before() func(url string, body []byte, s *Sample) {
	shadow, available, explain := rc.Shadow, rc.Available, rc.Explain
	if shadow == nil && available == nil && explain == nil {
		return nil
	}
	return func(url string, body []byte, s *Sample) {
		if shadow != nil {
			s.Expected, s.ExpectedReason = shadow(body)
		}
		if available != nil {
			s.Available, s.AvailableAt = available(body)
		}
		if explain != nil {
			s.Holder = explain(url, body, s.AvailableAt)
		}
	}
}

// DefaultReplayConfig returns the defaults documented on ReplayConfig.
func DefaultReplayConfig() ReplayConfig {
	return ReplayConfig{
		Mode:           OpenLoop,
		Concurrency:    2048,
		TimeScale:      1,
		RequestTimeout: 10 * time.Minute,
		Path:           "/v1/chat/completions",
		Seed:           1,
	}
}

// Validate reports a setting that cannot work.
func (c ReplayConfig) Validate() error {
	switch {
	case c.Mode != OpenLoop && c.Mode != ClosedLoop:
		return fmt.Errorf("bench: replay mode %q must be %q or %q", c.Mode, OpenLoop, ClosedLoop)
	case c.Concurrency < 1:
		return fmt.Errorf("bench: replay concurrency must be at least 1, got %d", c.Concurrency)
	case !(c.TimeScale > 0):
		return fmt.Errorf("bench: replay time scale must be positive, got %v", c.TimeScale)
	case c.RequestTimeout < 0:
		return fmt.Errorf("bench: request timeout must not be negative, got %v", c.RequestTimeout)
	case c.Path == "" || c.Path[0] != '/':
		return fmt.Errorf("bench: request path %q must start with /", c.Path)
	}
	return nil
}

// Replay sends every request of w to fronts (each request to one of them,
// uniformly at random: an L4 spread over router nodes) and returns one
// Sample per request, in workload order, and the wall time from the first
// send to the last answer. done, if not nil, is called after each request
// (from many goroutines). A cancelled ctx stops sending; requests already
// sent are cancelled too and recorded as timeouts.
func Replay(ctx context.Context, w *workload.Workload, fronts []string, rc ReplayConfig, done func()) ([]Sample, time.Duration, error) {
	if err := rc.Validate(); err != nil {
		return nil, 0, err
	}
	if len(fronts) == 0 {
		return nil, 0, errors.New("bench: Replay needs at least one front URL")
	}
	rp := newReplayer(w, fronts, rc, done)
	rp.client = newHTTPClient(min(rc.Concurrency, 4096))
	defer rp.client.CloseIdleConnections()
	return rp.run(ctx)
}

// newReplayer prepares a replay of w over fronts (a valid rc, at least one
// front), without its HTTP client.
func newReplayer(w *workload.Workload, fronts []string, rc ReplayConfig, done func()) *replayer {
	rp := &replayer{
		w:       w,
		rc:      rc,
		samples: make([]Sample, len(w.Requests)),
		before:  rc.before(),
		done:    done,
		urls:    make([]string, len(fronts)),
		target:  make([]uint16, len(w.Requests)),
	}
	for i, f := range fronts {
		rp.urls[i] = f + rc.Path
	}
	rng := rand.New(rand.NewPCG(rc.Seed, 0x7370726561))
	for i := range rp.target {
		rp.target[i] = uint16(rng.IntN(len(fronts)))
	}
	return rp
}

// run replays the workload with rp.client (see Replay).
func (rp *replayer) run(ctx context.Context) ([]Sample, time.Duration, error) {
	rp.start = time.Now()
	if rp.rc.Mode == ClosedLoop {
		rp.closedLoop(ctx)
	} else {
		rp.openLoop(ctx)
	}
	var end time.Duration
	for i := range rp.samples {
		end = max(end, rp.samples[i].Start+rp.samples[i].E2E)
	}
	return rp.samples, end, ctx.Err()
}

type replayer struct {
	w       *workload.Workload
	rc      ReplayConfig
	client  *http.Client
	urls    []string
	target  []uint16 // front index per request
	samples []Sample
	before  func(url string, body []byte, s *Sample) // rc.before()
	done    func()
	start   time.Time
	// capWaited, if set, is called when the open loop got a slot it had
	// waited for: a test's hook to let the other requests ending at that
	// moment free their slots before the loop goes on, the order a busy
	// machine often has and a test cannot otherwise force.
	capWaited func()
}

// one sends request i and records its sample.
func (rp *replayer) one(ctx context.Context, i int, late time.Duration) {
	s := &rp.samples[i]
	s.Index, s.Late = i, late
	s.Start = time.Since(rp.start)
	if rp.rc.RequestTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, rp.rc.RequestTimeout)
		defer cancel()
	}
	r := &rp.w.Requests[i]
	send(ctx, rp.client, rp.urls[rp.target[i]], r.AppendBody, rp.before, s)
	if rp.rc.Answered != nil && s.OK() {
		rp.rc.Answered(s.PromptTokens, s.CachedTokens)
	}
	if rp.done != nil {
		rp.done()
	}
}

// due is request i's scheduled send time.
func (rp *replayer) due(i int) time.Time {
	return rp.start.Add(time.Duration(float64(rp.w.Requests[i].At) / rp.rc.TimeScale))
}

func (rp *replayer) openLoop(ctx context.Context) {
	sem := make(chan struct{}, rp.rc.Concurrency)
	var wg sync.WaitGroup
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	// capEnd is when the loop last got a slot it had waited for. A request
	// due before then was held back by the cap too, even if a slot is free
	// once the loop reaches it (several requests ending at once free
	// several): its lateness is the backlog's, not the load generator's,
	// and must stay out of DispatchLateP99 like the waiting request's.
	var capEnd time.Time
	for i := range rp.w.Requests {
		due := rp.due(i)
		if d := time.Until(due); d > 0 {
			timer.Reset(d)
			select {
			case <-timer.C:
			case <-ctx.Done():
			}
		}
		if ctx.Err() != nil {
			rp.skipFrom(i, "timeout")
			break
		}
		capped := due.Before(capEnd)
		select {
		case sem <- struct{}{}:
		default:
			capped = true // the in-flight cap holds this arrival back
			select {
			case sem <- struct{}{}:
				capEnd = time.Now()
				if rp.capWaited != nil {
					rp.capWaited()
				}
			case <-ctx.Done():
				rp.skipFrom(i, "timeout")
			}
		}
		if ctx.Err() != nil {
			break
		}
		late := max(time.Since(due), 0)
		wg.Add(1)
		go func() {
			defer wg.Done()
			rp.samples[i].Capped = capped
			rp.one(ctx, i, late)
			<-sem
		}()
	}
	wg.Wait()
}

// skipFrom marks requests from i on as not sent.
func (rp *replayer) skipFrom(i int, why string) {
	for ; i < len(rp.samples); i++ {
		rp.samples[i] = Sample{Index: i, Err: why}
	}
}

func (rp *replayer) closedLoop(ctx context.Context) {
	reqs := rp.w.Requests
	// prev[i] is the previous turn of request i's conversation, -1 if none.
	prev := make([]int32, len(reqs))
	last := make(map[int]int32)
	for i := range reqs {
		c := reqs[i].Conversation
		if p, ok := last[c]; ok {
			prev[i] = p
		} else {
			prev[i] = -1
		}
		last[c] = int32(i)
	}
	finished := make([]chan struct{}, len(reqs))
	for i := range finished {
		finished[i] = make(chan struct{})
	}
	var (
		mu   sync.Mutex
		next int
		wg   sync.WaitGroup
	)
	take := func() int {
		mu.Lock()
		defer mu.Unlock()
		if next >= len(reqs) {
			return -1
		}
		next++
		return next - 1
	}
	for range min(rp.rc.Concurrency, len(reqs)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := take(); i >= 0; i = take() {
				// An earlier request is always taken before a later one and
				// never waits on a later one, so this cannot deadlock.
				if p := prev[i]; p >= 0 {
					select {
					case <-finished[p]:
					case <-ctx.Done():
					}
				}
				if ctx.Err() != nil {
					rp.samples[i] = Sample{Index: i, Err: "timeout"}
				} else {
					rp.one(ctx, i, 0)
				}
				close(finished[i])
			}
		}()
	}
	wg.Wait()
}
