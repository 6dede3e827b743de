package mesh

import (
	"fmt"
	"math"
	"testing"

	"github.com/kvmesh/kvmesh/tree"
)

// loadWatch checks what a load table publishes, input after input: every
// sum finite and not negative, the share in [0, 1], and the written
// totals (PeerWritten), the answer and prompt totals (PeerAnswers,
// PeerPrompts) and the published
// lessons' stamps never going back, nor a published lesson going away.
type loadWatch struct {
	written []float64
	stamps  []uint64
	answers answerTotals
}

// check compares lt's published state with the last checked (the caller
// holds lt's lock, or nothing else uses lt).
func (w *loadWatch) check(lt *loadTable) error {
	for len(w.written) < lt.hi {
		w.written = append(w.written, 0)
		w.stamps = append(w.stamps, 0)
	}
	bad := func(v float64) bool { return math.IsNaN(v) || math.IsInf(v, 0) || v < 0 }
	for i := range lt.hi {
		id := tree.BackendID(i)
		u, r, f := lt.sum(id)
		if bad(u) || bad(r) || bad(f) {
			return fmt.Errorf("b%d: published bookings %v %v %v", i, u, r, f)
		}
		wr := lt.writtenSum(id)
		if bad(wr) || wr < w.written[i] {
			return fmt.Errorf("b%d: written %v, was %v", i, wr, w.written[i])
		}
		w.written[i] = wr
		l := lt.lesson(id)
		switch {
		case l == nil && w.stamps[i] > 0:
			return fmt.Errorf("b%d: the published lesson (stamp %d) went away", i, w.stamps[i])
		case l != nil && l.Stamp < w.stamps[i]:
			return fmt.Errorf("b%d: published lesson stamp %d, was %d", i, l.Stamp, w.stamps[i])
		case l != nil:
			w.stamps[i] = l.Stamp
		}
	}
	if s := math.Float64frombits(lt.share.Load()); math.IsNaN(s) || s < 0 || s > 1 {
		return fmt.Errorf("share %v", s)
	}
	s := &lt.answered
	a := answerTotals{N: s.n.Load(), Prompt: s.prompt.Load(), Cached: s.cached.Load(), Routed: s.routed.Load(), RoutedUnits: s.routedUnits.Load()}
	if a.N < w.answers.N || a.Prompt < w.answers.Prompt || a.Cached < w.answers.Cached ||
		a.Routed < w.answers.Routed || a.RoutedUnits < w.answers.RoutedUnits {
		return fmt.Errorf("answer totals %+v, were %+v", a, w.answers)
	}
	w.answers = a
	return nil
}

// loadProgram reads a fuzz input as a sequence of operations on a load
// table: messages from three peers (snapshots with and without names,
// deltas, lessons, lost marks, answers; of new, current and earlier
// incarnations; in order, replayed, restarted with a later base or from 1),
// time passing, peers expiring or leaving, publishes.
type loadProgram struct {
	b   []byte
	now int64
	// Per peer: its incarnations (cur, and the one before) and sequence.
	inc, prev, seq [3]uint64
	nextInc        uint64
	watch          loadWatch
	err            error // what a check within an operation found
	historied      bool  // a history ran
}

func (p *loadProgram) byte() byte {
	if len(p.b) == 0 {
		return 0
	}
	c := p.b[0]
	p.b = p.b[1:]
	return c
}

// value is a figure for a message: small, or the wire's largest.
func (p *loadProgram) value(limit uint64) uint64 {
	switch c := p.byte(); {
	case c == 0xff:
		return limit
	case c >= 0xf0:
		return limit - uint64(c&0x0f)
	default:
		return uint64(c) * uint64(c) * 7
	}
}

var fuzzPeers = [3]string{"p0", "p1", "p2"}

