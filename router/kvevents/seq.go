package kvevents

// SeqStatus classifies a message's sequence number against the stream so far.
type SeqStatus uint8

const (
	// SeqFirst: the first message seen on this stream. Whatever the engine
	// did before is unknown: the caller resyncs (replay from 0, else
	// invalidate).
	SeqFirst SeqStatus = iota + 1
	// SeqNext: exactly the next message.
	SeqNext
	// SeqGap: messages were missed (Missing returns the range).
	SeqGap
	// SeqDuplicate: a message already applied (after a replay, the live
	// stream delivers again what the replay covered).
	SeqDuplicate
	// SeqRestart: the number went back: the publisher restarted, so the
	// engine's cache is new.
	SeqRestart
)

func (s SeqStatus) String() string {
	switch s {
	case SeqFirst:
		return "first"
	case SeqNext:
		return "next"
	case SeqGap:
		return "gap"
	case SeqDuplicate:
		return "duplicate"
	case SeqRestart:
		return "restart"
	}
	return "unknown"
}

// SeqTracker follows one publisher's sequence numbers (vLLM counts from 0
// per process). It is pure and not safe for concurrent use.
type SeqTracker struct {
	last    int64
	started bool
	// dupFloor: numbers in (dupFloor, last] were applied through a replay
	// and may come again on the live stream; anything at or below dupFloor
	// going backwards is a restart.
	dupFloor int64
}

// Observe classifies seq. It does not advance the tracker: call Applied
// once the message (or a replayed range) has been applied.
func (t *SeqTracker) Observe(seq int64) SeqStatus {
	switch {
	case !t.started:
		return SeqFirst
	case seq == t.last+1:
		return SeqNext
	case seq > t.last+1:
		return SeqGap
	case seq > t.dupFloor:
		return SeqDuplicate
	}
	return SeqRestart
}

// Missing is the inclusive range of sequence numbers missed before seq.
func (t *SeqTracker) Missing(seq int64) (from, to int64) { return t.last + 1, seq - 1 }

// Applied records that seq was applied in order from the live stream. The
// live stream never goes back, so from here on anything at or below seq is
// a restart.
func (t *SeqTracker) Applied(seq int64) {
	if !t.started || seq > t.last {
		t.last = seq
	}
	t.started = true
	t.dupFloor = t.last
}

// Replayed records that seq was applied from a replay: live messages up to
// it may arrive again and are then duplicates.
func (t *SeqTracker) Replayed(seq int64) {
	if !t.started {
		t.started, t.last, t.dupFloor = true, seq, seq-1
		return
	}
	if seq > t.last {
		t.last = seq
	}
}

// Delivered records that the live stream delivered seq, whether it is
// applied now or a replay applied it already: the live stream never goes
// back, so from here on a number at or below seq (up to what was applied)
// is a restart, not a duplicate. Without it a stream started by a replay
// from 0 (Replayed on a tracker not started) kept its floor at -1 until a
// live message past the replay was applied, and an engine restarting in
// that window had its new numbers 0..last taken for duplicates and dropped.
func (t *SeqTracker) Delivered(seq int64) {
	if t.started {
		t.dupFloor = max(t.dupFloor, min(seq, t.last))
	}
}

// Reset forgets the stream (after a resync that gave up, or a restart):
// the next message is SeqFirst.
func (t *SeqTracker) Reset() { *t = SeqTracker{} }

// Last is the last applied sequence number (ok false before the first).
func (t *SeqTracker) Last() (int64, bool) { return t.last, t.started }
