package mesh

import (
	"encoding/binary"
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/kvmesh/kvmesh/crdt"
)

// Load channel wire format, version 1. Load messages share the transport
// with the claim protocol (whose messages are CBOR arrays and never start
// with loadMagic). A message is
//
//	loadMagic, version<<4 | flags, uvarint seq,
//	[snapshot: uvarint incarnation, uvarint routed],
//	uvarint n, n entries
//
// and an entry is
//
//	uvarint backend index, [names: uvarint length, name bytes],
//	uvarint pending units, uvarint pending requests, uvarint in-flight,
//	uvarint written units (cumulative since the sender started, in steps
//	of loadWrittenStep units: a few bytes even after days).
//
// The seq numbers every message the sender sends, of every kind, one more
// each time, from a base taken from the clock when it started
// (loadSeqBase), so that they grow across its restarts too; the
// incarnation (random) tells its load sessions apart.
//
// A lesson message (loadFlagLessons, never with the other flags) carries
// what the sender's router learned from its answers about backends' caches
// (lesson.go) instead of bookings:
//
//	loadMagic, version<<4 | loadFlagLessons, uvarint seq, uvarint n,
//	n x (uvarint backend index, uvarint stamp, uvarint scale, uvarint learned,
//	     uvarint doubt, uvarint doubt answers)
//
// with the stamp in ms, the capacity scale and the doubt worth in
// 1/loadFracOne steps, and the capacity learned with none configured in
// loadWrittenStep units. Lessons travel in messages of their own so that a
// node of an earlier release, which rejects the flag, drops only them and
// still takes the bookings. Its indexes are those of the sender's
// snapshots, and it shares their sequence.
//
// A lost message (loadFlagLost, alone) carries the prompts the sender's
// router found lost at a backend (router/lostshare.go) since its last one:
//
//	loadMagic, version<<4 | loadFlagLost, uvarint seq, uvarint n,
//	n x (uvarint backend index, 8 bytes prompt key (little-endian),
//	     uvarint age in ms)
//
// It travels alone for the same reason as lessons, with the same indexes
// and sequence.
//
// An answers message (loadFlagAnswers, alone) carries how many answers the
// sender's router has counted since it started, and their prompt and cached
// tokens (answers.go), so that every node averages the fleet's reuse over
// the mesh's answers as one router would:
//
//	loadMagic, version<<4 | loadFlagAnswers, uvarint seq,
//	uvarint answers, uvarint prompt tokens, uvarint cached tokens
//
// The flags nibble is full, so its flags are the two that may only travel
// alone, together (a combination no other message uses, which a node of an
// earlier release rejects, dropping only it). It shares the sequence.
//
// A prompts message (loadFlagPrompts, alone) carries how many prompts the
// sender's router has routed since it started and their units (answers.go),
// so that every node averages the mesh's prompt sizes as one router would:
//
//	loadMagic, version<<4 | loadFlagPrompts, uvarint seq,
//	uvarint prompts routed, uvarint prompt units routed
//
// Its flags are the answers message's and names: names outside a snapshot,
// which a node of an earlier release rejects, dropping only it.
//
// The backend index is the sender's own tree.BackendID; a snapshot with
// names (sent at a new incarnation, to new peers and now and then) tells
// the receiver which name each index stands for. The sender's name is not
// in the message: the transport authenticates it. A delta with one changed
// backend is about 20 bytes, 7 of them the sequence number (loadSeqBase).
const (
	loadMagic   = 'L'
	loadVersion = 1

	loadFlagSnapshot = 1 << 0 // the entries are every backend with bookings; carries incarnation and routed
	loadFlagNames    = 1 << 1 // entries carry backend names (snapshots only)
	loadFlagLessons  = 1 << 2 // the entries are lessons, not bookings (alone)
	loadFlagLost     = 1 << 3 // the entries are lost marks (alone)
	loadFlagsKnown   = loadFlagSnapshot | loadFlagNames | loadFlagLessons | loadFlagLost
	// loadFlagAnswers marks an answers message: no entries, the sender's
	// answer totals. Both alone-flags at once: the nibble has no bit left.
	loadFlagAnswers = loadFlagLessons | loadFlagLost
	// loadFlagPrompts marks a prompts message: no entries, the sender's
	// routed prompt totals.
	loadFlagPrompts = loadFlagNames | loadFlagAnswers
)

