package mesh

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/kvmesh/kvmesh/crdt"
	"github.com/kvmesh/kvmesh/transport"
)

// GossipKeyBytes is the length of a gossip encryption key: 32 bytes select
// AES-256-GCM in memberlist, and `serf keygen` makes keys of this size.
const GossipKeyBytes = 32

// Config configures a Node. Start from DefaultConfig, set Name, Seeds and
// GossipKey (or DevMode), and leave the rest unless a measurement says
// otherwise. Every node of a mesh should use the same replication settings
// (Replica, RelayThreshold, RingNeighbours).
type Config struct {
	// Name is this node's name, unique in the mesh. It is the serf node name
	// and must equal the node name in this node's QUIC certificate: peers
	// accept a message only when the transport's authenticated sender is a
	// member of that name. Letters, digits, '.', '-', '_' (see
	// transport.ValidNodeName). Required.
	Name string

	// Seeds are the addresses to join (--join): "10.0.0.5:7946" or
	// "[fd00::5]:7946", "kvmesh-0.kvmesh:7946" (every A/AAAA record), a name
	// without a port ("kvmesh.default.svc", every A/AAAA record, BindPort),
	// or an SRV name whose first label starts with '_'
	// ("_serf._tcp.kvmesh.default.svc.cluster.local", every target and port,
	// as a Kubernetes headless Service publishes for a named port). Joining
	// retries in the background until it succeeds, so nodes may start in any
	// order. Empty: start a new mesh and wait to be joined.
	Seeds []string

	// BindAddr and BindPort are where serf's gossip listens (TCP and UDP on
	// the same port). 0.0.0.0:7946 is serf's well-known default; tests
	// replace the gossip transport instead of binding (see Deps).
	BindAddr string
	BindPort int

	// AdvertiseAddr and AdvertisePort are the gossip address other members
	// use to reach this node, when it differs from the bound one (NAT, a
	// wildcard bind with several interfaces). Empty/0: memberlist picks the
	// bound address, or a private interface address for a wildcard bind.
	AdvertiseAddr string
	AdvertisePort int

	// PreciseStreams is a digest of the engine KV-event streams this node
	// is configured to consume (precise mode; "" without), announced in
	// its serf tags (TagPrecise). AliveMembers lists only the members
	// announcing the same digest, so each stream's owner is chosen among
	// the nodes that can consume it: a node configured otherwise (a config
	// rollout half done, a node started without precise mode) never owns a
	// stream nobody else then reads. At most 64 bytes (serf's tags are
	// small).
	PreciseStreams string

	// QUICAdvertiseAddr is the replication address published in this node's
	// serf tags. Empty: the transport's Addr(). Set it when the QUIC
	// transport listens on a wildcard address.
	QUICAdvertiseAddr string

	// GossipKey is the base64 encoding of a 32-byte key that encrypts and
	// authenticates serf's gossip (serf's keyring format; make one with
	// GenerateGossipKey or `openssl rand -base64 32`). Required unless
	// DevMode: without it anyone who can reach the gossip port can join the
	// mesh or forge membership.
	GossipKey string

	// DevMode allows running without a GossipKey (unencrypted gossip), for a
	// laptop or a test. Never in production.
	DevMode bool

	// FlushInterval is how often the replication loop asks the replica what
	// to send. It bounds how long a learned claim waits before it leaves the
	// node: 10 ms keeps learn-to-routable latency at a few tens of ms while
	// batching the claims of many requests into one message per peer.
	FlushInterval time.Duration

	// FlushClaims flushes early when this many learned claims are waiting,
	// so a burst leaves at once in messages of a useful size. 512 claims are
	// ~8 KiB on the wire, well under one flush interval's worth at the
	// highest request rates a router node sees.
	FlushClaims int

	// AntiEntropyInterval is how often the node compares digests with one
	// peer, round-robin. Deltas are acknowledged and retransmitted, peers
	// that fall behind get the full state, and claims are soft state that
	// traffic refreshes, so digests are a safety net (a relay that died
	// holding a claim, a repair lost on a full send queue). Under load every
	// exchange finds the buckets that in-flight deltas touch and repairs
	// them whole, so the interval is a cost: at 5 s repairs are ~0.2 and
	// all anti-entropy traffic (digests included) ~0.4 times the delta
	// traffic; at 2 s, 0.5 and 1.1 (BenchmarkAntiEntropyUnderLoad).
	AntiEntropyInterval time.Duration

	// SweepInterval is how often expired and invalidated claims are
	// reclaimed from the index. Writes sweep a little on their own; this
	// covers nodes whose write rate is low. 30 s keeps the table tidy at a
	// cost of one table walk (~20 ms at a million claims) per period.
	SweepInterval time.Duration

	// JoinBackoffMin and JoinBackoffMax bound the wait between join
	// attempts (doubling, with jitter). 1 s lets a StatefulSet's pods find
	// each other soon after they start; 30 s keeps a node whose seeds are
	// gone from hammering DNS forever.
	JoinBackoffMin time.Duration
	JoinBackoffMax time.Duration

	// ResolveTimeout bounds one round of seed DNS lookups. 5 s is a
	// resolver's own usual timeout.
	ResolveTimeout time.Duration

	// SendQueueDepth is how many messages may wait for one peer. A slow or
	// dead peer fills its own queue and further messages to it are dropped
	// (the protocol retransmits, or falls back to a full transfer), so it
	// never holds up the others. A digest exchange queues repairs for the
	// differing buckets at once (packed by claims, MaxBatchClaims a
	// message; until stop 50 one message per bucket) on top of deltas and
	// full-state chunks: 1,024 absorbs that burst while QUIC opens streams
	// (a 256-deep queue dropped thousands of messages in the first minute
	// of the soak test, when repairs went one per bucket).
	SendQueueDepth int
	// SendQueueClaims bounds the claims in the messages waiting for one
	// peer (the queue holds them decoded, ~40 bytes a claim). A peer whose
	// sends block (QUIC flow control, up to SendTimeout each) has its queue
	// refilled every retransmit interval with copies that newer ones
	// replace: 1,024 messages of MaxBatchClaims (4,096) would hold about
	// 160 MiB for that one peer. 262,144 claims (~10 MiB) is 64 full
	// messages, more than the window and a repair burst need; past it,
	// messages are dropped like a full queue's (counted as queue_full) and
	// the protocol repairs them. A message is always queued into an empty
	// queue, whatever its size.
	SendQueueClaims int

	// SendTimeout bounds one Send to a peer. Deltas older than this are
	// retransmitted anyway (crdt's RetransmitAfter is 250 ms), so 2 s only
	// has to outlast a dial and a loaded peer.
	SendTimeout time.Duration

	// RelayThreshold is the mesh size (members speaking our protocol, this
	// node included) above which nodes stop sending every claim to every
	// peer and replicate over a bounded-degree overlay with relaying instead
	// (see overlay.go). Below it a full mesh is cheapest: one hop, no relay.
	// 32 keeps the full mesh for every deployment we expect, where each
	// node's egress per claim is 31 small messages. The mesh returns to a
	// full mesh at 3/4 of the threshold, so a size near it does not flap.
	RelayThreshold int

	// RingNeighbours is how many ring successors and predecessors each node
	// links to in the overlay on top of its long-range fingers. 1 is enough
	// for connectivity; 2 keeps every node two paths away from any single
	// failure while serf notices it.
	RingNeighbours int

	// LearnQueue is how many claim keys Learn may queue while the replica is
	// busy (a digest or a large apply holds it for milliseconds), so the
	// request path never waits for it. 65,536 keys (~1 MiB) absorb several
	// hundred requests; beyond that Learn waits for the replica.
	LearnQueue int

	// ShareLoad sends this node's bookings (queued prefill, requests
	// pending and in flight, per backend) to every alive member over the
	// load channel (load.go), so that each node prices a backend with the
	// work every router queued there, not only its own. Without it N nodes
	// each see about 1/N of every queue (8 nodes on the Mooncake trace: TTFT
	// p50 1.58x one node's). Peers' bookings are received either way.
	ShareLoad bool

	// LoadInterval is how often the load loop compares this node's bookings
	// with what its peers were last told, and sends the difference, when
	// nothing woke it earlier. The router wakes it at every dispatch and
	// first byte (BookingsChanged), so this is a safety net. 10 ms.
	LoadInterval time.Duration
	// LoadMinGap is the least time between two sends the router's wake-ups
	// cause: the coalescing window under load. Two nodes that route within
	// the window of each other's send may pick the same idle backend, so it
	// is short; a node routing hundreds of requests a second still sends at
	// most 1/LoadMinGap messages per peer. 2 ms (at most 500 per second).
	LoadMinGap time.Duration
	// LoadLazyDelay: a change of in-flight counts alone (a request ended)
	// waits up to this long for company before it is sent. Decoding
	// requests weigh little in the cost, and this keeps the channel near
	// two messages per request. 100 ms.
	LoadLazyDelay time.Duration
	// LoadRefresh is how often a snapshot of every booking goes out, which
	// corrects anything a lost message left wrong and tells the peers this
	// node is alive. 500 ms: a few dozen bytes per peer each time.
	LoadRefresh time.Duration
	// LoadFresh and LoadMaxAge: a peer's bookings count fully until it has
	// been silent for LoadFresh, then less and less, and not at all (they
	// are dropped) at LoadMaxAge. 1.5 s (three missed snapshots) and 3 s:
	// serf takes 7-10 s to declare a killed node failed, and a dead
	// router's bookings must not hold backends busy that long. Silence is
	// counted from the last message applied: a peer whose messages are all
	// dropped (stale) ages out too. LoadFresh is also how long a peer's
	// current session must be silent before a snapshot of another
	// incarnation with a lower sequence is taken as a restart (its clock
	// stepped back, or an earlier release numbering from 1) rather than a
	// late message of the session before.
	LoadFresh  time.Duration
	LoadMaxAge time.Duration
	// LessonGrace: a node authors lessons (what its backends' answers
	// taught it, mesh/lesson.go) only once it has heard the mesh's: a
	// snapshot with names from a peer, at least LoadRefresh ago (the
	// peer's lessons follow that snapshot), or, having heard none,
	// LessonGrace after Start (alone, its lessons are the mesh's). Until
	// then its router learns from the answers without stamping, and the
	// first lesson a peer sends replaces what it learned: a node that
	// starts or restarts does not replace the estimate the mesh learned
	// from every node's answers with its first few. 10 s: joining through
	// the seeds takes a second or two on a LAN, so a node that heard no
	// peer in 10 s is alone or cut off. 0: author at once.
	LessonGrace time.Duration
	// ShareLostMarks sends the prompts this node's router found lost at a
	// backend to every peer (lost.go), so that a conversation's next
	// request is doubted there whichever node it reaches. Marks from peers
	// that send them are taken either way. Off: on the agent workload, 8
	// nodes, 8 runs each alternating, sharing measured no better (hit rate
	// median 81.7% against 81.8% without, range 74.5-85.7% against
	// 79.9-83.2%; TTFT p99 median 31.7 s against 28.5 s).
	ShareLostMarks bool
	// LoadQueueDepth is how many load messages may wait for one peer; more
	// are dropped (the next message or snapshot supersedes them). 16.
	LoadQueueDepth int

	// Membership holds serf's gossip and failure-detection timings.
	Membership Timings
	// GossipCompression LZW-compresses serf's gossip packets (those it
	// makes smaller) and state exchanges before they are sent. Off:
	// kvmesh's gossip is a few small membership messages a second, which
	// compression barely shrinks, while every attempt allocates a ~72 KB
	// LZW table, kept or not. On, that was about a fifth of all a node
	// allocated under load in a 30-minute soak; off, an idle 3-node mesh
	// with a gossip key allocates 194 KB/s per node instead of 337. A
	// receiver decodes compressed and plain messages alike whatever its
	// own setting, so nodes with it on and off (releases before this one
	// had it on) gossip with each other (TestGossipCompressionMixes).
	GossipCompression bool

	// Replica tunes the replication protocol. Name is taken from Config.Name
	// and Relay is managed by the mesh (see RelayThreshold). DefaultConfig
	// takes crdt's defaults except DigestBuckets: 4,096 (32 KiB digests,
	// ~250 claims per bucket at a million claims) instead of 256, because a
	// digest exchange under load repairs every bucket an in-flight delta
	// touched, whole: with 256 buckets the repairs were 6 to 8 times the
	// delta traffic, with 4,096 0.4 to 0.5 times (200 learns/s, 200,000
	// claims, 2 s interval; BenchmarkAntiEntropyUnderLoad).
	Replica crdt.Config
}

