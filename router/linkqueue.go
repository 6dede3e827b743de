package router

import (
	"context"
	"net/url"
)

// The background tokenizations of answered prompts for their eviction
// links (evictlinks.go) wait in a queue for PreciseConfig.LinkWorkers
// goroutines, which run them one at a time each: the work competes with
// requests for the router's cores, and a burst of answers must not start
// a burst of tokenizations and link computations beside them. A prompt
// that finds the queue full is not linked (counted busy).

// linkTask is one answered prompt waiting to be linked: its /tokenize
// body in sc, and what the links need (linkJob).
type linkTask struct {
	rt *Router
	b  *backend
	u  *url.URL
	sc *preciseScratch
	j  *linkJob
}

// startLinkWorkers starts the workers (eviction-link mode); close stops
// them.
func (pc *precise) startLinkWorkers() {
	pc.linkQ = make(chan *linkTask, pc.cfg.LinkQueue)
	for range pc.cfg.LinkWorkers {
		pc.wg.Add(1)
		go pc.linkWorker()
	}
}

// enqueueLink queues t, or drops it (busy) when the queue is full or the
// router is closing. It never waits.
func (pc *precise) enqueueLink(t *linkTask) {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	if !pc.closed {
		select {
		case pc.linkQ <- t:
			return
		default:
		}
		pc.lm.jobs[linkBusy].Inc()
	}
	pc.release(t.sc)
}

// linkWorker runs queued tasks until close; what is still queued then is
// dropped.
func (pc *precise) linkWorker() {
	defer pc.wg.Done()
	for t := range pc.linkQ {
		if pc.isClosed() {
			pc.release(t.sc)
			continue
		}
		pc.runLink(t)
	}
}

// runLink tokenizes t's prompt, within a place among MaxTokenizeInFlight,
// and links its claims.
func (pc *precise) runLink(t *linkTask) {
	pc.sem <- struct{}{}
	ctx, cancel := context.WithTimeout(context.Background(), pc.cfg.LinkTokenizeTimeout)
	toks, err := pc.call(ctx, t.u, t.sc, nil)
	cancel()
	<-pc.sem
	if err != nil {
		pc.release(t.sc)
		pc.lm.jobs[linkFailed].Inc()
		return
	}
	seed := pc.seed(t.sc, t.j.model, t.j.salt)
	pc.release(t.sc)
	rt := t.rt
	ch := pc.link(rt.ix.Keyer(), seed, toks, t.j)
	if ch != nil && len(ch.Learn) > 0 && pc.claimLinks.Load() {
		// The linked blocks' own claims, for the stream's owner to end
		// (EvictionSink): the tombstones tell the other nodes.
		rt.learnOn(t.b, ch, rt.cfg.ConfirmedTTL)
	}
	pc.lm.jobs[linkLinked].Inc()
}

func (pc *precise) isClosed() bool {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	return pc.closed
}
