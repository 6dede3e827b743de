package router

import (
	"fmt"
	"strings"
	"sync"
	"testing"
)

// One link worker, a queue of one: while the worker's tokenization hangs,
// one answered prompt waits and the next is dropped (busy); once the
// tokenizer answers, the waiting one is linked too. Tokenizations never
// overlap.
func TestLinkQueueOneWorkerWaitsThenDrops(t *testing.T) {
	a := newTokenizingBackend(t, "a")
	g := evictRig(t, func(pc *PreciseConfig) { pc.LinkWorkers, pc.LinkQueue = 1, 1 }, a.fakeBackend)
	var (
		mu               sync.Mutex
		running, maxConc int
	)
	release := make(chan struct{})
	entered := make(chan struct{}, 8)
	a.set(func() {
		mu.Lock()
		running++
		maxConc = max(maxConc, running)
		mu.Unlock()
		entered <- struct{}{}
		<-release
		mu.Lock()
		running--
		mu.Unlock()
	}, nil)
	body := func(i int) string { return chat("m1", longText(fmt.Sprintf("prompt %d", i), 600), "q") }
	g.post(t, body(1), 200)
	<-entered // the worker holds prompt 1
	g.post(t, body(2), 200)
	waitFor(t, "the second prompt queued", func() bool { return g.counter("kvmesh_router_eviction_link_queue") == 1 })
	g.post(t, body(3), 200)
	waitFor(t, "the third prompt dropped", func() bool {
		return g.counter("kvmesh_router_eviction_link_prompts_total", "outcome", "busy") == 1
	})
	close(release)
	waitFor(t, "the first two prompts linked", func() bool {
		return g.counter("kvmesh_router_eviction_link_prompts_total", "outcome", "linked") == 2
	})
	if q := g.counter("kvmesh_router_eviction_link_queue"); q != 0 {
		t.Fatalf("%v prompts still queued after both were linked", q)
	}
	mu.Lock()
	defer mu.Unlock()
	if maxConc != 1 || a.calls.Load() != 2 {
		t.Fatalf("%d tokenizations, at most %d at once; want 2, one at a time", a.calls.Load(), maxConc)
	}
}

func TestLinkQueueConfigRefusals(t *testing.T) {
	for _, tc := range []struct {
		workers, queue int
		want           string
	}{{0, 256, "link_workers"}, {65, 256, "link_workers"}, {1, 0, "link_queue"}, {1, 1 << 17, "link_queue"}} {
		pc := DefaultPreciseConfig()
		pc.EvictionBackends = []string{"a"}
		pc.LinkWorkers, pc.LinkQueue = tc.workers, tc.queue
		if err := pc.Validate(16); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("workers %d, queue %d: %v, want an error naming %s", tc.workers, tc.queue, err, tc.want)
		}
	}
	pc := DefaultPreciseConfig()
	pc.EvictionBackends = []string{"a"}
	if err := pc.Validate(16); err != nil {
		t.Fatalf("defaults refused: %v", err)
	}
}
