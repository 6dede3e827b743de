package mesh

import (
	"maps"
	"math"
	"sort"
	"sync/atomic"

	"github.com/kvmesh/kvmesh/tree"
)

// loadTable is what this node knows of its peers' bookings: per peer, the
// last value per backend, from the load channel. It is last-value state,
// lossy and regenerable (every peer re-sends everything in each snapshot),
// never joined into the claim state, and a peer's part is gone when the
// peer leaves or stays silent for maxAge.
//
// It is pure: time is an argument, the caller holds its lock. The sums
// the router reads per request are published into lock-free atomics by
// publish.
type loadTable struct {
	fresh, maxAge int64 // ms: a peer's weight is 1 up to fresh, 0 at maxAge
	// rateGap is the least span (ms) a routing-rate sample covers: a
	// snapshot sooner after the last sample's (members joining send one at
	// once) keeps the base, so one request in 2 ms never reads as 500/s.
	rateGap int64
	// resolve maps a backend name to this node's id; false for a backend
	// this node does not know (it is not routed to from here).
	resolve func(name string) (tree.BackendID, bool)

	peers map[string]*peerLoad
	// sums[id] is the age-weighted sum of the peers' bookings at backend
	// id, as last published; read without a lock.
	sums []peerSum
	// hi bounds the ids ever resolved: publish touches sums[:hi] only.
	hi int
	// share is this node's part of the requests the mesh routes (float64
	// bits), as last published.
	share atomic.Uint64
	// retired[id] holds what departed or restarted peers had written to
	// backend id, so that the mesh's written total never goes back.
	retired []uint64
	// departed holds, per forgotten peer, what of its incarnation went into
	// the retired totals: the same incarnation heard again (it was silent
	// for maxAge, or membership thought it failed) takes them back out
	// instead of counting its cumulative totals twice.
	departed map[string]*departedPeer

	// namedAt is when the first snapshot with names from any peer was
	// applied (ms; 0: none yet): Node.LessonsSettled.
	namedAt atomic.Int64

	scratch []float64
	// dirty says something publish reads changed since it last ran (a
	// message applied, a peer forgotten); until stableUntil (ms) no peer's
	// weight changes by age alone, and lastRate is the local rate it last
	// used. Together they let publish skip the sums when nothing moved: it
	// runs at every load tick (every LoadInterval, and at every booking
	// change), and recomputing every peer's maps each time was a tenth of
	// a core for eight nodes in one benchmark process.
	dirty       bool
	stableUntil int64
	lastRate    float64
	recomputed  uint64 // how many times publish recomputed the sums (tests)
	// answered is the published sum of the peers' answer totals
	// (answers.go); retiredAnswers holds departed and restarted peers'.
	answered       answerSums
	retiredAnswers answerTotals
	// lostIn holds the marks of the last applied lost message (lost.go),
	// until the receive loop hands them to the router.
	lostIn []lostIn
	// namesWanted says a peer started a new load session (it restarted, or
	// sent its first snapshot) since the receive loop last asked
	// (takeNamesWanted): it may not know this node's backend indexes, so
	// this node should send a snapshot with names soon.
	namesWanted bool
	// wscratch holds publish's written totals (exact, saturating).
	wscratch []uint64
}

// peerSum is the published sum of peers' bookings at one backend.
type peerSum struct {
	units, requests, inFlight atomic.Uint64              // float64 bits
	written                   atomic.Uint64              // units (not weighted: a count of what happened)
	lesson                    atomic.Pointer[lessonWire] // the peers' newest lesson (nil: none)
}

// peerLoad is one peer's last-known bookings.
type peerLoad struct {
	name string
	inc  uint64 // the incarnation of its last snapshot; 0 before one
	seq  uint64 // the highest applied message
	// start numbers the snapshot that began the session (inc); snapSeq
	// the newest snapshot applied, namesSeq the newest that carried names.
	start, snapSeq, namesSeq uint64
	heard                    int64 // ms: the last message applied (or when the entry was made)
	// names maps the peer's backend indexes to names, learnt from
	// snapshots with names, valid for inc; ids caches the names resolved
	// to this node's ids (a name this node does not know yet, because its
	// router registers its backends later, is tried again when used).
	names map[uint32]string
	ids   map[uint32]tree.BackendID
	book  map[tree.BackendID]peerBooking
	// written is the peer's cumulative units written per backend in this
	// incarnation (kept when its bookings go to zero).
	written map[tree.BackendID]uint64
	// answers is the peer's newest answer and routed prompt totals in this
	// incarnation.
	answers answerTotals
	// lessons is the peer's newest lesson per backend; fresh holds those
	// not published yet.
	lessons, fresh map[tree.BackendID]lessonWire

	routed, routedAt int64   // its routed counter at its last snapshot, and when
	rate             float64 // requests per second it routes (moving average)

	msgs, bytes   uint64 // received
	stale, unsync uint64 // dropped: an earlier session's or all superseded, or before a snapshot
	unknown       uint64 // entries naming a backend index or name not known here
	future        uint64 // lessons dropped for a stamp beyond lessonMaxAhead
}