// history has peer i restart 1,100 times, each process having written the
// wire's largest figure to every backend and answered as much: enough to
// take the totals past 2^64, where they must saturate, not wrap. It
// checks the table every 50 restarts (a wrapped total would be far below
// the last one checked).
func (p *loadProgram) history(lt *loadTable, i int) error {
	const most = maxLoadValue * loadWrittenStep
	for k := range 1100 {
		p.nextInc++
		p.prev[i], p.inc[i] = p.inc[i], p.nextInc
		p.seq[i] += 1 << loadSeqShift
		m := &loadMsg{Seq: p.seq[i], Snapshot: true, Names: true, Incarnation: p.inc[i]}
		for j, name := range fuzzNames {
			m.Entries = append(m.Entries, loadEntry{Idx: uint32(10 + j), Name: name, Written: most})
		}
		lt.apply(fuzzPeers[i], m, 0, p.now)
		p.seq[i]++
		lt.apply(fuzzPeers[i], &loadMsg{Seq: p.seq[i], Answers: true,
			Answered: answerTotals{N: maxLoadValue, Prompt: maxLoadValue, Cached: maxLoadValue}}, 0, p.now)
		p.seq[i]++
		lt.apply(fuzzPeers[i], &loadMsg{Seq: p.seq[i], Prompts: true,
			Answered: answerTotals{Routed: maxLoadValue, RoutedUnits: maxLoadValue}}, 0, p.now)
		if k%50 == 49 {
			lt.publish(p.now, 1)
			if err := p.watch.check(lt); err != nil {
				return fmt.Errorf("%s's restarts: %w", fuzzPeers[i], err)
			}
		}
	}
	return nil
}

// fuzzNames are the backend names a peer's snapshot may carry: the test
// table knows b0..b3 only.
var fuzzNames = [5]string{"b0", "b1", "b2", "b3", "elsewhere"}

// next builds the next message, or runs a table operation and returns nil.
func (p *loadProgram) next(lt *loadTable) (peer string, m *loadMsg) {
	op := p.byte()
	i := int(op>>3) % 3
	peer = fuzzPeers[i]
	m = &loadMsg{}
	switch op & 7 {
	case 0, 1: // a snapshot, op 1 with names
		m.Snapshot, m.Names = true, op&7 == 1
		switch c := p.byte(); c % 4 {
		case 0: // a restart: a new incarnation
			p.nextInc++
			p.prev[i], p.inc[i] = p.inc[i], p.nextInc
		case 1: // a late snapshot of the incarnation before
			m.Incarnation = p.prev[i]
		}
		if m.Incarnation == 0 {
			m.Incarnation = p.inc[i]
		}
		m.Routed = uint64(p.byte()) * 100
	case 2: // a delta
	case 3:
		m.Lessons = true
	case 4:
		m.Lost = true
	case 5: // answers, op&0x80 prompts
		n := p.value(maxLoadValue)
		prompt := p.value(maxLoadValue)
		if op&0x80 != 0 {
			m.Prompts, m.Answered = true, answerTotals{Routed: n, RoutedUnits: prompt}
			break
		}
		m.Answers = true
		m.Answered = answerTotals{N: n, Prompt: prompt, Cached: min(p.value(maxLoadValue), prompt)}
	case 6: // time passes
		c := int64(p.byte())
		p.now += c * c * 2
		if op&0x80 != 0 && !p.historied { // once a program: it is slow
			p.historied = true
			p.err = p.history(lt, i)
		}
		return "", nil
	case 7: // peers expire, or one leaves
		if op&0x80 != 0 {
			keep := map[string]struct{}{}
			for j, name := range fuzzPeers {
				if j != i {
					keep[name] = struct{}{}
				}
			}
			lt.expire(p.now, keep)
		} else {
			lt.expire(p.now, nil)
		}
		lt.publish(p.now, float64(p.byte()))
		return "", nil
	}
	// The sequence: the next, a replay, a restart's later base, or from 1
	// (an earlier release).
	switch c := p.byte(); c % 8 {
	case 0:
		p.seq[i] = max(p.seq[i], 1) - min(uint64(p.byte()), max(p.seq[i], 1)-1)
		m.Seq = p.seq[i]
	case 1:
		p.seq[i] += 1 << loadSeqShift * uint64(p.byte())
	case 2:
		p.seq[i] = 0
	}
	if m.Seq == 0 {
		p.seq[i]++
		m.Seq = p.seq[i]
	}
	for range p.byte() % 5 {
		e := loadEntry{Idx: uint32(10 + p.byte()%6)}
		switch {
		case m.Lessons:
			e.Lesson = lessonWire{Stamp: p.value(maxLoadValue), Scale: uint64(p.byte()) * 256, Learned: p.value(maxLoadValue) * loadWrittenStep,
				Doubt: uint64(p.byte()) * 256, DoubtN: uint64(p.byte())}
			if c := p.byte(); c < 0x80 {
				e.Lesson.Stamp = uint64(max(p.now, 1)) + uint64(c) // near the clock, mostly
			}
		case m.Lost:
			e.Key, e.Age = uint64(p.byte()), uint64(p.byte())
		default:
			if m.Names {
				e.Name = fuzzNames[p.byte()%5]
			}
			e.Units, e.Requests, e.InFlight = uint64(p.byte())*100, uint64(p.byte()%8), uint64(p.byte()%8)
			e.Written = p.value(maxLoadValue) * loadWrittenStep
		}
		m.Entries = append(m.Entries, e)
	}
	return peer, m
}

