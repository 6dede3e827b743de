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
// still needs dropped entries gets the full state instead). It is a ring:
// appending and trimming are O(1) whatever the fill.
type deltaLog struct {
	buf  []logEntry // ring of capacity max, allocated on first use
	head int        // index of the oldest entry
	n    int        // entries held
	next uint64     // sequence number of the next append; starts at 1
	max  int
}

func newDeltaLog(capacity int) deltaLog {
	return deltaLog{next: 1, max: capacity}
}

// first is the oldest sequence number still held (next when empty).
func (l *deltaLog) first() uint64 { return l.next - uint64(l.n) }

// last is the newest sequence number assigned (0 before any).
func (l *deltaLog) last() uint64 { return l.next - 1 }

func (l *deltaLog) append(e logEntry) {
	if l.buf == nil {
		l.buf = make([]logEntry, l.max)
	}
	e.seq = l.next
	l.next++
	if l.n == l.max {
		l.head = (l.head + 1) % l.max // overflow: the oldest is dropped
		l.n--
	}
	l.buf[(l.head+l.n)%l.max] = e
	l.n++
}

// covers reports whether every entry after seq is still held.
func (l *deltaLog) covers(seq uint64) bool { return seq+1 >= l.first() }

// each calls fn for the held entries with sequence numbers above seq, in
// order, until fn returns false.
func (l *deltaLog) each(seq uint64, fn func(e *logEntry) bool) {
	start := 0
	if f := l.first(); seq+1 > f {
		start = int(seq + 1 - f)
	}
	for i := start; i < l.n; i++ {
		if !fn(&l.buf[(l.head+i)%l.max]) {
			return
		}
	}
}

// gc drops the entries up to seq.
func (l *deltaLog) gc(seq uint64) {
	f := l.first()
	if seq < f || l.n == 0 {
		return
	}
	drop := int(min(seq+1-f, uint64(l.n)))
	l.head = (l.head + drop) % l.max
	l.n -= drop
}