// departedPeer is what a forgotten peer's incarnation added to the
// retired totals.
type departedPeer struct {
	inc     uint64
	written map[tree.BackendID]uint64
	answers answerTotals
}

// maxDeparted bounds loadTable.departed: a mesh has far fewer members. A
// record dropped to make room only means that peer's old totals, if its
// incarnation ever comes back, are counted twice (the bias this guards
// against), never that counts are lost.
const maxDeparted = 1024

// booking is one node's bookings at one backend, and what it has written
// there in all.
type booking struct{ units, requests, inFlight, written uint64 }

// newLoadTable makes a table: fresh and maxAge as in loadTable, rateGap the
// least span of a routing-rate sample (ms; LoadRefresh/2), maxBackends the
// index's registry size, resolve this node's backend names.
func newLoadTable(fresh, maxAge, rateGap int64, maxBackends int, resolve func(string) (tree.BackendID, bool)) *loadTable {
	t := &loadTable{fresh: fresh, maxAge: max(maxAge, fresh+1), rateGap: rateGap, resolve: resolve,
		peers: make(map[string]*peerLoad), sums: make([]peerSum, maxBackends), retired: make([]uint64, maxBackends)}
	t.share.Store(math.Float64bits(1))
	return t
}

// loadApplied says what apply did with a message.
type loadApplied uint8

const (
	loadApplyOK       loadApplied = iota
	loadApplyStale                // an earlier session's, or all of it superseded by later messages
	loadApplyUnsynced             // a delta before any snapshot of its incarnation
)

// apply records message m of size bytes from peer at now.
//
// Sequence numbers are ordered across a peer's restarts (each load session
// starts at loadSeqBase of its start time), and the transport does not
// order messages: a snapshot of another incarnation whose sequence is not
// above the last applied one is a late message of an earlier session,
// counted stale and ignored. Only when the current session has applied
// nothing for fresh ms is such a snapshot taken as a new session: the peer
// restarted with its clock stepped back, or runs an earlier release whose
// sequences start at 1. Then the switch waits at most fresh (LoadFresh) of
// silence. A message numbered below the snapshot that began the current
// session is an earlier session's too (only snapshots say their
// incarnation), and is dropped.
//
// Within a session the order of arrival does not matter: bookings are kept
// per backend with the sequence of the message that set them, so a delta
// overtaken by a later message still applies what that one did not change
// (applyBookings), and the totals (answers, lessons) merge by their own
// order. Before, a receiver applied only messages numbered above the last
// it applied, and over QUIC, where each message has a stream of its own,
// a lesson or answers message sent right after a bookings delta could
// overtake it and get that delta dropped. Only applied messages make a
// peer heard: one whose every message is dropped expires at maxAge and
// starts over.
func (t *loadTable) apply(peer string, m *loadMsg, size int, now int64) loadApplied {
	p := t.peers[peer]
	if p == nil {
		p = &peerLoad{name: peer, heard: now, book: make(map[tree.BackendID]peerBooking), written: make(map[tree.BackendID]uint64),
			lessons: make(map[tree.BackendID]lessonWire), fresh: make(map[tree.BackendID]lessonWire)}
		t.peers[peer] = p
	}
	t.dirty = true
	p.msgs++
	p.bytes += uint64(size)
	if m.Snapshot && m.Incarnation != p.inc {
		if p.inc != 0 && m.Seq <= p.seq && now-p.heard < t.fresh {
			p.stale++ // a late snapshot of an earlier session
			return loadApplyStale
		}
		// A new load session (the peer restarted, or this is its first
		// snapshot): its indexes start over, and it may not know ours.
		p.inc, p.seq, p.ids, p.names = m.Incarnation, 0, nil, nil
		p.start, p.snapSeq, p.namesSeq = m.Seq, 0, 0
		p.routedAt = 0
		clear(p.book)
		t.retire(p)
		t.readmit(p)
		t.namesWanted = true
	}
	switch {
	case p.inc == 0 || (!m.Snapshot && p.names == nil && len(m.Entries) > 0):
		p.unsync++
		return loadApplyUnsynced
	case m.Seq < p.start:
		p.stale++
		return loadApplyStale
	}
	switch {
	case m.Lessons:
		t.applyLessons(p, m, now)
	case m.Lost:
		t.applyLost(p, m)
	case m.Answers || m.Prompts:
		t.applyAnswers(p, m)
	default:
		if !t.applyBookings(p, m, now) {
			p.stale++
			return loadApplyStale
		}
	}
	p.heard = now
	p.seq = max(p.seq, m.Seq)
	return loadApplyOK
}