// Decoder limits: a peer cannot make a node allocate much or loop long.
const (
	// maxLoadEntries is tree's largest registry (MaxBackends is a uint16).
	maxLoadEntries = 1 << 16
	// maxLoadValue bounds every booking figure: far above any real queue
	// (2^48 prompt units), far below float64's exact integers.
	maxLoadValue = 1 << 48
	// loadWrittenStep is the resolution of the written counters on the
	// wire: far below a backend's cache (hundreds of thousands of tokens).
	loadWrittenStep = 64
	// loadFracOne is 1.0 for the scale and doubt figures of a lesson.
	loadFracOne = 1 << 16
	// maxLessonScale bounds a capacity scale on the wire (the router keeps
	// it in [0.02, 50]).
	maxLessonScale = 64 * loadFracOne
)

// loadMsg is one decoded load message.
type loadMsg struct {
	Seq      uint64
	Snapshot bool
	Names    bool
	// Incarnation and Routed are set in snapshots: the sender's load
	// session (new at every start) and how many requests it has routed.
	Incarnation uint64
	Routed      uint64
	// Lessons says the entries are lessons (Idx and Lesson only).
	Lessons bool
	// Lost says the entries are lost marks (Idx, Key and Age only).
	Lost bool
	// Answers says the message carries Answered's answer totals, Prompts
	// its routed prompt totals (and no entries).
	Answers  bool
	Prompts  bool
	Answered answerTotals
	Entries  []loadEntry
}

// answerTotals counts a router's answers since it started: how many, and
// their prompt and cached tokens (usage); and the prompts it has routed
// (first attempts) and their units.
type answerTotals struct{ N, Prompt, Cached, Routed, RoutedUnits uint64 }

// loadEntry is one backend's bookings at the sender.
type loadEntry struct {
	Idx  uint32
	Name string // with loadFlagNames only
	// Units and Requests are the sender's pending prefill (uncached prompt
	// units, and how many requests) at the backend; InFlight its requests
	// outstanding there.
	Units, Requests, InFlight uint64
	// Written counts every prompt unit the sender has sent the backend to
	// compute (its bookings' sum since it started): how much the backend's
	// cache has turned over because of this sender.
	Written uint64
	// Lesson is the sender's lesson about the backend (lesson messages
	// only).
	Lesson lessonWire
	// Key and Age are a lost mark (lost messages only): the prompt key the
	// sender found lost at the backend, and how long ago (ms).
	Key, Age uint64
}

// loadEntryBytes is the size of a loadEntry in memory, which bounds what
// decoding allocates (decodeLoad; TestLoadEntrySize keeps it true).
const loadEntryBytes = 112

// lessonWire is a lesson in wire units (see the format above).
type lessonWire struct {
	Stamp, Scale, Learned, Doubt, DoubtN uint64
}

// isLoadMessage tells a load message from a claim-protocol message.
func isLoadMessage(data []byte) bool { return len(data) > 0 && data[0] == loadMagic }

