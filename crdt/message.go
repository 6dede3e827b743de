package crdt

import (
	"fmt"

	"github.com/kvmesh/kvmesh/tree"
)

// MsgType says what a Message carries.
type MsgType uint8

const (
	// MsgDelta carries the local changes in the sequence range (FromSeq,
	// ToSeq] of the sender's delta buffer that the receiver has not
	// acknowledged.
	MsgDelta MsgType = iota + 1
	// MsgAck only acknowledges (AckUpTo); every other message carries an ack
	// too, so this one is sent when there is nothing else to send.
	MsgAck
	// MsgFull is one chunk (key range) of a full-state transfer.
	MsgFull
	// MsgFullAck acknowledges one full-state chunk.
	MsgFullAck
	// MsgDigest carries bucketed digests of the sender's state.
	MsgDigest
	// MsgRepairRequest asks for the claims of the listed buckets.
	MsgRepairRequest
	// MsgRepair carries the claims of some buckets, answering a digest
	// mismatch.
	MsgRepair
	msgTypeEnd
)

func (t MsgType) String() string {
	switch t {
	case MsgDelta:
		return "delta"
	case MsgAck:
		return "ack"
	case MsgFull:
		return "full"
	case MsgFullAck:
		return "full-ack"
	case MsgDigest:
		return "digest"
	case MsgRepairRequest:
		return "repair-request"
	case MsgRepair:
		return "repair"
	}
	return fmt.Sprintf("MsgType(%d)", uint8(t))
}

// Message is one protocol message between two replicas. Which fields are
// meaningful depends on Type; Encode writes only those.
type Message struct {
	Type MsgType
	// From is the sender's node name; Incarnation identifies the sender's
	// current life (it changes when the node restarts with empty state).
	From        string
	Incarnation uint64
	// AckUpTo acknowledges every delta of the receiver's incarnation AckFor
	// up to this sequence number. Every message carries it.
	AckUpTo uint64
	AckFor  uint64

	// Delta: the sequence range (FromSeq, ToSeq] it covers.
	FromSeq, ToSeq uint64

	// Full and FullAck: transfer epoch, chunk index and count. BaseSeq is
	// the sender's last sequence number when the transfer began: once every
	// chunk is in, the receiver holds everything up to it.
	Epoch         uint64
	Chunk, Chunks uint32
	BaseSeq       uint64

	// Digest: the time the digest was computed at, the per-bucket digests,
	// and a digest of the backend registry.
	Now      int64
	Digest   []uint64
	Registry uint64

	// RepairRequest: the buckets whose claims the sender wants.
	Buckets []uint32

	// Delta, Full and Repair carry claims.
	Batch Batch
}

// Batch is a set of claims with the registry entries of their backends and
// the sender's eviction floor.
type Batch struct {
	// Backends are registry entries; claims refer to them by position.
	Backends []tree.BackendEntry
	Claims   []WireClaim
	// Floor is the sender's eviction floor (expiry milliseconds).
	Floor int64
}

// WireClaim is a claim as it travels: its backend is an index into the
// batch's Backends, since backend ids are local to each node.
type WireClaim struct {
	Key     tree.Key
	Backend uint32
	Gen     uint16
	Time    tree.Timestamp
	Expires int64
	Origin  tree.NodeID
}
