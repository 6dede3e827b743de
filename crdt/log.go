package crdt

import "github.com/kvmesh/kvmesh/tree"

// logEntry is one local change waiting for peers' acknowledgements: a claim,
// or a backend registry change (whose current value is read at send time).
type logEntry struct {
	seq       uint64
	claim     tree.Claim
	isBackend bool
	backend   tree.BackendID
	// source is the peer a relayed change came from (0 for local changes);
	// it is never sent back there.
	source tree.NodeID
}

// deltaLog is the delta buffer: changes numbered by sequence, kept until
// every peer has acknowledged them or the buffer overflows (then a peer that
// still needs dropped entries gets the full state instead).
type deltaLog struct {
	buf  []logEntry // buf[i].seq == first+i
	next uint64     // sequence number of the next append; starts at 1
	max  int
}

func newDeltaLog(capacity int) deltaLog {
	return deltaLog{next: 1, max: capacity}
}

// first is the oldest sequence number still held (next when empty).
func (l *deltaLog) first() uint64 {
	if len(l.buf) == 0 {
		return l.next
	}
	return l.buf[0].seq
}

// last is the newest sequence number assigned (0 before any).
func (l *deltaLog) last() uint64 { return l.next - 1 }

func (l *deltaLog) append(e logEntry) {
	e.seq = l.next
	l.next++
	if len(l.buf) >= l.max {
		drop := len(l.buf) - l.max + 1
		l.buf = append(l.buf[:0], l.buf[drop:]...)
	}
	l.buf = append(l.buf, e)
}

// covers reports whether every entry after seq is still held.
func (l *deltaLog) covers(seq uint64) bool { return seq+1 >= l.first() }

// after returns the held entries with sequence numbers above seq.
func (l *deltaLog) after(seq uint64) []logEntry {
	f := l.first()
	if seq+1 <= f {
		return l.buf
	}
	i := seq + 1 - f
	if i >= uint64(len(l.buf)) {
		return nil
	}
	return l.buf[i:]
}

// gc drops the entries up to seq. The buffer is compacted only when at
// least half of it is garbage, so gc is amortized O(1) per entry.
func (l *deltaLog) gc(seq uint64) {
	f := l.first()
	if seq < f {
		return
	}
	n := int(min(seq+1-f, uint64(len(l.buf))))
	if n == len(l.buf) {
		l.buf = l.buf[:0]
		return
	}
	l.buf = append(l.buf[:0], l.buf[n:]...)
}