// FuzzLoadTable runs sequences of load messages from several peers, of
// several incarnations and sequences, through the wire and into a load
// table, with time passing, peers expiring and publishes between: nothing
// panics, and after every step the published sums are finite and not
// negative, and the written and answer totals and lesson stamps never go
// back.
func FuzzLoadTable(f *testing.F) {
	f.Add([]byte{1, 0, 5, 3, 0, 1, 2, 3, 0xff, 2, 1, 1, 0, 7})
	f.Add([]byte{
		1, 0, 5, 0, 2, 0, 1, 2, 3, 0xff, 1, 1, 2, 3, 4, 5, // p0: a restart's snapshot with names, two entries
		3, 3, 2, 1, 0xff, 0xff, 0x80, 0x40, 9, 0x10, // a lesson
		4, 3, 1, 1, 5, 6, // a lost mark
		5, 0xff, 0xff, 0xfe, 3, // answers
		0x85, 7, 9, 3, // prompts
		6, 40, 7, 3, // time, expire, publish
		1, 0, 9, 1, 200, 2, 0, 4, 3, 1, 0xff, // a restart with a later base
		1, 1, 9, 0, 3, 1, 0, 0, 0, 0, 0, 0xff, // a late snapshot of the incarnation before
		9, 0, 5, 2, 1, 1, 0, 0, 0xff, // p1
		0x87, 0, 6, 0xff, 0x87, 1, // p0 leaves; time; expire
	})
	rng := newRand(11)
	for range 4 { // random programs reach every operation
		prog := make([]byte, 400)
		for i := range prog {
			prog[i] = byte(rng.IntN(256))
		}
		f.Add(prog)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		lt := testLoadTable()
		p := &loadProgram{b: data, now: 1}
		w := &p.watch
		var in loadMsg
		for len(p.b) > 0 {
			peer, m := p.next(lt)
			if m != nil {
				// Through the wire, as the receive loop has it.
				wire := appendLoad(nil, m)
				if err := decodeLoad(wire, &in); err != nil {
					t.Fatalf("a message the sender could build does not decode: %v (%+v)", err, m)
				}
				lt.apply(peer, &in, len(wire), p.now)
				lt.lostIn = lt.lostIn[:0]
				lt.publish(p.now, 1)
			}
			if p.err != nil {
				t.Fatalf("at %d ms: %v", p.now, p.err)
			}
			if err := w.check(lt); err != nil {
				t.Fatalf("at %d ms: %v", p.now, err)
			}
		}
	})
}
