package mesh

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/hashicorp/serf/serf"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/kvmesh/kvmesh/crdt"
	"github.com/kvmesh/kvmesh/transport"
	"github.com/kvmesh/kvmesh/tree"
)

// Transport moves whole messages between nodes. transport.QUIC and
// transport.MemEndpoint satisfy it. Message.From must be the sender's
// authenticated node name.
type Transport interface {
	Addr() string
	Send(ctx context.Context, addr string, data []byte) error
	Inbound() <-chan transport.Message
	Close() error
}

// Resolver looks up seed names; *net.Resolver satisfies it.
type Resolver interface {
	LookupHost(ctx context.Context, host string) ([]string, error)
	LookupSRV(ctx context.Context, service, proto, name string) (string, []*net.SRV, error)
}

// Deps are what a Node is built on.
type Deps struct {
	// Index is the node's claim index, shared with the router. Required.
	Index *tree.Index
	// Transport carries replication messages. Required. The Node owns it
	// from New on and closes it in Close.
	Transport Transport
	// MemberTransport, if set, carries serf's gossip instead of memberlist's
	// UDP+TCP transport on BindAddr:BindPort (in-process tests use
	// memberlist.MockNetwork or meshtest.MemberNetwork).
	MemberTransport memberlist.Transport
	// Resolver resolves seed names. Default net.DefaultResolver.
	Resolver Resolver
	// Logger gets structured logs: quiet at info, one line per decision at
	// debug. Default: disabled.
	Logger zerolog.Logger
	// Registerer gets the kvmesh_mesh_* and kvmesh_index_* metrics. nil: the
	// metrics are kept but not registered.
	Registerer prometheus.Registerer
	// Now is the wall clock. Default time.Now.
	Now func() time.Time
}

// ProtocolVersion is the replication protocol this node speaks, advertised
// in its serf tags; only members speaking the same one become peers.
const ProtocolVersion = crdt.WireVersion

// Serf tag keys.
const (
	TagQUIC     = "quic"  // the member's replication (QUIC) address
	TagProtocol = "proto" // the member's ProtocolVersion
	// TagPrecise is a digest of the engine streams the member consumes in
	// precise mode (Config.PreciseStreams); absent without precise mode.
	TagPrecise = "kvp"
	// TagKeys is how the member derives claim keys (tree.Config.KeyScheme:
	// the key version, block size and checkpoints). Members announcing another
	// scheme are not peers (compat.go).
	TagKeys = "keys"
	// TagCapacity is the most claims the member's index holds
	// (index.capacity). Members announcing another stay peers, with a
	// warning (compat.go).
	TagCapacity = "cap"
)

