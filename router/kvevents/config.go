package kvevents

import (
	"fmt"
	"time"
)

// StreamConfig is one engine's KV-event stream.
type StreamConfig struct {
	// Backend is the backend's name in the router's fleet.
	Backend string `yaml:"backend"`
	// Endpoint is the engine's ZMQ publisher to connect to, e.g.
	// tcp://10.0.0.7:5557 (vLLM binds tcp://*:5557 by default). Empty when
	// the engine connects to this node's Config.Listen instead.
	Endpoint string `yaml:"endpoint"`
	// ReplayEndpoint is the engine's ROUTER socket for replaying missed
	// messages (vLLM's replay_endpoint, e.g. tcp://10.0.0.7:5558). Empty:
	// gaps invalidate the backend instead of being repaired.
	ReplayEndpoint string `yaml:"replay_endpoint"`
	// Topic is the engine's topic. In connect mode it filters the
	// subscription; with Listen it tells this engine's messages apart from
	// the others', so every engine connecting to Listen needs its own.
	Topic string `yaml:"topic"`
	// Model is the name requests use for the engine's base model (blocks
	// stored with a LoRA adapter are keyed by the adapter's name instead).
	Model string `yaml:"model"`
}

// Config sets how events are consumed.
type Config struct {
	// BlockTokens is kvmesh's block size (tree.Config.BlockTokens); engines'
	// block sizes must be multiples of it. Precise mode needs it equal to
	// the engine's (16 for vLLM by default) to match at every block.
	BlockTokens int
	// LeaseTTL is how long a claim made from a stored block lives without
	// renewal. The engine reports a block once, when stored, and again only
	// when removed, so the owner renews the claims of blocks still held
	// (RenewBefore). 10 minutes matches the router's confirmed-claim TTL:
	// when the owner dies, its claims fade on the same schedule as learned
	// ones while the next owner resyncs. In listen mode it is also how long
	// an engine may stay silent before its claims are no longer renewed
	// (consumer.renew).
	LeaseTTL time.Duration
	// RenewBefore: a claim is re-announced once its lease has less than this
	// left. A quarter of LeaseTTL keeps renewal traffic at about
	// held-blocks / (3/4 LeaseTTL) claims per second (~400/s for 8 engines
	// of 27,000 blocks) and never lets a held block's claim lapse.
	RenewBefore time.Duration
	// RenewEvery is how often leases are checked. 15 s is far below
	// RenewBefore, so no lease is checked too late.
	RenewEvery time.Duration
	// ReplayTimeout bounds one replay request. vLLM answers from memory
	// (10,000 batches at most), so 2 s is generous on a LAN; past it the gap
	// counts as unrepaired and the backend is invalidated.
	ReplayTimeout time.Duration
	// MaxBlocksPerEngine bounds the engine hash -> key map of one engine
	// (~48 bytes a block). 262,144 blocks are 4M tokens of 16-token blocks,
	// several times an 80 GB GPU's KV cache for an 8B model.
	MaxBlocksPerEngine int
	// DialRetry is the wait between attempts to reach a publisher that is
	// down. 1 s reconnects quickly after an engine restart without spinning.
	// After a connection that ended without delivering a message, the wait
	// doubles each time up to 30 s (Manager.dialLoop).
	DialRetry time.Duration
	// MaxMessageBytes bounds one ZMQ message read from an engine (its
	// frames together), and MaxMessageFrames its frames: a connection whose
	// peer declares more is closed before anything is allocated for it
	// (framecap.go). 32 MiB is far above any event batch (a 128k-token
	// prompt's stored blocks take about 1 MiB); 16 frames above the three
	// of an event message or a replay answer.
	MaxMessageBytes  int
	MaxMessageFrames int
	// HandshakeTimeout bounds how long a peer may take to send its
	// greeting and handshake command, on connections to the Listen socket
	// and on those this node dials (publishers, replay sockets). The
	// library accepts connections one at a time and reads each handshake
	// before the next, so a client that connected and sent nothing held
	// every engine's connection back; and it dials with no deadline, so a
	// publisher or replay socket that accepted the connection and never
	// answered held the stream, its handover and Close (a dialed
	// connection is also closed as soon as its socket's context ends). 10 s
	// is far above a handshake on a LAN.
	HandshakeTimeout time.Duration
	// Listen, if set (e.g. tcp://0.0.0.0:5557), binds a SUB socket that
	// engines' publishers connect to; streams without an Endpoint are read
	// from it, told apart by Topic.
	Listen string
}