// eachEntry calls fn with each entry of m whose backend index resolves to
// an id of this node's, and counts the others as unknown.
func (t *loadTable) eachEntry(p *peerLoad, m *loadMsg, fn func(id tree.BackendID, e *loadEntry)) {
	for i := range m.Entries {
		e := &m.Entries[i]
		id, ok := t.idOf(p, e.Idx)
		if !ok {
			p.unknown++
			continue
		}
		fn(id, e)
	}
}

// idOf is this node's id for the peer's backend index idx.
func (t *loadTable) idOf(p *peerLoad, idx uint32) (tree.BackendID, bool) {
	if id, ok := p.ids[idx]; ok {
		return id, true
	}
	name, ok := p.names[idx]
	if !ok {
		return 0, false
	}
	id, ok := t.resolve(name)
	if !ok || int(id) >= len(t.sums) {
		return 0, false
	}
	p.ids[idx] = id
	t.hi = max(t.hi, int(id)+1)
	return id, true
}

// routedEWMA weighs a new rate sample against the moving average.
const routedEWMA = 0.5

// observeRouted updates a peer's routing rate from its routed counter.
func (t *loadTable) observeRouted(p *peerLoad, routed, now int64) {
	sampleRouted(&p.routed, &p.routedAt, &p.rate, routed, now, t.rateGap)
}

// sampleRouted moves a routing rate (a moving average) towards what the
// routed counter did since the base (base, baseAt ms) and makes the reading
// the new base; a reading less than gap ms after the base is left out and
// keeps it (one request over the 2 ms between two snapshots would read as
// 500/s). A counter that went back (a new session) or a clock that did
// only sets the base.
func sampleRouted(base, baseAt *int64, rate *float64, routed, now, gap int64) {
	if *baseAt > 0 && routed >= *base && now >= *baseAt {
		if now-*baseAt < max(gap, 1) {
			return
		}
		r := float64(routed-*base) * 1000 / float64(now-*baseAt)
		*rate += (r - *rate) * routedEWMA
	}
	*base, *baseAt = routed, now
}

// takeNamesWanted reports whether a peer started a new session since the
// last call (namesWanted), and clears it.
func (t *loadTable) takeNamesWanted() bool {
	w := t.namesWanted
	t.namesWanted = false
	return w
}

// addSat is a+b, or math.MaxUint64 where that would wrap: the totals it
// keeps (written counts, answers) only grow, and a wrapped one would go
// back. Summing saturated parts gives the saturated sum, so a total never
// decreases as its parts move (a peer retired, readmitted).
func addSat(a, b uint64) uint64 {
	if s := a + b; s >= a {
		return s
	}
	return math.MaxUint64
}

// retire moves a peer's written counts into the retired totals (it left,
// fell silent or restarted).
func (t *loadTable) retire(p *peerLoad) {
	for id, w := range p.written {
		if int(id) < len(t.retired) {
			t.retired[id] = addSat(t.retired[id], w)
		}
	}
	clear(p.written)
	t.retireAnswers(p)
}

// remember records what retiring p (being forgotten) adds to the retired
// totals, for readmit.
func (t *loadTable) remember(p *peerLoad) {
	if p.inc == 0 {
		return // it never sent a snapshot: nothing of it was counted
	}
	if t.departed == nil {
		t.departed = make(map[string]*departedPeer)
	}
	if _, ok := t.departed[p.name]; !ok && len(t.departed) >= maxDeparted {
		for name := range t.departed {
			delete(t.departed, name)
			break
		}
	}
	t.departed[p.name] = &departedPeer{inc: p.inc, written: maps.Clone(p.written), answers: p.answers}
}