// Timings are serf's and memberlist's gossip and failure-detection timings.
type Timings struct {
	// GossipInterval and GossipNodes: how often, and to how many random
	// members, membership changes are gossiped.
	GossipInterval time.Duration
	GossipNodes    int
	// ProbeInterval and ProbeTimeout: each member probes one random member
	// this often and waits this long for the ack before asking others.
	ProbeInterval time.Duration
	ProbeTimeout  time.Duration
	// SuspicionMult scales how long a suspected member has to refute before
	// it is declared failed (times ProbeInterval times log10 of the size).
	// SuspicionMaxTimeoutMult caps how much longer that is when few members
	// confirm the suspicion (Lifeguard): small meshes wait up to this
	// multiple.
	SuspicionMult           int
	SuspicionMaxTimeoutMult int
	// PushPullInterval is how often a full state exchange with one random
	// member repairs what gossip missed.
	PushPullInterval time.Duration
	// TCPTimeout bounds push-pull and join connections.
	TCPTimeout time.Duration
	// GossipToTheDeadTime is how long dead members still get gossip, so
	// that they learn they were declared dead and refute.
	GossipToTheDeadTime time.Duration
	// DeadNodeReclaimTime lets a failed member's name come back from another
	// address after this long (a pod rescheduled with a new IP). 0 would
	// refuse it until the old entry is reaped.
	DeadNodeReclaimTime time.Duration
	// ReapInterval, ReconnectInterval, ReconnectTimeout and TombstoneTimeout
	// are serf's: how often failed members are reaped, how often we try to
	// reconnect to a failed member (a healed partition), how long we keep
	// trying, and how long left members stay listed.
	ReapInterval      time.Duration
	ReconnectInterval time.Duration
	ReconnectTimeout  time.Duration
	TombstoneTimeout  time.Duration
	// LeavePropagateDelay is how long a graceful Leave waits for the leave
	// message to spread before the node goes quiet.
	LeavePropagateDelay time.Duration
	// BroadcastTimeout bounds how long Leave waits for its broadcast.
	BroadcastTimeout time.Duration
}

