package mesh

import (
	"context"
	"math"
	"time"

	"github.com/kvmesh/kvmesh/crdt"
	"github.com/kvmesh/kvmesh/transport"
	"github.com/kvmesh/kvmesh/tree"
)

// The load channel: beside the replicated claims, every node ships its own
// bookings per backend (the prefill it has queued there, its requests
// waiting for a first byte, its requests in flight) to every alive member,
// and routes on its own exact bookings plus the peers' last-known ones. A
// router alone sees only the prefill it sent; with N routers in front of
// the same engines each would underestimate every queue by about N times.
//
// It is last-value state, never joined into the claims: a message carries
// absolute figures, a lost one is corrected by the next (a snapshot of
// everything goes out every LoadRefresh), and a peer's part is dropped
// when it leaves, fails or falls silent for LoadMaxAge. Nothing is
// acknowledged or retransmitted. The transport does not order messages:
// each carries a sequence number, and a receiver keeps each backend's
// figures with the number of the message that set them, so the newest
// figures win whatever order messages arrive in (loadbook.go). The
// numbers grow across a node's restarts too (loadSeqBase), so a late
// message of a process that has since restarted is dropped rather than
// taken over the new one's.
//
// Goroutines: the load loop (loadLoop) reads the source every
// LoadInterval and sends what changed; received messages are applied by
// the receive loop. The table (loadtable.go) is pure and guarded by
// loadMu; the router reads its published sums without a lock.

// LoadSource is this node's own bookings, read by the load loop (the
// router implements it; see router.Router.LocalLoad).
type LoadSource interface {
	// LocalLoad calls fn with this node's bookings at every backend it
	// routes to, zero ones included: pending prefill units and requests
	// (sent, no first answer byte yet) and requests in flight.
	// written is every prompt unit this node has sent the backend to
	// compute, since it started (monotone).
	LocalLoad(fn func(id tree.BackendID, units, requests, inFlight, written int64))
	// Routed counts the requests this node has routed since it started.
	Routed() uint64
}

type loadSourceBox struct{ src LoadSource }

// SetLoadSource starts sharing src's bookings with the peers. Call it once
// the router exists (before or after Start); until then the node only
// receives its peers' bookings.
func (n *Node) SetLoadSource(src LoadSource) {
	if src == nil {
		n.loadSrc.Store(nil)
		return
	}
	n.loadSrc.Store(&loadSourceBox{src: src})
}

// PeerLoad returns the other nodes' bookings at backend id: pending prefill
// units, pending requests and requests in flight, each peer's weighted by
// how recently it was heard (1 while fresh, falling to 0 at LoadMaxAge).
// It implements the router's PeerLoad; it takes no lock.
func (n *Node) PeerLoad(id tree.BackendID) (units, requests, inFlight float64) {
	return n.loads.sum(id)
}

// PeerWritten is what the other nodes, present and departed, have sent
// backend id to compute (prompt units, since they started): with this
// node's own count, how far the backend's cache has turned over. It
// implements the router's PeerLoad; it takes no lock.
func (n *Node) PeerWritten(id tree.BackendID) float64 { return n.loads.writtenSum(id) }

// PeerListed says whether a peer routes to backend id: a load message of
// its current incarnation named it (a node's load messages name every
// backend it routes to, idle ones included). complete says whether every
// alive member on the load channel has been heard since it started; until
// then a false listed says nothing (the router's sweep of backends nobody
// lists waits for it).
func (n *Node) PeerListed(id tree.BackendID) (listed, complete bool) {
	n.loadMu.Lock()
	defer n.loadMu.Unlock()
	complete = true
	for _, s := range *n.loadOut.Load() {
		p := n.loads.peers[s.peer]
		if p == nil || p.inc == 0 {
			complete = false
			continue
		}
		if _, ok := p.written[id]; ok {
			listed = true
		}
	}
	return listed, complete
}

// BookingsChanged ships this node's bookings now (a request was
// dispatched or got its first byte), instead of at the load loop's next
// LoadInterval poll. It never blocks: when the last send was less than
// LoadMinGap ago, or another send is under way, it wakes the load loop,
// which sends once the gap has passed (calls in between merge). Otherwise
// it sends from the caller's goroutine (a few microseconds: read the
// bookings, encode the difference, queue it for each peer's sender), which
// saves the peers a goroutine hop's worth of staleness. It implements the
// router's PeerLoad.
func (n *Node) BookingsChanged() {
	if n.cfg.ShareLoad && n.loadMu.TryLock() {
		box := n.loadSrc.Load()
		sent := box != nil && time.Since(n.lp.lastSend) >= n.cfg.LoadMinGap
		if sent {
			n.publishLoad(box.src, n.nowMs())
			n.lp.lastSend = time.Now()
		}
		n.loadMu.Unlock()
		if sent {
			return
		}
	}
	n.wakeLoad()
}