// DefaultConfig returns the defaults described on each Config field.
func DefaultConfig() Config {
	return Config{
		BlockTokens:        16,
		LeaseTTL:           10 * time.Minute,
		RenewBefore:        150 * time.Second,
		RenewEvery:         15 * time.Second,
		ReplayTimeout:      2 * time.Second,
		MaxBlocksPerEngine: 262_144,
		DialRetry:          time.Second,
		MaxMessageBytes:    32 << 20,
		MaxMessageFrames:   16,
		HandshakeTimeout:   10 * time.Second,
	}
}

// limits are the frame limits of this configuration's sockets.
func (c Config) limits() frameLimits {
	return frameLimits{maxBytes: uint64(c.MaxMessageBytes), maxFrames: c.MaxMessageFrames, handshake: c.HandshakeTimeout}
}

// Validate reports the first setting that cannot work.
func (c Config) Validate() error {
	switch {
	case c.BlockTokens <= 0 || c.BlockTokens%8 != 0:
		return fmt.Errorf("kvevents: BlockTokens must be a positive multiple of 8, got %d", c.BlockTokens)
	case c.LeaseTTL < time.Second:
		return fmt.Errorf("kvevents: LeaseTTL must be at least 1s, got %v", c.LeaseTTL)
	case c.RenewBefore <= 0 || c.RenewBefore >= c.LeaseTTL:
		return fmt.Errorf("kvevents: RenewBefore must be in (0, LeaseTTL), got %v", c.RenewBefore)
	case c.RenewEvery <= 0 || c.RenewEvery >= c.RenewBefore:
		return fmt.Errorf("kvevents: RenewEvery must be in (0, RenewBefore), got %v", c.RenewEvery)
	case c.ReplayTimeout <= 0:
		return fmt.Errorf("kvevents: ReplayTimeout must be positive")
	case c.MaxBlocksPerEngine < 1:
		return fmt.Errorf("kvevents: MaxBlocksPerEngine must be positive")
	case c.DialRetry <= 0:
		return fmt.Errorf("kvevents: DialRetry must be positive")
	case c.MaxMessageBytes < 1<<10:
		return fmt.Errorf("kvevents: MaxMessageBytes must be at least 1 KiB, got %d", c.MaxMessageBytes)
	case c.HandshakeTimeout < time.Millisecond:
		return fmt.Errorf("kvevents: HandshakeTimeout must be at least 1ms, got %v", c.HandshakeTimeout)
	case c.MaxMessageFrames < 3:
		return fmt.Errorf("kvevents: MaxMessageFrames must be at least 3 (an event message's), got %d", c.MaxMessageFrames)
	}
	return nil
}

// ValidateStreams checks a stream list against c.
func (c Config) ValidateStreams(streams []StreamConfig) error {
	seen := map[string]bool{}
	topics := map[string]bool{}
	for i, s := range streams {
		switch {
		case s.Backend == "":
			return fmt.Errorf("kvevents: streams[%d]: backend is required", i)
		case seen[s.Backend]:
			return fmt.Errorf("kvevents: streams[%d]: backend %q has two streams", i, s.Backend)
		case s.Endpoint == "" && c.Listen == "":
			return fmt.Errorf("kvevents: streams[%d] (%s): no endpoint, and no listen address for the engine to connect to", i, s.Backend)
		case s.Endpoint == "" && topics[s.Topic]:
			return fmt.Errorf("kvevents: streams[%d] (%s): topic %q is used by another engine connecting to the listen address", i, s.Backend, s.Topic)
		}
		seen[s.Backend] = true
		if s.Endpoint == "" {
			topics[s.Topic] = true
		}
	}
	return nil
}