// LANTimings are serf's and memberlist's LAN defaults: membership of 50
// nodes converges in about a second and a killed node is declared failed
// everywhere in 7-10 s on a 2-vCPU VM (FIELD-NOTES). DeadNodeReclaimTime is
// ours: 30 s after a node was declared dead its name may come back from a
// new address, which a rescheduled pod needs.
func LANTimings() Timings {
	return Timings{
		GossipInterval:          200 * time.Millisecond,
		GossipNodes:             3,
		ProbeInterval:           time.Second,
		ProbeTimeout:            500 * time.Millisecond,
		SuspicionMult:           4,
		SuspicionMaxTimeoutMult: 6,
		PushPullInterval:        30 * time.Second,
		TCPTimeout:              10 * time.Second,
		GossipToTheDeadTime:     30 * time.Second,
		DeadNodeReclaimTime:     30 * time.Second,
		ReapInterval:            15 * time.Second,
		ReconnectInterval:       30 * time.Second,
		ReconnectTimeout:        24 * time.Hour,
		TombstoneTimeout:        24 * time.Hour,
		LeavePropagateDelay:     time.Second,
		BroadcastTimeout:        5 * time.Second,
	}
}

// LocalTimings are fast timings for in-process clusters and loopback
// tests: membership converges in a few hundred ms and a killed node is
// declared failed in one to two seconds. They cost far more gossip than
// LANTimings and suit only a machine where every member is one hop away
// (they stay stable with 48 nodes in one race-instrumented process on two
// cores).
func LocalTimings() Timings {
	return Timings{
		GossipInterval:          50 * time.Millisecond,
		GossipNodes:             3,
		ProbeInterval:           250 * time.Millisecond,
		ProbeTimeout:            200 * time.Millisecond,
		SuspicionMult:           3,
		SuspicionMaxTimeoutMult: 3,
		PushPullInterval:        5 * time.Second,
		TCPTimeout:              2 * time.Second,
		GossipToTheDeadTime:     2 * time.Second,
		DeadNodeReclaimTime:     500 * time.Millisecond,
		ReapInterval:            2 * time.Second,
		ReconnectInterval:       300 * time.Millisecond,
		ReconnectTimeout:        time.Minute,
		TombstoneTimeout:        time.Minute,
		LeavePropagateDelay:     50 * time.Millisecond,
		BroadcastTimeout:        time.Second,
	}
}