// wakeLoad wakes the load loop for a send (without blocking).
func (n *Node) wakeLoad() {
	select {
	case n.loadKick <- struct{}{}:
	default:
	}
}

// MeshShare is this node's share of the requests the mesh routes (1 alone),
// from the routing rates the nodes report. The router scales what it
// counts itself (hot prefixes) by it to estimate the mesh's totals.
func (n *Node) MeshShare() float64 { return math.Float64frombits(n.loads.share.Load()) }

// loadSeqEpoch is where load sequence bases start counting: 2025-01-01
// UTC in Unix ms (a smaller base takes fewer bytes on the wire).
const loadSeqEpoch = 1_735_689_600_000

// loadSeqShift: a load session's sequence starts at its start time in ms
// since loadSeqEpoch, times 1 << loadSeqShift (loadSeqBase).
const loadSeqShift = 10

// loadSeqBase is the sequence number a load session started at nowMs
// (Unix ms) counts from: (nowMs - loadSeqEpoch) << 10. A session's numbers
// stay below the next session's base unless it sent 1,024 messages per
// millisecond of its life on average; a node sends at most a few (one
// booking message per LoadMinGap, 2 ms, and the lessons, lost marks and
// answers of the same tick), so a restarted node's numbers are above every
// earlier process's and a receiver tells a late message of the old process
// from the new one's (loadTable.apply). A clock before the epoch gives 0:
// sequences start at 1 as in earlier releases, and receivers switch to the
// new session after LoadFresh of silence.
//
// The cost is on the wire: in 2026 a base is about 2^46, a 7-byte uvarint
// (up to 2^49, that is until 2042; then 8 bytes, up to 2^56, for two
// thousand years more), where a count from 1 took 3 bytes for the first 2
// million messages and 4 up to 268 million: 3 to 4 bytes more per message.
// The base stays far inside uint64: 2^46 now, and at most 2^63 (the clock
// is capped at 2^53 ms, 285,000 years, past the epoch), from which a
// session would count for 290 million years at a thousand messages a
// second before reaching 2^64.
func loadSeqBase(nowMs int64) uint64 {
	d := min(max(nowMs-loadSeqEpoch, 0), 1<<53)
	return uint64(d) << loadSeqShift
}

// loadPublisher is the sending side's state, guarded by loadMu.
type loadPublisher struct {
	inc uint64
	// seq numbered the last message sent, counting from loadSeqBase of
	// the node's start.
	seq       uint64
	last      map[tree.BackendID]booking // what the peers were last told
	cur       []idBooking                // this tick's reading
	lazySince int64                      // ms: an unsent in-flight-only change since; 0 none
	lastSnap  int64
	lastSend  time.Time // wall clock of the last tick or wake-up send
	snaps     int
	namesLeft int // snapshots still to carry names after a join
	names     map[tree.BackendID]string
	out       loadMsg
	// lessonLast is what the peers were last told of each of this node's
	// lessons; lessonOut the lesson message being built (lesson.go).
	lessonLast map[tree.BackendID]lessonWire
	lessonOut  loadMsg
	lostOut    loadMsg // the lost message being built (lost.go)
	// answers and prompts: the answer and routed prompt totals last sent
	// (answers.go).
	answers, prompts totalsOut
	// routed counter at the last snapshot, when, and the moving rate.
	routed, routedAt int64
	rate             float64
}

type idBooking struct {
	id tree.BackendID
	b  booking
}

// loadLoop runs the load channel's sending side until ctx is done: a
// poll every LoadInterval, and a send as soon as the router says its
// bookings changed, but not sooner than LoadMinGap after the previous one
// (a busy node's changes of that span then share one message).
func (n *Node) loadLoop(ctx context.Context) {
	defer n.wg.Done()
	t := time.NewTicker(n.cfg.LoadInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-n.loadKick:
			n.loadMu.Lock()
			wait := n.cfg.LoadMinGap - time.Since(n.lp.lastSend)
			n.loadMu.Unlock()
			if wait > 0 {
				select {
				case <-ctx.Done():
					return
				case <-time.After(wait):
				}
			}
		}
		n.loadTick(n.nowMs())
	}
}

