package router

import (
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvmesh/kvmesh/tree"
)

// ttlLearner records the TTL and backend of every Learn call and passes
// it on.
type ttlLearner struct {
	inner    Learner
	mu       sync.Mutex
	ttls     []time.Duration
	backends []tree.BackendID
}

// Learn records the call once the claims are in the index, so a test that
// saw the call can look them up.
func (l *ttlLearner) Learn(ch *tree.Chain, b tree.BackendID, ttl time.Duration) {
	l.inner.Learn(ch, b, ttl)
	l.mu.Lock()
	l.ttls = append(l.ttls, ttl)
	l.backends = append(l.backends, b)
	l.mu.Unlock()
}

func (l *ttlLearner) backendsLearned() []tree.BackendID {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]tree.BackendID(nil), l.backends...)
}

func (l *ttlLearner) Invalidate(backend string, removed bool) { l.inner.Invalidate(backend, removed) }

// recordingRig is a rig over backends that prefers "a" and records every
// learn.
func recordingRig(t *testing.T, backends ...*fakeBackend) (*testRig, *ttlLearner) {
	var rec *ttlLearner
	g := newRig(t, func(c *Config, d *Deps) {
		prefer("a")(c, d)
		rec = &ttlLearner{inner: NewLocalLearner(d.Index, "n1")}
		d.Learner = rec
	}, backends...)
	return g, rec
}

func (l *ttlLearner) calls() []time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]time.Duration(nil), l.ttls...)
}

// A streamed answer confirms its claims at its first byte, while the
// backend is still generating: a long answer must not outlive the
// provisional claims of the prefix the backend has already computed. The
// answer's end learns them once more (the prefix's last use).
func TestClaimsConfirmedAtFirstByte(t *testing.T) {
	a := newFakeBackend(t, "a")
	firstSent, finish := make(chan struct{}, 1), make(chan struct{})
	var once sync.Once
	release := func() { once.Do(func() { close(finish) }) }
	defer release() // a failed check must not leave the handler blocked
	a.setHook(func(w http.ResponseWriter, r *http.Request, _ []byte) { streamInTwo(w, firstSent, finish) })
	g, rec := recordingRig(t, a)
	cfg := g.rt.cfg
	body := strings.Replace(chat("m1", longText("confirm system prompt", 3000), "a question"), `"model":"m1"`, `"model":"m1","stream":true`, 1)

	done := g.postInBackground(body)
	<-firstSent
	// The counter moves after the learn: wait for both.
	waitFor(t, "claims confirmed at the first byte", func() bool {
		return len(rec.calls()) >= 2 && g.counter("kvmesh_router_claims_learned_total", "kind", "first_byte") >= 1
	})
	if got := rec.calls(); got[0] != cfg.ProvisionalTTL || got[1] != cfg.ConfirmedTTL {
		t.Fatalf("learned before the answer ended with TTLs %v, want [%v %v]", got, cfg.ProvisionalTTL, cfg.ConfirmedTTL)
	}
	// In the index: the claims outlive the provisional TTL while a still
	// streams (a lookup as of just past it finds them).
	var res tree.Result
	g.ix.Lookup(chainFor(t, g, EndpointChat, body, ""), time.Now().Add(cfg.ProvisionalTTL+time.Minute).UnixMilli(), &res)
	if len(res.Matches) != 1 || res.Matches[0].Blocks == 0 {
		t.Fatalf("past the provisional TTL, while a streams: matches %+v, want a's confirmed claims", res.Matches)
	}
	if g.counter("kvmesh_router_claims_learned_total", "kind", "first_byte") != 1 {
		t.Fatal("claims_learned_total{kind=first_byte} did not count the confirmation")
	}
	release()
	<-done
	waitFor(t, "claims learned at the answer's end", func() bool { return len(rec.calls()) >= 3 })
	if got := rec.calls(); len(got) != 3 || got[2] != cfg.ConfirmedTTL {
		t.Fatalf("learn TTLs %v, want a third at %v when the answer ended", got, cfg.ConfirmedTTL)
	}
}

// An error answer (here a 400 with a body) confirms nothing: the backend
// computed no prefill for it.
func TestErrorAnswerConfirmsNoClaims(t *testing.T) {
	a := newFakeBackend(t, "a")
	a.setHook(func(w http.ResponseWriter, r *http.Request, _ []byte) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = io.WriteString(w, `{"error":{"message":"bad","type":"invalid_request_error"}}`)
	})
	g, rec := recordingRig(t, a)
	body := chat("m1", longText("error system prompt", 3000), "a question")
	resp := g.do("POST", "/v1/chat/completions", body)
	_, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("status %d, want the backend's 400", resp.StatusCode)
	}
	// The handler may still be running after the client has the answer:
	// wait until it has counted the request, past every learn.
	waitFor(t, "the request counted", func() bool { return g.counter("kvmesh_router_requests_total", "code", "4xx") == 1 })
	if got := rec.calls(); len(got) != 1 || got[0] != g.rt.cfg.ProvisionalTTL {
		t.Fatalf("learn TTLs %v, want only the dispatch's %v", got, g.rt.cfg.ProvisionalTTL)
	}
}

// After a failed attempt, the confirmation goes to the backend that
// answered, never to the one that failed: a answers 500, the retry on b
// streams, and only b's claims are confirmed.
func TestRetryConfirmsTheAnsweringBackend(t *testing.T) {
	a, b := newFakeBackend(t, "a"), newFakeBackend(t, "b")
	a.setHook(func(w http.ResponseWriter, r *http.Request, _ []byte) {
		http.Error(w, `{"error":{"message":"overloaded"}}`, http.StatusInternalServerError)
	})
	b.setHook(func(w http.ResponseWriter, r *http.Request, _ []byte) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: {\"n\":1}\n\ndata: [DONE]\n\n")
	})
	g, rec := recordingRig(t, a, b)
	cfg := g.rt.cfg
	body := strings.Replace(chat("m1", longText("retry system prompt", 3000), "a question"), `"model":"m1"`, `"model":"m1","stream":true`, 1)
	resp := g.do("POST", "/v1/chat/completions", body)
	_, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d, want b's 200 after the retry", resp.StatusCode)
	}
	idA, idB := g.rt.backendByName("a").id, g.rt.backendByName("b").id
	// The handler learns after the client has the bytes: wait for the
	// dispatch on a, the retry's dispatch on b, b's first byte and b's end.
	waitFor(t, "four learns", func() bool { return len(rec.calls()) >= 4 })
	ttls, bs := rec.calls(), rec.backendsLearned()
	if len(ttls) < 3 || bs[0] != idA || ttls[0] != cfg.ProvisionalTTL {
		t.Fatalf("learns %v on %v: want a provisional learn on a (%d) first", ttls, bs, idA)
	}
	for i := 1; i < len(ttls); i++ {
		if bs[i] != idB {
			t.Fatalf("learn %d (TTL %v) on backend %d after a failed: want every later learn on b (%d); all: %v on %v", i, ttls[i], bs[i], idB, ttls, bs)
		}
	}
	if len(ttls) != 4 || ttls[1] != cfg.ProvisionalTTL || ttls[2] != cfg.ConfirmedTTL || ttls[3] != cfg.ConfirmedTTL {
		t.Fatalf("learns on b: %v, want provisional, then confirmed at the first byte and at the end", ttls[1:])
	}
}
