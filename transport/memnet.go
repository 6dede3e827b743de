package transport

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand"
	"sync"
	"time"
)

// MemNetwork is an in-memory network for in-process multi-node tests, in the
// spirit of memberlist's MockNetwork, with fault injection that can be
// changed at any time from any goroutine:
//
//   - SetDropProbability: each Send is lost with probability p;
//   - SetDuplicateProbability: a Send that is not lost is delivered twice
//     with probability p;
//   - SetDelay: each copy is delivered after a uniformly random delay in
//     [min, max], so messages get reordered;
//   - Partition / Heal: only endpoints in the same group can talk;
//   - MemEndpoint.Close and Endpoint again: a node killed and restarted.
//
// All random choices come from one generator seeded by NewMemNetwork's seed
// and are made inside Send, so a test that sends in a fixed order sees the
// same drops, duplicates and delays on every run (delivery order under
// delays still depends on the timers firing).
//
// Differences from QUIC that tests should know: Send to an address with no
// endpoint fails at once with ErrUnreachable (QUIC would fail its dial);
// partitioned or dropped messages vanish silently, as on a real network; a
// full Inbound queue drops the message (QUIC pushes back on the sender
// instead). Every copy is counted (Stats), so
//
//	Sent + Duplicated == Delivered + Dropped + InFlight.
type MemNetwork struct {
	mu        sync.Mutex
	rng       *rand.Rand
	endpoints map[string]*MemEndpoint
	closed    bool

	dropP, dupP        float64
	minDelay, maxDelay time.Duration
	groups             map[string]int // endpoint name -> group; nil: no partition
	queueLen           int
	maxMsg             int

	stats   MemStats
	pending sync.WaitGroup // delayed copies not yet delivered or cancelled
}

// MemStats counts what a MemNetwork did with the messages sent on it. Counts
// are of copies: a duplicated message is one Sent, one Duplicated and two
// Delivered.
type MemStats struct {
	Sent, SentBytes             uint64 // Sends accepted (returned nil)
	Delivered, DeliveredBytes   uint64 // copies placed on an Inbound
	Duplicated, DuplicatedBytes uint64 // extra copies made
	Dropped, DroppedBytes       uint64 // copies lost, for one of these reasons:

	DroppedRandom    uint64 // SetDropProbability
	DroppedPartition uint64 // sender and receiver in different groups
	DroppedClosed    uint64 // receiver closed before delivery (or network closed)
	DroppedOverflow  uint64 // receiver's Inbound queue full
}

// MemEndpoint is one node's attachment to a MemNetwork. Its address is its
// name. It has the same methods as QUIC.
type MemEndpoint struct {
	net     *MemNetwork
	name    string
	inbound chan Message
	closed  bool                // guarded by net.mu
	timers  map[*time.Timer]int // copies on their way here -> size; guarded by net.mu
}

// NewMemNetwork returns a network with no faults: every message is
// delivered at once. seed drives every random choice.
func NewMemNetwork(seed int64) *MemNetwork {
	return &MemNetwork{
		rng:       rand.New(rand.NewSource(seed)),
		endpoints: make(map[string]*MemEndpoint),
		queueLen:  1024,
		maxMsg:    DefaultMaxMessageBytes,
	}
}

// Endpoint attaches a node named name (also its address). The name must not
// be in use by an open endpoint; a closed one can be re-created, which gives
// a new Inbound channel (a restarted node).
func (n *MemNetwork) Endpoint(name string) (*MemEndpoint, error) {
	if name == "" {
		return nil, errors.New("transport: endpoint name is empty")
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return nil, ErrClosed
	}
	if _, ok := n.endpoints[name]; ok {
		return nil, fmt.Errorf("transport: endpoint %q already exists", name)
	}
	ep := &MemEndpoint{
		net:     n,
		name:    name,
		inbound: make(chan Message, n.queueLen),
		timers:  make(map[*time.Timer]int),
	}
	n.endpoints[name] = ep
	return ep, nil
}

// SetDropProbability makes each later Send lost with probability p (0..1).
func (n *MemNetwork) SetDropProbability(p float64) {
	n.mu.Lock()
	n.dropP = clamp01(p)
	n.mu.Unlock()
}

// SetDuplicateProbability makes each later delivered Send arrive twice with
// probability p (0..1).
func (n *MemNetwork) SetDuplicateProbability(p float64) {
	n.mu.Lock()
	n.dupP = clamp01(p)
	n.mu.Unlock()
}

// SetDelay delays each later copy by a uniformly random duration in
// [min, max]. SetDelay(0, 0) delivers synchronously inside Send.
func (n *MemNetwork) SetDelay(min, max time.Duration) {
	min = maxDur(min, 0)
	n.mu.Lock()
	n.minDelay, n.maxDelay = min, maxDur(max, min)
	n.mu.Unlock()
}

// SetInboundQueueLen sets the Inbound capacity of endpoints created later
// (default 1024).
func (n *MemNetwork) SetInboundQueueLen(l int) {
	n.mu.Lock()
	n.queueLen = max(l, 0)
	n.mu.Unlock()
}

// SetMaxMessageBytes sets the largest message Send accepts (default 16 MiB,
// as QUIC's default).
func (n *MemNetwork) SetMaxMessageBytes(b int) {
	n.mu.Lock()
	n.maxMsg = b
	n.mu.Unlock()
}

// Partition splits the network: from now on only endpoints named in the same
// group can reach each other; endpoints named in no group reach nobody (but
// themselves). Copies already in flight still arrive. It replaces any
// earlier partition.
func (n *MemNetwork) Partition(groups ...[]string) {
	g := make(map[string]int)
	for i, group := range groups {
		for _, name := range group {
			g[name] = i
		}
	}
	n.mu.Lock()
	n.groups = g
	n.mu.Unlock()
}

