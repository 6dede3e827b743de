package mesh

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kvmesh/kvmesh/crdt"
)

// soakFlag is -mesh.soak: off by default; "-mesh.soak" alone runs the soak
// for 30 minutes, "-mesh.soak=10m" for the given duration.
type soakFlag struct{ d time.Duration }

func (f *soakFlag) String() string   { return f.d.String() }
func (f *soakFlag) IsBoolFlag() bool { return true }
func (f *soakFlag) Set(s string) error {
	switch s {
	case "true":
		f.d = 30 * time.Minute
	case "false":
		f.d = 0
	default:
		d, err := time.ParseDuration(s)
		if err != nil || d < 0 {
			return fmt.Errorf("-mesh.soak wants a duration, got %q", s)
		}
		f.d = d
	}
	return nil
}

var soakDuration soakFlag

func init() {
	flag.Var(&soakDuration, "mesh.soak", "run the mesh soak test for this long (30m when given without a value)")
}

// soakRun describes one steady-load run.
type soakRun struct {
	duration, warmup, every time.Duration
	ttl                     time.Duration
	checkRSS                bool
}

type soakSample struct {
	at         time.Duration
	rss        int64 // bytes
	goroutines int
	claims     int
}

// rssBytes reads VmRSS from /proc/self/status (0 where there is none).
func rssBytes() int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// baseGoroutines is the fewest goroutines seen over a few quick samples:
// goroutines serving a message in flight come and go, the ones that would
// leak stay.
func baseGoroutines() int {
	n := runtime.NumGoroutine()
	for i := 0; i < 10; i++ {
		time.Sleep(5 * time.Millisecond)
		n = min(n, runtime.NumGoroutine())
	}
	return n
}

