package mesh

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvmesh/kvmesh/crdt"
	"github.com/kvmesh/kvmesh/transport"
	"github.com/kvmesh/kvmesh/tree"
)

// requestPrompt is a request-sized prompt: 4-16 KiB of rendered chat
// (64-255 blocks) with six message ends, so a learn leaves ~8-14 claims
// (message ends, checkpoints every 32 blocks, the last block).
func requestPrompt(rng *rand.Rand) prompt {
	p := randomPrompt(rng, 64+rng.IntN(192))
	p.ends = p.ends[:0]
	for i := 1; i <= 6; i++ {
		p.ends = append(p.ends, len(p.text)*i/6)
	}
	return p
}

// quicTransports makes each node's replication transport a QUIC endpoint
// on loopback with a certificate from one CA.
func quicTransports(tb testing.TB) func(string) (Transport, error) {
	ca, err := transport.GenerateCA("kvmesh-bench", time.Hour)
	if err != nil {
		tb.Fatal(err)
	}
	return func(name string) (Transport, error) {
		cert, err := ca.Issue(name, []string{"127.0.0.1"}, time.Hour)
		if err != nil {
			return nil, err
		}
		cfg := transport.DefaultConfig()
		cfg.TLS = ca.TLSConfig(cert)
		return transport.NewQUIC(cfg)
	}
}

// measureLearnToRoutable has node n00 learn one request-sized prompt per
// iteration and waits until every other node routes it (Lookup matches it
// at full depth). It reports the p50 and p99 of that time and n00's delta
// bytes on the wire per claim per peer.
func measureLearnToRoutable(b *testing.B, c *testCluster) {
	live := c.live()
	origin, others := live[0], live[1:]
	rng := rand.New(rand.NewPCG(1, 2))
	// Warm up: connections dialled, backends registered everywhere.
	for i := 0; i < 5; i++ {
		p := requestPrompt(rng)
		origin.learn(b, p, backends[0], time.Hour)
		for _, o := range others {
			for o.depth(p, backends[0]) != fullDepth(p) {
				time.Sleep(100 * time.Microsecond)
			}
		}
	}
	bytes0 := counterValue(origin.n.m.sentBytesBy[crdt.MsgDelta])
	claims0 := origin.n.stats().LocalChanges
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		p := requestPrompt(rng)
		// Requests arrive at any point of the flush cycle; without this
		// pause every learn would follow the last flush by the same delay.
		b.StopTimer()
		time.Sleep(time.Duration(rng.Int64N(int64(origin.n.cfg.FlushInterval))))
		b.StartTimer()
		start := time.Now()
		origin.learn(b, p, backends[0], time.Hour)
		for _, o := range others {
			for o.depth(p, backends[0]) != fullDepth(p) {
				time.Sleep(50 * time.Microsecond)
			}
		}
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	slices.Sort(lat)
	q := func(f float64) float64 { return float64(lat[int(f*float64(len(lat)-1))]) / float64(time.Millisecond) }
	b.ReportMetric(q(0.5), "p50-ms")
	b.ReportMetric(q(0.99), "p99-ms")
	claims := float64(origin.n.stats().LocalChanges - claims0)
	if claims > 0 {
		sent := counterValue(origin.n.m.sentBytesBy[crdt.MsgDelta]) - bytes0
		b.ReportMetric(sent/claims/float64(len(others)), "wire-B/claim/peer")
	}
}

// BenchmarkLearnToRoutable: the time from Learn on one node to the claim
// being routable on all others. Budgets: p99 50 ms for 3 nodes over QUIC
// on loopback, 250 ms for 32 nodes in one process. Run with a fixed count
// for stable percentiles:
//
//	go test -run '^$' -bench LearnToRoutable -benchtime 300x ./mesh/
func BenchmarkLearnToRoutable(b *testing.B) {
	b.Run("quic-3", func(b *testing.B) {
		c := newTestCluster(b, nil)
		c.newTransport = quicTransports(b)
		c.startN(3)
		c.waitMesh(30 * time.Second)
		measureLearnToRoutable(b, c)
	})
	// The same with the load channel busy: every node books and releases
	// prefill at 500 changes a second, each shipped to its peers at once.
	b.Run("quic-3-load", func(b *testing.B) {
		c := newTestCluster(b, nil)
		c.newTransport = quicTransports(b)
		c.startN(3)
		c.waitMesh(30 * time.Second)
		stop := make(chan struct{})
		defer close(stop)
		for _, tn := range c.live() {
			f := newFakeLoad(b, tn.ix)
			tn.n.SetLoadSource(f)
			go func() {
				t := time.NewTicker(2 * time.Millisecond)
				defer t.Stop()
				for i := int64(0); ; i++ {
					select {
					case <-stop:
						return
					case <-t.C:
						f.book(int(i%4), 1000*(i%7), i%3, i%5)
						tn.n.BookingsChanged()
					}
				}
			}()
		}
		measureLearnToRoutable(b, c)
	})
	b.Run("memnet-32", func(b *testing.B) {
		c := newTestCluster(b, nil)
		c.startN(32)
		c.waitMesh(60 * time.Second)
		measureLearnToRoutable(b, c)
	})
}