// DefaultConfig returns the defaults described on each field. Name, Seeds
// and GossipKey (or DevMode) remain to be set.
func DefaultConfig() Config {
	return Config{
		BindAddr:            "0.0.0.0",
		BindPort:            7946,
		FlushInterval:       10 * time.Millisecond,
		FlushClaims:         512,
		AntiEntropyInterval: 5 * time.Second,
		SweepInterval:       30 * time.Second,
		JoinBackoffMin:      time.Second,
		JoinBackoffMax:      30 * time.Second,
		ResolveTimeout:      5 * time.Second,
		SendQueueDepth:      1024,
		SendQueueClaims:     1 << 18,
		SendTimeout:         2 * time.Second,
		RelayThreshold:      32,
		RingNeighbours:      1,
		LearnQueue:          1 << 16,
		ShareLoad:           true,
		LoadInterval:        10 * time.Millisecond,
		LoadMinGap:          2 * time.Millisecond,
		LoadLazyDelay:       100 * time.Millisecond,
		LoadRefresh:         500 * time.Millisecond,
		LoadFresh:           1500 * time.Millisecond,
		LoadMaxAge:          3 * time.Second,
		LoadQueueDepth:      16,
		LessonGrace:         10 * time.Second,
		Membership:          LANTimings(),
		Replica:             defaultReplicaConfig(),
	}
}