// readmit takes a forgotten peer's totals back out of the retired ones
// when its first snapshot since shows the same incarnation: its cumulative
// counts are about to arrive again, and its entry holds them from now on.
// Another incarnation (it restarted meanwhile) leaves them retired.
func (t *loadTable) readmit(p *peerLoad) {
	d, ok := t.departed[p.name]
	if !ok {
		return
	}
	delete(t.departed, p.name)
	if d.inc != p.inc {
		return
	}
	for id, w := range d.written {
		if int(id) < len(t.retired) {
			t.retired[id] -= min(w, t.retired[id])
			p.written[id] = w
		}
	}
	t.retiredAnswers.sub(d.answers)
	p.answers = d.answers
}

// forget drops everything held for this node's backend ids, freed for new
// names (tree.Index.ForgetRemoved): the peers' bookings, written counts and
// lessons there, the retired and departed totals, the published lesson, and
// the resolutions of peers' indexes to them. A backend that takes the id
// starts from nothing, as a new one should.
func (t *loadTable) forget(ids []tree.BackendID) {
	for _, id := range ids {
		if int(id) >= len(t.sums) {
			continue
		}
		t.retired[id] = 0
		t.sums[id].lesson.Store(nil)
		for _, p := range t.peers {
			delete(p.book, id)
			delete(p.written, id)
			delete(p.lessons, id)
			delete(p.fresh, id)
			for idx, v := range p.ids {
				if v == id {
					delete(p.ids, idx)
				}
			}
		}
		for _, d := range t.departed {
			delete(d.written, id)
		}
	}
	t.dirty = true
}

// weight is how much a peer last heard at heard counts at now.
func (t *loadTable) weight(heard, now int64) float64 {
	age := now - heard
	switch {
	case age <= t.fresh:
		return 1
	case age >= t.maxAge:
		return 0
	}
	return float64(t.maxAge-age) / float64(t.maxAge-t.fresh)
}

// expire forgets peers silent for maxAge and peers not in keep (nil keeps
// all); it returns the names forgotten.
func (t *loadTable) expire(now int64, keep map[string]struct{}) []string {
	var gone []string
	for name, p := range t.peers {
		_, kept := keep[name]
		if now-p.heard >= t.maxAge || (keep != nil && !kept) {
			t.remember(p)
			t.retire(p)
			delete(t.peers, name)
			gone = append(gone, name)
			t.dirty = true
		}
	}
	return gone
}

// publish recomputes the weighted sums of every backend and this node's
// share of the mesh's routing, given its own rate, for the lock-free
// readers.
func (t *loadTable) publish(now int64, localRate float64) {
	if !t.dirty && localRate == t.lastRate && now < t.stableUntil {
		return // the sums published last are still exact
	}
	t.dirty, t.lastRate, t.stableUntil = false, localRate, t.stableAfter(now)
	t.recomputed++
	n := t.hi
	if cap(t.scratch) < 3*n {
		t.scratch = make([]float64, 3*n)
	}
	acc := t.scratch[:3*n]
	clear(acc)
	others := 0.0
	for _, p := range t.peers {
		w := t.weight(p.heard, now)
		if w == 0 {
			continue
		}
		others += w * p.rate
		for id, b := range p.book {
			acc[3*int(id)] += w * float64(b.units)
			acc[3*int(id)+1] += w * float64(b.requests)
			acc[3*int(id)+2] += w * float64(b.inFlight)
		}
	}
	// The written totals add up in integers, saturating (addSat), and are
	// converted once: a total saturates as a whole, so it does not go back
	// when a part moves into the retired ones, and no rounding depends on
	// the order of the peers' map.
	if cap(t.wscratch) < n {
		t.wscratch = make([]uint64, n)
	}
	written := t.wscratch[:n]
	copy(written, t.retired[:n])
	for _, p := range t.peers {
		for id, v := range p.written {
			if int(id) < n {
				written[id] = addSat(written[id], v)
			}
		}
	}
	t.publishLessons()
	t.publishAnswers()
	for i := range n {
		s := &t.sums[i]
		s.units.Store(math.Float64bits(acc[3*i]))
		s.requests.Store(math.Float64bits(acc[3*i+1]))
		s.inFlight.Store(math.Float64bits(acc[3*i+2]))
		s.written.Store(math.Float64bits(float64(written[i])))
	}
	share := 1.0
	if total := localRate + others; total > 0 {
		share = localRate / total
	}
	t.share.Store(math.Float64bits(share))
}

