package tree

// Clock is a hybrid logical clock (Kulkarni et al.): timestamps are 48-bit
// Unix milliseconds and a 16-bit counter in a uint64 (Timestamp). Package
// crdt stamps replicated changes with it, and a router without a mesh its
// local ones. They
// never go backwards, follow the wall clock when it moves forward, and order
// causally related events across nodes. The wall clock is passed in.
type Clock struct {
	last    Timestamp
	maxSkew int64
	clamps  uint64
}

// NewClock returns a clock that clamps remote timestamps more than
// maxSkewMillis ahead of the local wall clock.
func NewClock(maxSkewMillis int64) Clock { return Clock{maxSkew: maxSkewMillis} }

// Now returns a timestamp for a local event at wall time nowMillis, greater
// than every timestamp this clock returned or observed before.
func (c *Clock) Now(nowMillis int64) Timestamp {
	if nowMillis > c.last.Millis() {
		c.last = MakeTimestamp(nowMillis, 0)
		return c.last
	}
	c.tick()
	return c.last
}

func (c *Clock) tick() {
	if c.last.Counter() == 0xffff {
		// The counter is exhausted within this millisecond: borrow the next
		// millisecond rather than wrap.
		c.last = MakeTimestamp(c.last.Millis()+1, 0)
		return
	}
	c.last++
}

// Observe merges a remote timestamp seen at wall time nowMillis and returns
// it, clamped to nowMillis+maxSkew if it was further in the future than
// that; clamped reports whether it was.
func (c *Clock) Observe(remote Timestamp, nowMillis int64) (ts Timestamp, clamped bool) {
	if limit := nowMillis + c.maxSkew; remote.Millis() > limit {
		remote = MakeTimestamp(limit, 0)
		clamped = true
		c.clamps++
	}
	if remote > c.last {
		c.last = remote
	}
	return remote, clamped
}

// Last is the greatest timestamp the clock has returned or observed.
func (c *Clock) Last() Timestamp { return c.last }

// Clamps counts the remote timestamps that were clamped.
func (c *Clock) Clamps() uint64 { return c.clamps }