// BenchmarkWireBytesPerClaim: the delta bytes on the wire per claim per
// peer under a steady load (3 nodes, each flush carrying the claims of
// several requests). Budget: 48.
func BenchmarkWireBytesPerClaim(b *testing.B) {
	for _, perFlush := range []int{1, 10} {
		b.Run(fmt.Sprintf("requests-per-flush=%d", perFlush), func(b *testing.B) {
			c := newTestCluster(b, nil)
			c.startN(3)
			c.waitMesh(30 * time.Second)
			origin := c.node("n00")
			rng := rand.New(rand.NewPCG(3, 4))
			bytes0 := counterValue(origin.n.m.sentBytesBy[crdt.MsgDelta])
			all0 := sum(origin.n.m.sentBytesBy[:])
			claims0 := origin.n.stats().LocalChanges
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				origin.learn(b, requestPrompt(rng), backends[i%len(backends)], time.Hour)
				if i%perFlush == perFlush-1 {
					time.Sleep(origin.n.cfg.FlushInterval + 2*time.Millisecond)
				}
			}
			c.waitConverged(30 * time.Second)
			b.StopTimer()
			claims := float64(origin.n.stats().LocalChanges - claims0)
			b.ReportMetric((counterValue(origin.n.m.sentBytesBy[crdt.MsgDelta])-bytes0)/claims/2, "wire-B/claim/peer")
			b.ReportMetric((sum(origin.n.m.sentBytesBy[:])-all0)/claims/2, "all-B/claim/peer")
		})
	}
}

// sum adds the counters that are set.
func sum(cs []prometheus.Counter) float64 {
	t := 0.0
	for _, c := range cs {
		if c != nil {
			t += counterValue(c)
		}
	}
	return t
}

// BenchmarkNodeLearn: the request-path cost of Node.Learn for a
// request-sized chain of 12 new claims, on a started node with two peers.
// Every 1,024 learns the timer stops until the peers have acknowledged
// everything, which keeps the load sustainable (see the crdt delta log note
// in the package report: a log kept full by peers that cannot keep up makes
// every append copy the whole log).
func BenchmarkNodeLearn(b *testing.B) {
	c := newTestCluster(b, nil)
	c.icfg.Capacity = 1 << 20
	c.startN(3)
	c.waitMesh(30 * time.Second)
	tn := c.node("n00")
	id, _ := tn.ix.EnsureBackend(backends[0])
	ch := tree.Chain{Keys: make([]tree.Key, 12), Learn: []int32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, UnitsPerBlock: 64}
	x := uint64(1)
	caughtUp := func() bool {
		tn.n.mu.Lock()
		defer tn.n.mu.Unlock()
		for _, p := range tn.n.rep.Peers() {
			if p.Backlog > 0 {
				return false
			}
		}
		return true
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for k := range ch.Keys {
			x ^= x << 13
			x ^= x >> 7
			x ^= x << 17
			ch.Keys[k] = tree.Key(x | 1)
		}
		tn.n.Learn(&ch, id, time.Hour)
		if i%1024 == 1023 {
			b.StopTimer()
			for !caughtUp() {
				time.Sleep(time.Millisecond)
			}
			b.StartTimer()
		}
	}
}

// BenchmarkAntiEntropyUnderLoad: what the periodic digest exchanges cost
// while claims flow: 3 nodes holding ~200,000 claims take 200 learns/s for
// 20 s (b.N is ignored: run with -benchtime 1x). Digests compare at a
// moment when deltas are in flight, so buckets differ and are repaired in
// full; the metrics are repair bytes, and all anti-entropy bytes (digests,
// requests, repairs), per delta byte sent.
//
//	go test -run '^$' -bench AntiEntropyUnderLoad -benchtime 1x ./mesh/
func BenchmarkAntiEntropyUnderLoad(b *testing.B) {
	for _, v := range []struct {
		buckets  int
		interval time.Duration
	}{{256, 2 * time.Second}, {4096, 2 * time.Second}, {4096, 5 * time.Second}} {
		b.Run(fmt.Sprintf("buckets=%d/every=%v", v.buckets, v.interval), func(b *testing.B) {
			c := newTestCluster(b, func(cfg *Config) {
				cfg.Replica.DigestBuckets = v.buckets
				cfg.AntiEntropyInterval = v.interval
			})
			c.icfg.Capacity = 1 << 18
			c.startN(3)
			c.waitMesh(30 * time.Second)
			rng := rand.New(rand.NewPCG(5, 6))
			nodes := c.live()
			for i := 0; i < 20000; i++ { // prefill, at a pace the peers follow
				nodes[i%3].learn(b, requestPrompt(rng), backends[i%len(backends)], time.Hour)
				if i%500 == 499 {
					time.Sleep(20 * time.Millisecond)
				}
			}
			c.waitConverged(60 * time.Second)
			total := func(t crdt.MsgType) float64 {
				s := 0.0
				for _, tn := range nodes {
					s += counterValue(tn.n.m.sentBytesBy[t])
				}
				return s
			}
			ae := func() float64 {
				return total(crdt.MsgRepair) + total(crdt.MsgDigest) + total(crdt.MsgRepairRequest)
			}
			delta0, repair0, ae0 := total(crdt.MsgDelta), total(crdt.MsgRepair), ae()
			b.ResetTimer()
			start := time.Now()
			for i := 0; time.Since(start) < 20*time.Second; i++ {
				nodes[i%3].learn(b, requestPrompt(rng), backends[i%len(backends)], time.Hour)
				time.Sleep(5 * time.Millisecond)
			}
			b.StopTimer()
			delta, repair, all := total(crdt.MsgDelta)-delta0, total(crdt.MsgRepair)-repair0, ae()-ae0
			b.ReportMetric(repair/delta, "repair-B/delta-B")
			b.ReportMetric(all/delta, "anti-entropy-B/delta-B")
			b.ReportMetric(repair/20/1024, "repair-KiB/s")
		})
	}
}