// appendLoad encodes m after dst.
func appendLoad(dst []byte, m *loadMsg) []byte {
	flags := byte(0)
	if m.Snapshot {
		flags |= loadFlagSnapshot
		if m.Names {
			flags |= loadFlagNames
		}
	}
	switch {
	case m.Lessons:
		flags = loadFlagLessons
	case m.Lost:
		flags = loadFlagLost
	case m.Answers:
		flags = loadFlagAnswers
	case m.Prompts:
		flags = loadFlagPrompts
	}
	dst = append(dst, loadMagic, loadVersion<<4|flags)
	dst = binary.AppendUvarint(dst, m.Seq)
	if m.Prompts {
		dst = binary.AppendUvarint(dst, min(m.Answered.Routed, maxLoadValue))
		return binary.AppendUvarint(dst, min(m.Answered.RoutedUnits, maxLoadValue))
	}
	if m.Answers {
		a := &m.Answered
		dst = binary.AppendUvarint(dst, min(a.N, maxLoadValue))
		dst = binary.AppendUvarint(dst, min(a.Prompt, maxLoadValue))
		return binary.AppendUvarint(dst, min(a.Cached, a.Prompt, maxLoadValue))
	}
	if m.Lost {
		dst = binary.AppendUvarint(dst, uint64(len(m.Entries)))
		for i := range m.Entries {
			e := &m.Entries[i]
			dst = binary.AppendUvarint(dst, uint64(e.Idx))
			dst = binary.LittleEndian.AppendUint64(dst, e.Key)
			dst = binary.AppendUvarint(dst, min(e.Age, maxLoadValue))
		}
		return dst
	}
	if m.Lessons {
		dst = binary.AppendUvarint(dst, uint64(len(m.Entries)))
		for i := range m.Entries {
			l := &m.Entries[i].Lesson
			dst = binary.AppendUvarint(dst, uint64(m.Entries[i].Idx))
			dst = binary.AppendUvarint(dst, min(l.Stamp, maxLoadValue))
			dst = binary.AppendUvarint(dst, min(l.Scale, maxLessonScale))
			dst = binary.AppendUvarint(dst, min(l.Learned/loadWrittenStep, maxLoadValue))
			dst = binary.AppendUvarint(dst, min(l.Doubt, loadFracOne))
			dst = binary.AppendUvarint(dst, min(l.DoubtN, maxLoadValue))
		}
		return dst
	}
	if m.Snapshot {
		dst = binary.AppendUvarint(dst, m.Incarnation)
		dst = binary.AppendUvarint(dst, m.Routed)
	}
	dst = binary.AppendUvarint(dst, uint64(len(m.Entries)))
	for i := range m.Entries {
		e := &m.Entries[i]
		dst = binary.AppendUvarint(dst, uint64(e.Idx))
		if flags&loadFlagNames != 0 {
			dst = binary.AppendUvarint(dst, uint64(len(e.Name)))
			dst = append(dst, e.Name...)
		}
		dst = binary.AppendUvarint(dst, min(e.Units, maxLoadValue))
		dst = binary.AppendUvarint(dst, min(e.Requests, maxLoadValue))
		dst = binary.AppendUvarint(dst, min(e.InFlight, maxLoadValue))
		dst = binary.AppendUvarint(dst, min(e.Written/loadWrittenStep, maxLoadValue))
	}
	return dst
}

var errLoadTruncated = errors.New("mesh: load message truncated")

