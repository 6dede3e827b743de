package router

import (
	"math"
	"testing"
)

// The reuse average weighs answers by their tokens, clamps cached to the
// prompt, and says -1 before any answer.
func TestReuseAverage(t *testing.T) {
	var a reuseAverage
	if got := a.share(); got != -1 {
		t.Fatalf("before any answer: %v, want -1", got)
	}
	a.add(0, 5) // no prompt: ignored
	if got := a.share(); got != -1 {
		t.Fatalf("after an empty answer: %v, want -1", got)
	}
	a.add(1000, 0)
	a.add(10, 10)
	want := 10 / (1000*reuseDecay + 10)
	if got := a.share(); math.Abs(got-want) > 1e-12 {
		t.Fatalf("share %v, want %v (token-weighted)", got, want)
	}
	var b reuseAverage
	b.add(100, 500) // cached beyond the prompt counts as the whole prompt
	b.add(100, -3)  // negative as none
	if got := b.share(); math.Abs(got-reuseDecay/(reuseDecay+1)) > 1e-12 {
		t.Fatalf("clamped share %v", got)
	}
	for range 2000 { // old answers fade
		b.add(100, 100)
	}
	if got := b.share(); got < 0.99 {
		t.Fatalf("after 2000 fully cached answers: %v", got)
	}
}

// A mirroring router (a benchmark's shadow) learns the fleet's reuse from
// answers it did not route.
func TestObserveAnswer(t *testing.T) {
	g := newRig(t, nil, newFakeBackend(t, "a"))
	g.rt.ObserveAnswer(100, 80)
	if got := g.rt.reuse.share(); math.Abs(got-0.8) > 1e-12 {
		t.Fatalf("reuse after one observed answer: %v, want 0.8", got)
	}
}