// loadTick sends this node's changed bookings (and a snapshot when one is
// due), forgets silent peers and republishes the peers' sums.
func (n *Node) loadTick(now int64) {
	n.loadMu.Lock()
	defer n.loadMu.Unlock()
	if box := n.loadSrc.Load(); box != nil && n.cfg.ShareLoad {
		n.publishLoad(box.src, now)
		n.lp.lastSend = time.Now()
	}
	n.loads.expire(now, nil)
	n.loads.publish(now, n.lp.rate)
}

// publishLoad compares the source's bookings with what the peers were
// last told and sends a delta of the difference: at once when pending
// prefill changed (what routing depends on), after LoadLazyDelay when only
// in-flight counts did (a request's end rarely travels alone). Every
// LoadRefresh, or at once when members joined, it sends a snapshot
// instead.
func (n *Node) publishLoad(src LoadSource, now int64) {
	n.publishLessons(src, n.publishBookings(src, now))
	n.publishLost(src)
	n.publishAnswers(src, now)
	n.publishPrompts(src, now)
}

// publishBookings is publishLoad's part for bookings; it reports whether
// it sent a snapshot with names (the first ones, every loadNamesEvery-th,
// and after members joined), after which every lesson is resent too.
func (n *Node) publishBookings(src LoadSource, now int64) (named bool) {
	p := &n.lp
	p.cur = p.cur[:0]
	src.LocalLoad(func(id tree.BackendID, units, requests, inFlight, written int64) {
		// The written count travels in loadWrittenStep steps; comparing it
		// in those steps keeps a sub-step change from making a message.
		w := clampU(written) / loadWrittenStep * loadWrittenStep
		p.cur = append(p.cur, idBooking{id: id, b: booking{units: clampU(units), requests: clampU(requests), inFlight: clampU(inFlight), written: w}})
	})
	joined := n.loadJoined.Swap(false)
	if joined || now-p.lastSnap >= n.cfg.LoadRefresh.Milliseconds() {
		n.sendLoadSnapshot(src, now, joined)
		return p.out.Names
	}
	urgent, lazy := false, false
	for _, c := range p.cur {
		old := p.last[c.id]
		if old == c.b {
			continue
		}
		if old.units != c.b.units || old.requests != c.b.requests || old.written != c.b.written {
			urgent = true
		} else {
			lazy = true
		}
	}
	if !urgent {
		if !lazy {
			p.lazySince = 0
			return false
		}
		if p.lazySince == 0 {
			p.lazySince = now
		}
		if now-p.lazySince < n.cfg.LoadLazyDelay.Milliseconds() {
			return false
		}
	}
	m := &p.out
	*m = loadMsg{Entries: m.Entries[:0]}
	for _, c := range p.cur {
		if p.last[c.id] != c.b {
			m.Entries = append(m.Entries, loadEntry{Idx: uint32(c.id), Units: c.b.units, Requests: c.b.requests, InFlight: c.b.inFlight, Written: c.b.written})
			p.last[c.id] = c.b
		}
	}
	p.lazySince = 0
	n.sendLoad(m)
	return false
}

// loadNamesEvery: every this many snapshots carry the backends' names, so
// that a peer that missed the first ones resolves indexes within seconds.
const loadNamesEvery = 10

// sendLoadSnapshot sends every nonzero booking, the incarnation and the
// routed counter; with names in the first snapshots, every
// loadNamesEvery-th and when members joined.
func (n *Node) sendLoadSnapshot(src LoadSource, now int64, joined bool) {
	p := &n.lp
	routed := int64(min(src.Routed(), math.MaxInt64))
	// Sampled as the receivers sample it: not over less than LoadRefresh/2
	// (a snapshot for a joining member follows the last within ms).
	sampleRouted(&p.routed, &p.routedAt, &p.rate, routed, now, n.cfg.LoadRefresh.Milliseconds()/2)
	if joined {
		// The member that joined may not accept our messages until it has
		// heard of us: the next few snapshots carry the names as well.
		p.namesLeft = 3
	}
	names := p.namesLeft > 0 || p.snaps < 3 || p.snaps%loadNamesEvery == 0
	p.namesLeft = max(p.namesLeft-1, 0)
	m := &p.out
	*m = loadMsg{Entries: m.Entries[:0], Snapshot: true, Names: names, Incarnation: p.inc, Routed: uint64(routed)}
	clear(p.last)
	for _, c := range p.cur {
		p.last[c.id] = c.b
		if c.b == (booking{}) && !names {
			continue
		}
		e := loadEntry{Idx: uint32(c.id), Units: c.b.units, Requests: c.b.requests, InFlight: c.b.inFlight, Written: c.b.written}
		if names {
			e.Name = n.backendName(c.id)
			if e.Name == "" {
				continue
			}
		}
		m.Entries = append(m.Entries, e)
	}
	p.lastSnap, p.lazySince = now, 0
	p.snaps++
	n.sendLoad(m)
}