// Node is one kvmesh router node's side of the mesh: serf membership, the
// replication loop that ships the crdt Replica's messages to peers over the
// Transport, the receive loop, anti-entropy and metrics. It implements the
// router's Learner (Learn, Invalidate). Learn and Invalidate are safe for
// concurrent use, as are Members, StateDigest and the admin handler.
type Node struct {
	cfg      Config
	ix       *tree.Index
	tr       Transport
	memberTr memberlist.Transport
	resolver Resolver
	log      zerolog.Logger
	clock    func() time.Time
	m        *metrics

	// mu serializes every call on the Replica (it is not goroutine-safe).
	mu      sync.Mutex
	rep     *crdt.Replica
	inc     uint64     // rep's incarnation
	overlay bool       // rep relays: the mesh runs the overlay
	base    crdt.Stats // cumulative stats of replicas replaced by topology changes
	scratch tree.Chain // for queued learns
	seq     []int32    // 1, 2, 3, ...: Learn depths of a queued learn

	lq      learnQueue
	pending atomic.Int64  // learned claims not flushed yet
	kick    chan struct{} // wakes the replication loop for an early flush
	// dirty is set by everything that can give the Replica something to
	// send (learns, invalidations, received messages, peer changes); idle
	// flush ticks skip the Replica while it is clear.
	dirty atomic.Bool

	serf       atomic.Pointer[serf.Serf]
	serfEvents chan serf.Event
	known      atomic.Pointer[map[string]struct{}] // members we accept messages from
	view       atomic.Pointer[topologyView]        // for admin and metrics

	// scheme is this node's key scheme (TagKeys), from the Index; foreign
	// are the alive members announcing another one: their claim messages
	// are dropped (their load messages are taken).
	scheme  string
	foreign atomic.Pointer[map[string]struct{}]

	// Owned by the replication loop.
	senders   map[string]*sender
	peers     []string
	aeNext    int
	out       []crdt.Envelope
	lastFlush time.Time
	lastSent  int
	// warnedForeign: the foreign members warned about, with the scheme
	// each announced (a member that changes it is warned about again).
	warnedForeign map[string]string
	// warnedCapacity: the same for members of another index.capacity.
	warnedCapacity map[string]string

	// applyQ carries claim-protocol messages from the receive loop to the
	// apply loop; the receive loop closes it when it ends.
	applyQ chan transport.Message
	// Owned by the apply loop.
	lags []float64
	// ended holds the tombstones the last received message applied, for
	// OnEnded's function (precise.go); endedBuf is tellEnded's.
	ended    []tree.Claim
	endedBuf []tree.Key
	onEnded  atomic.Pointer[EndedFunc]
	// When each peer's last digest and last non-empty repair request were
	// answered (ms; exchangeDueLocked). Guarded by mu.
	lastDigest, lastRepairRequest map[string]int64
	// Owned by the receive loop.
	loadIn loadMsg

	// The load channel (load.go): this node's bookings out, the peers' in.
	loadSrc    atomic.Pointer[loadSourceBox]
	loadOut    atomic.Pointer[[]*sender] // every alive member's sender
	loadJoined atomic.Bool               // members joined: send a snapshot now
	loadKick   chan struct{}             // the router's bookings changed
	loadMu     sync.Mutex                // guards loads and lp
	loads      *loadTable
	lp         loadPublisher

	state     atomic.Int32    // 0 new, 1 started, 2 closed
	startMs   atomic.Int64    // when Start ran (ms; 0: not yet)
	ctx       context.Context // cancelled by Close; parent of every send
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	closeOnce sync.Once
	closeErr  error
}

// topologyView is what the replication loop last decided, for readers.
type topologyView struct {
	overlay bool
	peers   []string
}

// New builds a Node. It does not touch the network until Start.
func New(cfg Config, deps Deps) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if deps.Index == nil {
		return nil, errors.New("mesh: Deps.Index is required")
	}
	if deps.Transport == nil {
		return nil, errors.New("mesh: Deps.Transport is required")
	}
	if f := deps.Index.Config().ForgetRemovedMillis; f > 0 && f < 2*cfg.Replica.MaxTTL.Milliseconds() {
		// A removed backend's id may be given to a new name only once no
		// claim of it can be alive anywhere (a claim lives at most MaxTTL
		// past its stamp), with room for clocks and partitions.
		return nil, fmt.Errorf("mesh: the index forgets removed backends after %v, less than twice the longest claim life (replica max TTL %v): raise index.forget_removed or lower the TTL", time.Duration(f)*time.Millisecond, cfg.Replica.MaxTTL)
	}
	n := &Node{
		cfg:        cfg,
		ix:         deps.Index,
		tr:         deps.Transport,
		memberTr:   deps.MemberTransport,
		resolver:   deps.Resolver,
		log:        deps.Logger.With().Str("component", "mesh").Str("node", cfg.Name).Logger(),
		clock:      deps.Now,
		kick:       make(chan struct{}, 1),
		loadKick:   make(chan struct{}, 1),
		applyQ:     make(chan transport.Message, 256),
		serfEvents: make(chan serf.Event, 1024),
		senders:    make(map[string]*sender),

		lastDigest:        make(map[string]int64),
		lastRepairRequest: make(map[string]int64),
	}
	if n.resolver == nil {
		n.resolver = net.DefaultResolver
	}
	if n.clock == nil {
		n.clock = time.Now
	}
	n.lq.max = cfg.LearnQueue
	inc, err := n.lifeIncarnation(0)
	if err != nil {
		return nil, err
	}
	if n.lp.inc, err = newIncarnation(); err != nil {
		return nil, err
	}
	n.lp.seq = loadSeqBase(n.nowMs())
	n.lp.last = make(map[tree.BackendID]booking)
	n.lp.names = make(map[tree.BackendID]string)
	n.loads = newLoadTable(cfg.LoadFresh.Milliseconds(), cfg.LoadMaxAge.Milliseconds(), cfg.LoadRefresh.Milliseconds()/2,
		n.ix.Config().MaxBackends, n.ix.BackendByName)
	n.loadOut.Store(&[]*sender{})
	if n.rep, err = crdt.New(cfg.replicaConfig(false), n.ix, inc); err != nil {
		return nil, fmt.Errorf("mesh: %w", err)
	}
	n.inc = inc
	empty, none := map[string]struct{}{}, map[string]struct{}{}
	n.known.Store(&empty)
	n.foreign.Store(&none)
	n.scheme = n.ix.Config().KeyScheme()
	n.warnedForeign = make(map[string]string)
	n.warnedCapacity = make(map[string]string)
	n.view.Store(&topologyView{})
	if n.m, err = newMetrics(n, deps.Registerer); err != nil {
		return nil, fmt.Errorf("mesh: register metrics: %w", err)
	}
	return n, nil
}