// Heal removes the partition.
func (n *MemNetwork) Heal() {
	n.mu.Lock()
	n.groups = nil
	n.mu.Unlock()
}

// Stats returns a snapshot of the counters.
func (n *MemNetwork) Stats() MemStats {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.stats
}

// InFlight returns how many delayed copies are still on their way.
func (n *MemNetwork) InFlight() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	k := 0
	for _, ep := range n.endpoints {
		k += len(ep.timers)
	}
	return k
}

// Close closes every endpoint and cancels every copy in flight (counted as
// DroppedClosed). No goroutine or timer survives it.
func (n *MemNetwork) Close() error {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil
	}
	n.closed = true
	for _, ep := range n.endpoints {
		n.closeEndpointLocked(ep)
	}
	n.mu.Unlock()
	n.pending.Wait() // timers that had already fired
	return nil
}

// Addr returns the endpoint's name, which is its address.
func (e *MemEndpoint) Addr() string { return e.name }

// Inbound returns the messages sent to this endpoint; closed by Close.
func (e *MemEndpoint) Inbound() <-chan Message { return e.inbound }

// Close detaches the endpoint (a killed node): its Inbound is closed and
// copies on their way to it are dropped. Its name can be used again.
func (e *MemEndpoint) Close() error {
	n := e.net
	n.mu.Lock()
	n.closeEndpointLocked(e)
	n.mu.Unlock()
	return nil
}

// Send hands a copy of data to the network. It returns ErrUnreachable if no
// endpoint has address addr, ErrClosed if e is closed, ErrMessageTooLarge
// over the limit, ctx's error if ctx is already done; otherwise nil, even if
// the fault settings then lose the message.
func (e *MemEndpoint) Send(ctx context.Context, addr string, data []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	n := e.net
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(data) > n.maxMsg {
		return fmt.Errorf("%w: %d bytes, limit %d", ErrMessageTooLarge, len(data), n.maxMsg)
	}
	if e.closed {
		return ErrClosed
	}
	dst := n.endpoints[addr]
	if dst == nil {
		return fmt.Errorf("%w: %q", ErrUnreachable, addr)
	}
	size := uint64(len(data))
	n.stats.Sent++
	n.stats.SentBytes += size
	if !n.connectedLocked(e.name, addr) {
		n.dropLocked(size, &n.stats.DroppedPartition)
		return nil
	}
	if n.dropP > 0 && n.rng.Float64() < n.dropP {
		n.dropLocked(size, &n.stats.DroppedRandom)
		return nil
	}
	copies := 1
	if n.dupP > 0 && n.rng.Float64() < n.dupP {
		copies = 2
		n.stats.Duplicated++
		n.stats.DuplicatedBytes += size
	}
	for range copies {
		// Each copy gets its own buffer: the sender may reuse data, and
		// receivers may modify what they get.
		msg := Message{From: e.name, Data: bytes.Clone(data)}
		if msg.Data == nil {
			msg.Data = []byte{}
		}
		d := n.minDelay
		if n.maxDelay > n.minDelay {
			d += time.Duration(n.rng.Int63n(int64(n.maxDelay-n.minDelay) + 1))
		}
		if d == 0 {
			n.deliverLocked(dst, msg)
			continue
		}
		n.pending.Add(1)
		var t *time.Timer
		// The callback takes n.mu, which we hold until t is recorded.
		t = time.AfterFunc(d, func() {
			defer n.pending.Done()
			n.mu.Lock()
			defer n.mu.Unlock()
			if _, ok := dst.timers[t]; !ok {
				return // cancelled by Close after it had fired
			}
			delete(dst.timers, t)
			n.deliverLocked(dst, msg)
		})
		dst.timers[t] = len(msg.Data)
	}
	return nil
}

func (n *MemNetwork) connectedLocked(from, to string) bool {
	if n.groups == nil || from == to {
		return true
	}
	gf, okf := n.groups[from]
	gt, okt := n.groups[to]
	return okf && okt && gf == gt
}

func (n *MemNetwork) deliverLocked(dst *MemEndpoint, msg Message) {
	size := uint64(len(msg.Data))
	if dst.closed {
		n.dropLocked(size, &n.stats.DroppedClosed)
		return
	}
	select {
	case dst.inbound <- msg:
		n.stats.Delivered++
		n.stats.DeliveredBytes += size
	default:
		n.dropLocked(size, &n.stats.DroppedOverflow)
	}
}

func (n *MemNetwork) dropLocked(size uint64, reason *uint64) {
	*reason++
	n.stats.Dropped++
	n.stats.DroppedBytes += size
}

// closeEndpointLocked detaches ep, stops the timers of copies headed to it
// and closes its Inbound. Idempotent.
func (n *MemNetwork) closeEndpointLocked(ep *MemEndpoint) {
	if ep.closed {
		return
	}
	ep.closed = true
	if n.endpoints[ep.name] == ep {
		delete(n.endpoints, ep.name)
	}
	for t, size := range ep.timers {
		delete(ep.timers, t)
		// A timer that already fired is waiting for n.mu; it will find
		// itself gone from ep.timers and only call pending.Done.
		if t.Stop() {
			n.pending.Done()
		}
		n.dropLocked(uint64(size), &n.stats.DroppedClosed)
	}
	close(ep.inbound)
}

func clamp01(p float64) float64 { return min(max(p, 0), 1) }

func maxDur(a, b time.Duration) time.Duration {
	if a > b {
		return a
	}
	return b
}
