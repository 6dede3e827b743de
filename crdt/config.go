package crdt

import (
	"errors"
	"fmt"
	"time"
)

// Config tunes a Replica. Every node of a mesh should use the same values.
type Config struct {
	// Name is this node's name, unique in the mesh. Its NodeID
	// (tree.NodeIDOf) is the origin of the claims it learns.
	Name string

	// MaxSkew bounds how far in the future a peer's timestamp may be. Larger
	// ones are clamped to now+MaxSkew (and counted), so a node with a runaway
	// clock cannot pin claims or drag every clock with it (a claim keeps
	// its TTL from the clamped time, a tombstone its expiry, capped by
	// MaxTTL from the clamped time). A peer whose timestamps run
	// more than 2*MaxSkew ahead has its eviction floors read on its clock
	// (lowered by its lead; see Replica.raiseFloor). 500 ms is far above
	// NTP-synchronized skew and far below any claim TTL.
	MaxSkew time.Duration

	// MaxTTL is the longest claim TTL any node uses (the router's confirmed
	// TTL). It bounds what a peer can make this node believe: a received
	// claim's expiry is capped at its (clamped) timestamp + MaxTTL, and an
	// eviction floor beyond now + MaxTTL + 4*MaxSkew (which no honest node
	// can produce: a floor is the expiry of a claim it holds) is ignored and
	// counted. With floors of clocks running ahead lowered by their lead
	// (MaxSkew), one node with a wrong clock can pin its claims for at most
	// MaxTTL and cannot wipe everyone's. 1 h is above any sensible TTL;
	// serve sets it from the router's configuration.
	MaxTTL time.Duration

	// LogCapacity is how many local changes the delta buffer keeps for peers
	// that have not acknowledged them. A peer that falls further behind gets
	// the full state instead. 65,536 entries (~3 MiB) cover several seconds
	// of learning at thousands of requests per second.
	LogCapacity int

	// MaxBatchClaims caps the claims in one delta or repair message
	// (~15 bytes each on the wire), so a message stays near 60 KiB.
	MaxBatchClaims int

	// Window is how many unacknowledged delta messages may be in flight to
	// one peer. 4 lets new claims leave at every flush without waiting for
	// the previous message's ack.
	Window int

	// RetransmitAfter is how long an unacknowledged message waits before it
	// is sent again. 250 ms is many loopback or LAN round trips plus a flush
	// interval on each side.
	RetransmitAfter time.Duration

	// DigestBuckets is the number of key ranges digests and full-state
	// chunks are cut into (a power of two). 256 keeps a digest at 2 KiB and
	// a bucket of a 1,000,000-claim index near 4,000 claims.
	DigestBuckets int

	// Relay forwards the novel part of every delta received from a peer to
	// the other peers (never back to its sender). A full mesh does not need
	// it: every node sends its own claims to every peer. Large meshes set it
	// and give each node only a few neighbours (see package mesh), which
	// bounds each node's egress per claim by its neighbour count.
	Relay bool
}

// DefaultConfig returns the defaults described on each field; set Name.
func DefaultConfig() Config {
	return Config{
		MaxSkew:         500 * time.Millisecond,
		MaxTTL:          time.Hour,
		LogCapacity:     1 << 16,
		MaxBatchClaims:  4096,
		Window:          4,
		RetransmitAfter: 250 * time.Millisecond,
		DigestBuckets:   256,
	}
}

// Validate reports the first unusable setting.
func (c Config) Validate() error {
	switch {
	case c.Name == "":
		return errors.New("crdt: Name must be set")
	case len(c.Name) > MaxNameBytes:
		return fmt.Errorf("crdt: Name is longer than %d bytes", MaxNameBytes)
	case c.MaxSkew <= 0:
		return errors.New("crdt: MaxSkew must be positive")
	case c.MaxTTL <= 0:
		return errors.New("crdt: MaxTTL must be positive")
	case c.LogCapacity < 16:
		return fmt.Errorf("crdt: LogCapacity must be at least 16, got %d", c.LogCapacity)
	case c.MaxBatchClaims < 1 || c.MaxBatchClaims > MaxClaimsPerMessage:
		return fmt.Errorf("crdt: MaxBatchClaims must be in [1, %d], got %d", MaxClaimsPerMessage, c.MaxBatchClaims)
	case c.Window < 1:
		return errors.New("crdt: Window must be at least 1")
	case c.RetransmitAfter <= 0:
		return errors.New("crdt: RetransmitAfter must be positive")
	case c.DigestBuckets < 1 || c.DigestBuckets > MaxDigestBuckets || c.DigestBuckets&(c.DigestBuckets-1) != 0:
		return fmt.Errorf("crdt: DigestBuckets must be a power of two in [1, %d], got %d", MaxDigestBuckets, c.DigestBuckets)
	}
	return nil
}