func defaultReplicaConfig() crdt.Config {
	rc := crdt.DefaultConfig()
	rc.DigestBuckets = 4096
	return rc
}

// GenerateGossipKey returns a new random gossip key in the format GossipKey
// expects.
func GenerateGossipKey() (string, error) {
	var k [GossipKeyBytes]byte
	if _, err := rand.Read(k[:]); err != nil {
		return "", fmt.Errorf("mesh: generate gossip key: %w", err)
	}
	return base64.StdEncoding.EncodeToString(k[:]), nil
}

// gossipKey decodes GossipKey; nil when none is set.
func (c *Config) gossipKey() ([]byte, error) {
	if c.GossipKey == "" {
		return nil, nil
	}
	return ParseGossipKey(c.GossipKey)
}

// ParseGossipKey decodes a gossip key in GossipKey's format (base64 of
// GossipKeyBytes bytes; surrounding space ignored).
func ParseGossipKey(s string) ([]byte, error) {
	k, err := base64.StdEncoding.DecodeString(strings.TrimSpace(s))
	if err != nil {
		return nil, fmt.Errorf("mesh: GossipKey is not valid base64: %v", err)
	}
	if len(k) != GossipKeyBytes {
		return nil, fmt.Errorf("mesh: GossipKey must decode to %d bytes, got %d (make one with `openssl rand -base64 32`)", GossipKeyBytes, len(k))
	}
	return k, nil
}

// replicaConfig is the crdt configuration this node runs with.
func (c *Config) replicaConfig(relay bool) crdt.Config {
	rc := c.Replica
	rc.Name = c.Name
	rc.Relay = relay
	return rc
}