// backendName is the registry name of a backend id, cached.
func (n *Node) backendName(id tree.BackendID) string {
	if s, ok := n.lp.names[id]; ok {
		return s
	}
	e, ok := n.ix.Backend(id)
	if !ok || e.Name == "" || len(e.Name) > crdt.MaxNameBytes {
		return ""
	}
	n.lp.names[id] = e.Name
	return e.Name
}

// sendLoad encodes m once and queues it for every alive member.
func (n *Node) sendLoad(m *loadMsg) {
	n.lp.seq++
	m.Seq = n.lp.seq
	data := appendLoad(make([]byte, 0, 16+24*len(m.Entries)), m)
	for _, s := range *n.loadOut.Load() {
		if !s.enqueueLoad(data) {
			n.m.loadDrops.WithLabelValues("queue_full").Inc()
		}
	}
}

// receiveLoad applies a load message from an alive member. It runs on the
// receive loop, which owns n.loadIn.
func (n *Node) receiveLoad(msg transport.Message) {
	if err := decodeLoad(msg.Data, &n.loadIn); err != nil {
		n.m.loadDrops.WithLabelValues("decode_error").Inc()
		n.log.Debug().Str("from", msg.From).Err(err).Msg("mesh: dropped an undecodable load message")
		return
	}
	if _, foreign := (*n.foreign.Load())[msg.From]; foreign && n.loadIn.Lost {
		// Its marks name keys of another scheme (compat.go): none would
		// match, and each would push a real mark out of the router's set.
		n.m.loadDrops.WithLabelValues(notPeerKeys).Inc()
		return
	}
	now := n.nowMs()
	n.loadMu.Lock()
	res := n.loads.apply(msg.From, &n.loadIn, len(msg.Data), now)
	if res == loadApplyOK {
		n.loads.publish(now, n.lp.rate)
		n.deliverLost()
	}
	newSession := n.loads.takeNamesWanted()
	n.loadMu.Unlock()
	if newSession {
		// The peer restarted (or is new): it knows none of our backend
		// indexes, and membership may not have noticed (a restart in place
		// keeps the name and address). Send it our names now, as for a
		// member that joined, rather than at the next loadNamesEvery-th
		// snapshot.
		n.loadJoined.Store(true)
		n.wakeLoad()
	}
	switch res {
	case loadApplyStale:
		n.m.loadDrops.WithLabelValues("stale").Inc()
	case loadApplyUnsynced:
		n.m.loadDrops.WithLabelValues("unsynced").Inc()
	}
}

// forgetLoad drops the load state of members that are no longer alive
// (left, failed, reaped); replication loop, from refresh.
func (n *Node) forgetLoad(alive map[string]struct{}) {
	n.loadMu.Lock()
	gone := n.loads.expire(n.nowMs(), alive)
	n.loadMu.Unlock()
	if len(gone) > 0 {
		n.log.Debug().Strs("peers", gone).Msg("mesh: dropped the bookings of departed members")
	}
}

// LoadView is the load channel's state in the admin view.
type LoadView struct {
	// Sharing says whether this node sends its own bookings (ShareLoad and
	// a load source set).
	Sharing     bool    `json:"sharing"`
	Incarnation uint64  `json:"incarnation"`
	Seq         uint64  `json:"seq"`
	Share       float64 `json:"share"` // this node's share of the mesh's routing
	// RoutedPerSecond is this node's own routing rate.
	RoutedPerSecond float64        `json:"routed_per_second"`
	Peers           []LoadPeerView `json:"peers"`
}

func (n *Node) loadView() LoadView {
	now := n.nowMs()
	n.loadMu.Lock()
	defer n.loadMu.Unlock()
	v := LoadView{Sharing: n.cfg.ShareLoad && n.loadSrc.Load() != nil, Incarnation: n.lp.inc, Seq: n.lp.seq,
		Share: n.MeshShare(), RoutedPerSecond: n.lp.rate}
	v.Peers = n.loads.view(now, func(id tree.BackendID) string {
		if e, ok := n.ix.Backend(id); ok {
			return e.Name
		}
		return ""
	})
	return v
}

func clampU(v int64) uint64 {
	if v <= 0 {
		return 0
	}
	return uint64(v)
}

// LoadSent counts the load-channel messages and bytes handed to the
// transport for the current members since they joined.
func (n *Node) LoadSent() (messages, bytes uint64) {
	for _, s := range *n.loadOut.Load() {
		messages += s.loadMsgs.Load()
		bytes += s.loadBytes.Load()
	}
	return messages, bytes
}
