package bench

import (
	"bytes"
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/kvmesh/kvmesh/router"
	"github.com/kvmesh/kvmesh/tree"
)

// Each request's engine TTFT is part of its client TTFT, so every quantile
// of the engines' is at most the client's (within the sketch's half
// bucket), and they count the same requests.
func TestEngineTTFTIsTheEnginesOwnPartOfTheClients(t *testing.T) {
	w, sc := prefixHeavy(t)
	cfg := e2eConfig(t, sc, "kvmesh")
	cfg.KeepSamples = true
	res, err := RunOnce(context.Background(), &cfg, w, cfg.Arms[0], 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	e := res.EngineTTFT
	if e.N != res.OK || res.OK == 0 {
		t.Fatalf("engine TTFT counts %d requests, %d succeeded", e.N, res.OK)
	}
	if e.P50 <= 0 || e.P50 > res.TTFT.P50*1.006 || e.P99 > res.TTFT.P99*1.006 {
		t.Errorf("engine TTFT p50 %v p99 %v, client's %v %v: the engines' must be the smaller", e.P50, e.P99, res.TTFT.P50, res.TTFT.P99)
	}
	// Request by request too: every answer carried its engine's TTFT,
	// which is part of the client's (within the µs it is rounded to).
	if res.Outside.N != res.OK {
		t.Fatalf("per-request outside time over %d requests, %d succeeded", res.Outside.N, res.OK)
	}
	for _, s := range res.Samples {
		if s.EngineTTFT <= 0 || s.EngineTTFT.Seconds() > s.TTFT.Seconds()*cfg.TimeScale+1e-6 {
			t.Fatalf("request %d: engine TTFT %v, client's %v at time scale %v", s.Index, s.EngineTTFT, s.TTFT, cfg.TimeScale)
		}
	}
	if res.Outside.P50 < 0 || res.Outside.P50 > res.TTFT.P50 {
		t.Errorf("outside p50 %v, client TTFT p50 %v", res.Outside.P50, res.TTFT.P50)
	}
}

// outside counts the answered requests whose engine said its TTFT, each
// less its engine's TTFT and its hold, in simulated time.
func TestOutsidePerRequest(t *testing.T) {
	ms := time.Millisecond
	samples := []Sample{
		{Status: 200, TTFT: 10 * ms, EngineTTFT: 60 * ms},                // 0.1 s - 0.06 s
		{Status: 200, TTFT: 30 * ms, Held: 20 * ms, EngineTTFT: 80 * ms}, // 0.3 - 0.2 - 0.08
		{Status: 200, TTFT: 50 * ms},                                     // no engine TTFT: not counted
		{Status: 500, Err: "http-500", EngineTTFT: ms},                   // failed: not counted
	}
	got := outside(samples, 10)
	if got.N != 2 || math.Abs(got.Mean-0.03) > 1e-9 || math.Abs(got.Max-0.04) > 1e-9 {
		t.Errorf("outside = %+v, want 2 requests, 0.02 and 0.04 s", got)
	}
	if got := outside(samples[2:3], 10); got.N != 0 {
		t.Errorf("no engine TTFT: %+v, want none", got)
	}
}

func TestEngineTTFTAbsentWithoutSketches(t *testing.T) {
	if got := engineTTFT([]BackendCounters{{Name: "b0", PrefixCacheQueries: 10}}); got != (QuantileSummary{}) {
		t.Errorf("external fleet: %+v, want none", got)
	}
}

// Without sketches (simulators in processes of their own), the engine TTFT
// comes from the answers; from real engines, which say nothing, there is
// none.
func TestEngineTTFTFromAnswers(t *testing.T) {
	ms := time.Millisecond
	samples := []Sample{
		{Status: 200, TTFT: 5 * ms, EngineTTFT: 30 * ms},
		{Status: 200, TTFT: 6 * ms, EngineTTFT: 10 * ms},
		{Status: 200, TTFT: 7 * ms, EngineTTFT: 20 * ms},
		{Status: 502, Err: "http-502", EngineTTFT: 900 * ms}, // failed: not counted
	}
	var res RunResult
	fillResult(&res, samples, []BackendCounters{{Name: "b0", PrefixCacheQueries: 10}}, time.Second, 10, func(i int) int { return i })
	if e := res.EngineTTFT; e.N != 3 || math.Abs(e.P50-0.02) > 1e-9 || math.Abs(e.P99-0.03) > 0.0005 {
		t.Errorf("engine TTFT from the answers: %+v, want 3 requests, p50 0.02 s, p99 ~0.03 s", e)
	}
	for i := range samples {
		samples[i].EngineTTFT = 0
	}
	res = RunResult{}
	fillResult(&res, samples, []BackendCounters{{Name: "b0", PrefixCacheQueries: 10}}, time.Second, 10, func(i int) int { return i })
	if res.EngineTTFT.N != 0 || res.Outside.N != 0 {
		t.Errorf("answers without engine TTFT: %+v, %+v, want none", res.EngineTTFT, res.Outside)
	}
}

func TestWriteMarkdownEngineTTFT(t *testing.T) {
	r := sampleReport()
	var b bytes.Buffer
	if err := WriteMarkdown(&b, r); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "Where the time to first token goes") {
		t.Error("a report without engine TTFT has its table")
	}
	for i := range r.Runs {
		if r.Runs[i].Arm == "kvmesh" {
			r.Runs[i].EngineTTFT = QuantileSummary{P50: r.Runs[i].TTFT.P50 - 0.1, P99: 1, N: 100}
		}
	}
	r.Arms = Summarize(sampleArms(r), r.Runs)
	b.Reset()
	if err := WriteMarkdown(&b, r); err != nil {
		t.Fatal(err)
	}
	md := b.String()
	if !strings.Contains(md, "| kvmesh | 0.450 (0.400–0.500) | 0.350 (0.300–0.400) | 0.100 | – | – | 1.350 (1.200–1.500) | 1.000 (1.000–1.000) |") {
		t.Errorf("no engine TTFT row for kvmesh:\n%s", md)
	}
	// With the engines' TTFT per request, the outside time's median and p90.
	for i := range r.Runs {
		if r.Runs[i].Arm == "kvmesh" {
			r.Runs[i].Outside = LatencySummary{P50: 0.02 + float64(i)*0.01, P90: 0.05, N: 100}
		}
	}
	r.Arms = Summarize(sampleArms(r), r.Runs)
	b.Reset()
	if err := WriteMarkdown(&b, r); err != nil {
		t.Fatal(err)
	}
	md = b.String()
	if !strings.Contains(md, "| 0.100 | 0.") || !strings.Contains(md, " | 0.050 (0.050–0.050) | 1.350 (1.200–1.500) |") {
		t.Errorf("no per-request outside time for kvmesh:\n%s", md)
	}
	if strings.Contains(md, "| round_robin | 1.100 (1.000–1.200) | ") {
		t.Errorf("an arm without engine TTFT has a row:\n%s", md)
	}
}