// lifeIncarnation numbers a new life of the Replica (the node's start, or
// a topology change, which replaces it) above prev: ordered by start time
// (crdt.OrderedIncarnation), so peers tell a restart from a late message of
// an earlier life.
func (n *Node) lifeIncarnation(prev uint64) (uint64, error) {
	var b [2]byte
	if _, err := rand.Read(b[:]); err != nil {
		return 0, fmt.Errorf("mesh: incarnation: %w", err)
	}
	return crdt.OrderedIncarnation(n.clock().UnixMilli(), binary.LittleEndian.Uint16(b[:]), prev), nil
}

// newIncarnation returns a random non-zero incarnation: the load channel's
// session (a restart in place is told by it).
func newIncarnation() (uint64, error) {
	var b [8]byte
	for {
		if _, err := rand.Read(b[:]); err != nil {
			return 0, fmt.Errorf("mesh: incarnation: %w", err)
		}
		if v := binary.LittleEndian.Uint64(b[:]); v != 0 {
			return v, nil
		}
	}
}

// Name is the node's name.
func (n *Node) Name() string { return n.cfg.Name }

func (n *Node) nowMs() int64 { return n.clock().UnixMilli() }

// Start creates the serf member (binding the gossip port unless a
// MemberTransport was given), starts the replication and receive loops and,
// with Seeds, joins the mesh in the background, retrying until it
// succeeds. Everything runs until ctx is done or Close is called; Close must
// be called in either case.
func (n *Node) Start(ctx context.Context) error {
	if !n.state.CompareAndSwap(0, 1) {
		return errors.New("mesh: Start called twice or after Close")
	}
	s, err := n.createSerf()
	if err != nil {
		n.state.Store(2)
		return err
	}
	n.serf.Store(s)
	n.startMs.Store(n.nowMs())
	if n.cfg.GossipKey == "" {
		n.log.Warn().Msg("mesh: dev mode: gossip is not encrypted")
	}
	ctx, n.cancel = context.WithCancel(ctx)
	n.ctx = ctx
	n.wg.Add(4)
	go n.replicate(ctx)
	go n.receive(ctx)
	go n.applyLoop()
	go n.loadLoop(ctx)
	if len(n.cfg.Seeds) > 0 {
		n.wg.Add(1)
		go n.joinLoop(ctx)
	}
	n.log.Info().Str("quic", n.quicAddr()).Msg("mesh: started")
	return nil
}

// Leave leaves the mesh gracefully: members see this node as left (not
// failed) and stop replicating with it at once. Call it before Close on
// shutdown.
func (n *Node) Leave() error {
	s := n.serf.Load()
	if s == nil {
		return nil
	}
	if err := s.Leave(); err != nil {
		return fmt.Errorf("mesh: leave: %w", err)
	}
	n.log.Info().Msg("mesh: left")
	return nil
}

// Close stops every goroutine, shuts serf down (without a graceful leave:
// call Leave first for that) and closes the Transport. Safe to call more
// than once.
func (n *Node) Close() error {
	n.closeOnce.Do(func() {
		n.state.Store(2)
		if n.cancel != nil {
			n.cancel()
		}
		var errs []error
		if s := n.serf.Load(); s != nil {
			if err := s.Shutdown(); err != nil {
				errs = append(errs, fmt.Errorf("mesh: serf shutdown: %w", err))
			}
		}
		if err := n.tr.Close(); err != nil {
			errs = append(errs, fmt.Errorf("mesh: close transport: %w", err))
		}
		n.wg.Wait()
		n.closeErr = errors.Join(errs...)
	})
	return n.closeErr
}