// decodeLoad decodes data into m, reusing m.Entries. Anything malformed is
// an error and leaves m unusable. Nothing in data can make it allocate
// more than about 24 times len(data): the entries are allocated once, for
// the count the message claims, which is checked against the bytes left
// first, and a loadEntry takes loadEntryBytes (112) where the smallest
// entry on the wire takes 5 (a lost mark 10): 22.4 times; the names are
// copied, at most len(data) more.
func decodeLoad(data []byte, m *loadMsg) error {
	if len(data) < 2 || data[0] != loadMagic {
		return errors.New("mesh: not a load message")
	}
	if v := data[1] >> 4; v != loadVersion {
		return fmt.Errorf("mesh: load message version %d, want %d", v, loadVersion)
	}
	flags := data[1] & 0x0f
	if flags&^loadFlagsKnown != 0 {
		return fmt.Errorf("mesh: load message has unknown flags %#x", flags)
	}
	prompts := flags == loadFlagPrompts
	if !prompts && flags&loadFlagNames != 0 && flags&loadFlagSnapshot == 0 {
		return errors.New("mesh: load message carries names outside a snapshot")
	}
	answers := flags == loadFlagAnswers
	if !answers && !prompts && flags&loadFlagLessons != 0 && flags != loadFlagLessons {
		return fmt.Errorf("mesh: lesson message has other flags %#x", flags)
	}
	if !answers && !prompts && flags&loadFlagLost != 0 && flags != loadFlagLost {
		return fmt.Errorf("mesh: lost message has other flags %#x", flags)
	}
	r := loadReader{b: data[2:]}
	*m = loadMsg{Entries: m.Entries[:0], Answers: answers, Prompts: prompts}
	if !answers && !prompts {
		m.Snapshot, m.Names = flags&loadFlagSnapshot != 0, flags&loadFlagNames != 0
		m.Lessons, m.Lost = flags&loadFlagLessons != 0, flags&loadFlagLost != 0
	}
	m.Seq = r.uvarint()
	if m.Prompts {
		a := &m.Answered
		a.Routed, a.RoutedUnits = r.value(), r.value()
		switch {
		case r.err != nil:
			return r.err
		case len(r.b) != 0:
			return fmt.Errorf("mesh: %d bytes after the prompts message", len(r.b))
		}
		return nil
	}
	if m.Answers {
		a := &m.Answered
		a.N, a.Prompt, a.Cached = r.value(), r.value(), r.value()
		switch {
		case r.err != nil:
			return r.err
		case a.Cached > a.Prompt:
			return fmt.Errorf("mesh: answers message has %d cached of %d prompt tokens", a.Cached, a.Prompt)
		case len(r.b) != 0:
			return fmt.Errorf("mesh: %d bytes after the answers message", len(r.b))
		}
		return nil
	}
	if m.Snapshot {
		m.Incarnation = r.uvarint()
		m.Routed = r.uvarint()
	}
	n := r.uvarint()
	if r.err != nil {
		return r.err
	}
	// Every entry takes at least 5 bytes (a lost mark 10): a count beyond
	// that is a lie, caught before anything is allocated for it.
	least := uint64(5)
	if m.Lost {
		least = 10
	}
	if n > maxLoadEntries || n > uint64(len(r.b))/least {
		return fmt.Errorf("mesh: load message claims %d entries in %d bytes", n, len(r.b))
	}
	if cap(m.Entries) < int(n) {
		m.Entries = make([]loadEntry, 0, n) // once, and no larger than the count
	}
	for i := uint64(0); i < n; i++ {
		var e loadEntry
		idx := r.uvarint()
		if idx >= maxLoadEntries {
			return fmt.Errorf("mesh: load entry backend index %d out of range", idx)
		}
		e.Idx = uint32(idx)
		if m.Lost {
			e.Key = r.fixed64()
			e.Age = r.value()
			if r.err != nil {
				return r.err
			}
			m.Entries = append(m.Entries, e)
			continue
		}
		if m.Lessons {
			l := &e.Lesson
			l.Stamp = r.value()
			l.Scale = r.bounded(maxLessonScale, "capacity scale")
			l.Learned = r.value() * loadWrittenStep
			l.Doubt = r.bounded(loadFracOne, "doubt worth")
			l.DoubtN = r.value()
			if r.err != nil {
				return r.err
			}
			m.Entries = append(m.Entries, e)
			continue
		}
		if m.Names {
			e.Name = r.name()
		}
		e.Units, e.Requests, e.InFlight, e.Written = r.value(), r.value(), r.value(), r.value()*loadWrittenStep
		if r.err != nil {
			return r.err
		}
		m.Entries = append(m.Entries, e)
	}
	if len(r.b) != 0 {
		return fmt.Errorf("mesh: %d bytes after the load message", len(r.b))
	}
	return nil
}

// loadReader reads uvarints, keeping the first error.
type loadReader struct {
	b   []byte
	err error
}

func (r *loadReader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, k := binary.Uvarint(r.b)
	if k <= 0 {
		if k == 0 {
			r.err = errLoadTruncated
		} else {
			r.err = errors.New("mesh: load message has an overlong varint")
		}
		return 0
	}
	r.b = r.b[k:]
	return v
}

// fixed64 reads 8 little-endian bytes.
func (r *loadReader) fixed64() uint64 {
	if r.err != nil {
		return 0
	}
	if len(r.b) < 8 {
		r.err = errLoadTruncated
		return 0
	}
	v := binary.LittleEndian.Uint64(r.b)
	r.b = r.b[8:]
	return v
}

func (r *loadReader) value() uint64 {
	v := r.uvarint()
	if r.err == nil && v > maxLoadValue {
		r.err = fmt.Errorf("mesh: load figure %d out of range", v)
	}
	return v
}

// bounded reads a value that must not exceed limit.
func (r *loadReader) bounded(limit uint64, what string) uint64 {
	v := r.uvarint()
	if r.err == nil && v > limit {
		r.err = fmt.Errorf("mesh: lesson %s %d out of range (limit %d)", what, v, limit)
	}
	return v
}

func (r *loadReader) name() string {
	n := r.uvarint()
	if r.err != nil {
		return ""
	}
	if n == 0 || n > crdt.MaxNameBytes || n > uint64(len(r.b)) {
		r.err = fmt.Errorf("mesh: load entry name of %d bytes (have %d, limit %d)", n, len(r.b), crdt.MaxNameBytes)
		return ""
	}
	s := r.b[:n]
	if !utf8.Valid(s) {
		r.err = errors.New("mesh: load entry name is not UTF-8")
		return ""
	}
	r.b = r.b[n:]
	return string(s)
}