func sampleArms(r *Report) []Arm {
	arms := make([]Arm, len(r.Arms))
	for i := range r.Arms {
		arms[i] = r.Arms[i].Arm
	}
	return arms
}

// The shadow learns off the nodes' request paths, from a copy (the node
// may reuse its chain as soon as Learn returns), and translates the node's
// backend ids there too (the registry reads take the indexes' locks).
func TestTeeLearnerQueuesACopyInOrder(t *testing.T) {
	nodeIx, err := tree.New(tree.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	shadowIx, err := tree.New(tree.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	nb, _ := nodeIx.EnsureBackend("b1")
	_, _ = shadowIx.EnsureBackend("b0")
	sb, _ := shadowIx.EnsureBackend("b1")
	s := &shadowRouter{ix: shadowIx, learn: router.NewLocalLearner(shadowIx, "shadow"),
		learns: make(chan shadowLearn, 4), stop: make(chan struct{}), applied: make(chan struct{})}
	tee := &teeLearner{Learner: router.NewLocalLearner(nodeIx, "node"), nodeIx: nodeIx, shadow: s}

	ch := &tree.Chain{Keys: []tree.Key{11, 12}, Learn: []int32{2}, UnitsPerBlock: 16, Units: 32}
	tee.Learn(ch, nb, time.Minute)
	ch.Keys[1], ch.Learn[0] = 99, 1 // the node reuses its buffers
	tee.Invalidate("b1", false)

	l := <-s.learns
	if l.chain == nil || l.from != nodeIx || l.id != nb || l.chain.Keys[1] != 12 || l.chain.Learn[0] != 2 || l.ttl != time.Minute {
		t.Fatalf("queued learn %+v (chain %+v), want a copy of keys [11 12] for the node's b1", l, l.chain)
	}
	// The shadow's goroutine puts the id in its own registry, by name;
	// a backend it does not know is dropped.
	if !s.translate(&l) || l.id != sb {
		t.Fatalf("translated to %d, want the shadow's b1 (%d)", l.id, sb)
	}
	nx, _ := nodeIx.EnsureBackend("b9")
	if unknown := (shadowLearn{from: nodeIx, id: nx}); s.translate(&unknown) {
		t.Fatal("a backend the shadow does not know was translated")
	}
	if l := <-s.learns; l.chain != nil || l.backend != "b1" {
		t.Fatalf("second item %+v, want the invalidation of b1", l)
	}
	// Applied by the shadow's goroutine, and Close waits for it.
	go s.applyLearns()
	tee.Learn(&tree.Chain{Keys: []tree.Key{21}, Learn: []int32{1}, UnitsPerBlock: 16, Units: 16}, nb, time.Minute)
	deadline := time.Now().Add(10 * time.Second)
	for shadowIx.Len() == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if shadowIx.Len() == 0 {
		t.Fatal("the shadow's index never got the learn")
	}
	close(s.stop)
	<-s.applied
	tee.Learn(ch, nb, time.Minute) // after Close: never blocks (queued or dropped, never applied)
}