// Learn records that backend holds every prefix of ch at ch.Learn's depths
// for ttl, and queues the changed claims for the peers. It implements the
// router's Learner. It never waits for the network and, while the replica
// is busy, does not wait for it either (the claims are queued and written
// within a flush interval); ch is not retained.
func (n *Node) Learn(ch *tree.Chain, backend tree.BackendID, ttl time.Duration) {
	if len(ch.Learn) == 0 || ttl <= 0 {
		return
	}
	if !n.mu.TryLock() {
		if n.lq.push(ch, backend, ttl.Milliseconds()) {
			n.m.learnsQueued.Inc()
			n.signal()
			return
		}
		n.mu.Lock() // the queue is full: wait for the replica
	}
	now := n.nowMs()
	d := n.drainLearnsLocked(now)
	d += n.learnLocked(ch, backend, ttl.Milliseconds(), now)
	n.mu.Unlock()
	n.noteChanges(d)
}

// Invalidate starts a new generation of a backend (it restarted with a cold
// cache, or was removed): none of its claims match any more, here at once
// and on every peer after the next flush. It implements the router's
// Learner.
func (n *Node) Invalidate(backend string, removed bool) {
	now := n.nowMs()
	n.mu.Lock()
	d := n.drainLearnsLocked(now)
	_, err := n.rep.Invalidate(backend, removed, now)
	n.mu.Unlock()
	n.noteChanges(d)
	if err != nil {
		n.log.Warn().Err(err).Str("backend", backend).Msg("mesh: invalidate failed")
		return
	}
	n.log.Debug().Str("backend", backend).Bool("removed", removed).Msg("mesh: backend invalidated")
	n.signal()
}

// learnLocked learns one chain and returns how many changes it made.
func (n *Node) learnLocked(ch *tree.Chain, b tree.BackendID, ttlMs, now int64) int64 {
	before := n.rep.Stats().LocalChanges
	n.rep.Learn(ch, b, ttlMs, now)
	return int64(n.rep.Stats().LocalChanges - before)
}

// drainLearnsLocked learns what Learn queued while the replica was busy.
func (n *Node) drainLearnsLocked(now int64) int64 {
	var d int64
	n.lq.drain(func(keys []tree.Key, b tree.BackendID, ttlMs int64) {
		for len(n.seq) < len(keys) {
			n.seq = append(n.seq, int32(len(n.seq)+1))
		}
		n.scratch.Keys, n.scratch.Learn = keys, n.seq[:len(keys)]
		d += n.learnLocked(&n.scratch, b, ttlMs, now)
	})
	n.scratch.Keys, n.scratch.Learn = nil, nil
	return d
}

// noteChanges counts learned changes and flushes early once FlushClaims
// are waiting.
func (n *Node) noteChanges(d int64) {
	if d <= 0 {
		return
	}
	n.dirty.Store(true)
	if n.pending.Add(d) >= int64(n.cfg.FlushClaims) {
		n.signal()
	}
}

// signal wakes the replication loop for a flush (without blocking).
func (n *Node) signal() {
	n.dirty.Store(true)
	select {
	case n.kick <- struct{}{}:
	default:
	}
}

// StateDigest is a fingerprint of the replicated state (claims, backend
// registry and eviction floor) at this moment: two nodes holding the same
// state have the same digest. It walks the whole index.
func (n *Node) StateDigest() string { return n.stateDigestAt(n.nowMs()) }

// stateDigestAt is StateDigest counting the claims live at time now, so
// that nodes compared at one instant agree even while claims expire.
func (n *Node) stateDigestAt(now int64) string {
	n.mu.Lock()
	d, reg := n.rep.Digest(now, nil)
	n.mu.Unlock()
	return fingerprint(d, reg, n.ix.Floor())
}

func fingerprint(buckets []uint64, reg uint64, floor int64) string {
	h := uint64(14695981039346656037)
	mix := func(v uint64) {
		for i := 0; i < 8; i++ {
			h ^= v & 0xff
			h *= 1099511628211
			v >>= 8
		}
	}
	for _, b := range buckets {
		mix(b)
	}
	mix(reg)
	mix(uint64(floor))
	return fmt.Sprintf("%016x", h)
}