// Validate reports every unusable setting, each with what to do about it.
func (c Config) Validate() error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if err := transport.ValidNodeName(c.Name); err != nil {
		add("Name: %v", err)
	}
	if len(c.PreciseStreams) > 64 {
		add("PreciseStreams: at most 64 bytes, got %d", len(c.PreciseStreams))
	}
	if c.GossipKey == "" && !c.DevMode {
		add("GossipKey is required: gossip would be unencrypted and open to anyone who reaches the port; " +
			"set a 32-byte base64 key (mesh.GenerateGossipKey, `openssl rand -base64 32`) on every node, or DevMode for a local test")
	} else if _, err := c.gossipKey(); err != nil {
		errs = append(errs, err)
	}
	for i, s := range c.Seeds {
		if _, err := parseSeed(s, 7946); err != nil {
			add("Seeds[%d]: %v", i, err)
		}
	}
	if c.BindPort < 0 || c.BindPort > 65535 {
		add("BindPort %d is not a port", c.BindPort)
	}
	if c.AdvertisePort < 0 || c.AdvertisePort > 65535 {
		add("AdvertisePort %d is not a port", c.AdvertisePort)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"FlushInterval", c.FlushInterval}, {"AntiEntropyInterval", c.AntiEntropyInterval},
		{"SweepInterval", c.SweepInterval}, {"JoinBackoffMin", c.JoinBackoffMin},
		{"ResolveTimeout", c.ResolveTimeout}, {"SendTimeout", c.SendTimeout},
		{"LoadInterval", c.LoadInterval}, {"LoadRefresh", c.LoadRefresh}, {"LoadFresh", c.LoadFresh},
		{"Membership.GossipInterval", c.Membership.GossipInterval},
		{"Membership.ProbeInterval", c.Membership.ProbeInterval},
		{"Membership.ProbeTimeout", c.Membership.ProbeTimeout},
		{"Membership.PushPullInterval", c.Membership.PushPullInterval},
		{"Membership.TCPTimeout", c.Membership.TCPTimeout},
		{"Membership.ReapInterval", c.Membership.ReapInterval},
		{"Membership.ReconnectInterval", c.Membership.ReconnectInterval},
		{"Membership.ReconnectTimeout", c.Membership.ReconnectTimeout},
		{"Membership.TombstoneTimeout", c.Membership.TombstoneTimeout},
		{"Membership.BroadcastTimeout", c.Membership.BroadcastTimeout},
	} {
		if d.v <= 0 {
			add("%s must be positive, got %v", d.name, d.v)
		}
	}
	if c.JoinBackoffMax < c.JoinBackoffMin {
		add("JoinBackoffMax (%v) must be at least JoinBackoffMin (%v)", c.JoinBackoffMax, c.JoinBackoffMin)
	}
	if c.Membership.ProbeTimeout > c.Membership.ProbeInterval {
		add("Membership.ProbeTimeout (%v) must not exceed ProbeInterval (%v)", c.Membership.ProbeTimeout, c.Membership.ProbeInterval)
	}
	if c.Membership.GossipNodes < 1 {
		add("Membership.GossipNodes must be at least 1")
	}
	if c.Membership.SuspicionMult < 1 || c.Membership.SuspicionMaxTimeoutMult < 1 {
		add("Membership.SuspicionMult and SuspicionMaxTimeoutMult must be at least 1")
	}
	if c.Membership.GossipToTheDeadTime < 0 || c.Membership.DeadNodeReclaimTime < 0 || c.Membership.LeavePropagateDelay < 0 {
		add("Membership.GossipToTheDeadTime, DeadNodeReclaimTime and LeavePropagateDelay must not be negative")
	}
	if c.LoadLazyDelay < 0 || c.LoadMinGap < 0 {
		add("LoadLazyDelay and LoadMinGap must not be negative, got %v and %v", c.LoadLazyDelay, c.LoadMinGap)
	}
	if c.LessonGrace < 0 {
		add("LessonGrace must not be negative, got %v", c.LessonGrace)
	}
	if c.LoadMaxAge <= c.LoadFresh {
		add("LoadMaxAge (%v) must exceed LoadFresh (%v)", c.LoadMaxAge, c.LoadFresh)
	}
	if c.LoadQueueDepth < 1 {
		add("LoadQueueDepth must be at least 1, got %d", c.LoadQueueDepth)
	}
	if c.FlushClaims < 1 {
		add("FlushClaims must be at least 1, got %d", c.FlushClaims)
	}
	if c.SendQueueClaims < 1 {
		add("SendQueueClaims must be at least 1, got %d", c.SendQueueClaims)
	}
	if c.SendQueueDepth < 1 {
		add("SendQueueDepth must be at least 1, got %d", c.SendQueueDepth)
	}
	if c.RelayThreshold < 2 {
		add("RelayThreshold must be at least 2, got %d", c.RelayThreshold)
	}
	if c.RingNeighbours < 1 {
		add("RingNeighbours must be at least 1, got %d", c.RingNeighbours)
	}
	if c.LearnQueue < 0 {
		add("LearnQueue must not be negative")
	}
	if c.Name != "" {
		if err := c.replicaConfig(false).Validate(); err != nil {
			add("Replica: %v", err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("mesh: invalid config: %w", err)
	}
	return nil
}