// stableAfter is the first ms after now at which a peer's weight changes
// by age alone: when the freshest-ending peer stops being fresh; now + 1
// while a peer's weight is already falling.
func (t *loadTable) stableAfter(now int64) int64 {
	until := int64(math.MaxInt64)
	for _, p := range t.peers {
		if now-p.heard > t.fresh {
			return now + 1
		}
		until = min(until, p.heard+t.fresh+1)
	}
	return until
}

// sum reads the published sums for backend id (safe without the lock).
func (t *loadTable) sum(id tree.BackendID) (units, requests, inFlight float64) {
	if int(id) >= len(t.sums) {
		return 0, 0, 0
	}
	s := &t.sums[id]
	return math.Float64frombits(s.units.Load()), math.Float64frombits(s.requests.Load()),
		math.Float64frombits(s.inFlight.Load())
}

// written reads the published total the peers (present and past) have
// written to backend id (safe without the lock).
func (t *loadTable) writtenSum(id tree.BackendID) float64 {
	if int(id) >= len(t.sums) {
		return 0
	}
	return math.Float64frombits(t.sums[id].written.Load())
}

// LoadPeerView is one peer's load-channel state in the admin view.
type LoadPeerView struct {
	Peer string `json:"peer"`
	// AgeMs is how long ago a message of the peer's was last applied (a
	// stale or unsynced one does not count); Weight is how much its
	// bookings count now (1 fresh, 0 silent).
	AgeMs  int64   `json:"age_ms"`
	Weight float64 `json:"weight"`
	Seq    uint64  `json:"seq"`
	// RoutedPerSecond is the peer's routing rate (from its snapshots).
	RoutedPerSecond float64 `json:"routed_per_second"`
	Messages        uint64  `json:"messages_received"`
	Bytes           uint64  `json:"bytes_received"`
	Stale           uint64  `json:"stale_dropped"`
	Unsynced        uint64  `json:"unsynced_dropped"`
	UnknownBackends uint64  `json:"unknown_backend_entries"`
	// FutureLessons counts the peer's lessons dropped for a stamp more than
	// a minute past this node's clock (its clock runs ahead).
	FutureLessons uint64 `json:"future_lessons_dropped"`
	// Answers, AnswerPromptTokens and AnswerCachedTokens are the peer's
	// answer totals as it last sent them (answers.go): the cached share of
	// its answers is AnswerCachedTokens / AnswerPromptTokens.
	Answers            uint64 `json:"answers"`
	AnswerPromptTokens uint64 `json:"answer_prompt_tokens"`
	AnswerCachedTokens uint64 `json:"answer_cached_tokens"`
	// PromptsRouted and PromptUnitsRouted are the peer's routed prompt
	// totals as it last sent them: its average prompt is their ratio.
	PromptsRouted     uint64 `json:"prompts_routed"`
	PromptUnitsRouted uint64 `json:"prompt_units_routed"`
	// Bookings are the peer's bookings by backend name.
	Bookings []BookingView `json:"bookings"`
}

// BookingView is one node's bookings at one backend.
type BookingView struct {
	Backend         string `json:"backend"`
	PendingUnits    uint64 `json:"pending_units"`
	PendingRequests uint64 `json:"pending_requests"`
	InFlight        uint64 `json:"in_flight"`
}

// view is the table as the admin endpoint shows it; name maps this node's
// backend ids to names.
func (t *loadTable) view(now int64, name func(tree.BackendID) string) []LoadPeerView {
	out := make([]LoadPeerView, 0, len(t.peers))
	for _, p := range t.peers {
		v := LoadPeerView{Peer: p.name, AgeMs: now - p.heard, Weight: t.weight(p.heard, now), Seq: p.seq,
			RoutedPerSecond: p.rate, Messages: p.msgs, Bytes: p.bytes, Stale: p.stale, Unsynced: p.unsync,
			UnknownBackends: p.unknown, FutureLessons: p.future, Answers: p.answers.N, AnswerPromptTokens: p.answers.Prompt,
			AnswerCachedTokens: p.answers.Cached, PromptsRouted: p.answers.Routed, PromptUnitsRouted: p.answers.RoutedUnits,
			Bookings: make([]BookingView, 0, len(p.book))}
		for id, b := range p.book {
			if b.zero() {
				continue // kept only for its sequence (applyBookings)
			}
			v.Bookings = append(v.Bookings, BookingView{Backend: name(id), PendingUnits: b.units,
				PendingRequests: b.requests, InFlight: b.inFlight})
		}
		sort.Slice(v.Bookings, func(i, j int) bool { return v.Bookings[i].Backend < v.Bookings[j].Backend })
		out = append(out, v)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Peer < out[j].Peer })
	return out
}