// runSoak drives a 3-node mesh (in-process, QUIC on loopback) with a
// steady 200 learns/s of request-sized claim sets, round-robin over the
// nodes, samples goroutines (and RSS) every r.every, and checks that after
// the warm-up they stay within 10% of each other.
func runSoak(t *testing.T, r soakRun) {
	c := newTestCluster(t, func(cfg *Config) {
		cfg.SweepInterval = 5 * time.Second
		cfg.AntiEntropyInterval = DefaultConfig().AntiEntropyInterval // as in production
	})
	c.icfg.Capacity = 1 << 18 // 200 learns/s x ~11 claims x a 2-minute TTL fills it: eviction runs
	c.newTransport = quicTransports(t)
	c.startN(3)
	c.waitMesh(30 * time.Second)
	nodes := c.live()
	rng := newRand(77)

	dropsAt := func() float64 {
		d := 0.0
		for _, tn := range nodes {
			d += counterValue(tn.n.m.sendDrops.WithLabelValues("queue_full"))
		}
		return d
	}
	warmDrops := -1.0 // queue drops when the warm-up ended
	var samples []soakSample
	start := time.Now()
	tick := time.NewTicker(5 * time.Millisecond) // 200 learns/s
	defer tick.Stop()
	nextSample := start.Add(r.every)
	learns := 0
	for now := range tick.C {
		if now.Sub(start) >= r.duration {
			break
		}
		// Catch up on ticks missed while sampling: the rate stays 200/s.
		for due := int(now.Sub(start) / (5 * time.Millisecond)); learns < due; learns++ {
			nodes[learns%len(nodes)].learn(t, requestPrompt(rng), backends[learns%len(backends)], r.ttl)
		}
		if now.After(nextSample) {
			nextSample = nextSample.Add(r.every)
			s := soakSample{at: now.Sub(start).Round(time.Second), rss: rssBytes(), goroutines: baseGoroutines(), claims: nodes[0].ix.Len()}
			samples = append(samples, s)
			if warmDrops < 0 && s.at >= r.warmup {
				warmDrops = dropsAt()
			}
			var st crdt.Stats
			var drops float64
			var floorRaises uint64
			for _, tn := range nodes {
				st = addStats(st, tn.n.stats())
				drops += counterValue(tn.n.m.sendDrops.WithLabelValues("queue_full"))
				floorRaises += tn.ix.Stats().FloorRaises
			}
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			t.Logf("t=%-6v rss=%6.1f MiB heap=%6.1f MiB goroutines=%4d claims(n00)=%7d learns=%d | full syncs %d, digest mismatches %d, buckets repaired %d, retransmits %d, queue drops %.0f, floor raises %d",
				s.at, float64(s.rss)/(1<<20), float64(ms.HeapAlloc)/(1<<20), s.goroutines, s.claims, learns,
				st.FullSyncsStarted, st.DigestMismatches, st.BucketsRepaired, st.Retransmits, drops, floorRaises)
		}
	}
	// The load is a count, not a rate: a loaded machine that fell behind
	// the ticks makes the learns it owes (the test takes longer, the
	// nodes take as many claims).
	for due := int(r.duration / (5 * time.Millisecond)); learns < due; learns++ {
		nodes[learns%len(nodes)].learn(t, requestPrompt(rng), backends[learns%len(backends)], r.ttl)
	}
	elapsed := time.Since(start)
	t.Logf("%d learns in %v (%.0f/s; 200/s planned)", learns, elapsed.Round(time.Second), float64(learns)/elapsed.Seconds())

	var steady []soakSample
	for _, s := range samples {
		if s.at >= r.warmup {
			steady = append(steady, s)
		}
	}
	if len(steady) < 2 {
		t.Fatalf("only %d samples after the warm-up", len(steady))
	}
	flat := func(what string, v func(soakSample) float64) {
		lo, hi := v(steady[0]), v(steady[0])
		for _, s := range steady {
			lo, hi = min(lo, v(s)), max(hi, v(s))
		}
		t.Logf("%s after warm-up: min %.1f, max %.1f (%+.1f%%)", what, lo, hi, 100*(hi-lo)/lo)
		if hi > 1.10*lo {
			t.Errorf("%s grew under steady load: min %.1f, max %.1f", what, lo, hi)
		}
	}
	flat("goroutines", func(s soakSample) float64 { return float64(s.goroutines) })
	if r.checkRSS {
		flat("RSS MiB", func(s soakSample) float64 { return float64(s.rss) / (1 << 20) })
	}

	// The load stops: the nodes converge and nothing is stuck.
	took := c.waitConverged(60 * time.Second)
	t.Logf("converged %v after the load stopped, holding %d claims", took.Round(time.Millisecond), nodes[0].ix.Len())
	// Send queues may overflow while QUIC connections warm up (the first
	// minute of the soak: thousands of repair messages queued at once on
	// cold connections); once warm, nothing is dropped.
	if d := dropsAt() - warmDrops; d > 0 {
		t.Errorf("%.0f messages dropped on full send queues after the warm-up (%.0f during it)", d, warmDrops)
	} else {
		t.Logf("no message dropped on a full send queue after the warm-up (%.0f during it)", warmDrops)
	}
}

// TestSoak: -mesh.soak[=duration]. Not part of `make test`:
//
//	go test ./mesh/ -run TestSoak -timeout 40m -v -mesh.soak=30m
func TestSoak(t *testing.T) {
	if soakDuration.d == 0 {
		t.Skip("soak test: run with -mesh.soak (30 min) or -mesh.soak=<duration>")
	}
	warmup := min(5*time.Minute, soakDuration.d/3)
	runSoak(t, soakRun{duration: soakDuration.d, warmup: warmup, every: 30 * time.Second, ttl: 2 * time.Minute, checkRSS: true})
}

// TestSteadyLoadShort is the soak's short form: 12 s of the same load with
// 4-second claims, goroutine counts flat after a 4 s warm-up.
func TestSteadyLoadShort(t *testing.T) {
	runSoak(t, soakRun{duration: 12 * time.Second, warmup: 4 * time.Second, every: time.Second, ttl: 4 * time.Second})
}
