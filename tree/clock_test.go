package tree

import "testing"

func TestClockIsMonotonic(t *testing.T) {
	c := NewClock(500)
	a := c.Now(1000)
	b := c.Now(1000) // same millisecond: the counter ticks
	d := c.Now(999)  // wall clock went back: still forward
	e := c.Now(2000)
	if !(a < b && b < d && d < e) || e != MakeTimestamp(2000, 0) || b.Counter() != 1 {
		t.Fatalf("not monotonic: %v %v %v %v", a, b, d, e)
	}
	// An exhausted counter borrows the next millisecond.
	c = NewClock(500)
	c.Observe(MakeTimestamp(5000, 0xffff), 5000)
	if n := c.Now(5000); n != MakeTimestamp(5001, 0) {
		t.Fatalf("after exhausted counter: %d/%d", n.Millis(), n.Counter())
	}
}

func TestClockObservesAndClampsRemote(t *testing.T) {
	c := NewClock(500)
	ts, clamped := c.Observe(MakeTimestamp(1300, 4), 1000)
	if clamped || ts != MakeTimestamp(1300, 4) || c.Now(1000) <= ts {
		t.Fatalf("within skew: %v %v", ts, clamped)
	}
	// A runaway peer an hour ahead is clamped to now+skew and cannot drag
	// the clock with it.
	ts, clamped = c.Observe(MakeTimestamp(1000+3_600_000, 0), 1000)
	if !clamped || ts.Millis() != 1500 || c.Clamps() != 1 || c.Last().Millis() != 1500 {
		t.Fatalf("clamp: %d %v clamps=%d last=%d", ts.Millis(), clamped, c.Clamps(), c.Last().Millis())
	}
}
