package crdt

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/fxamacker/cbor/v2"
	"github.com/kvmesh/kvmesh/tree"
)

// Wire format, version 2. A message is a CBOR array
//
//	[version, type, from, incarnation, ackUpTo, ackFor, body]
//
// and body is an array whose shape depends on the type (see the wire*
// structs). Claims travel column-wise in a batch, as two CBOR byte strings:
// the keys, 8 bytes each (little-endian), and for every claim six unsigned
// varints (backend index, generation, milliseconds after the batch's base
// time, HLC counter, expiry after the batch's base expiry, origin index), so
// a claim costs about 15 bytes and decoding is a tight loop, not reflection.
const WireVersion = 2

// Limits enforced by the decoder: a peer cannot make a node allocate
// unboundedly or loop on a hostile message.
const (
	MaxMessageBytes     = 16 << 20
	MaxClaimsPerMessage = 1 << 18
	MaxBackendsPerBatch = 4096
	MaxNameBytes        = 256
	MaxDigestBuckets    = 1 << 16
	claimFields         = 6
)

var (
	encMode cbor.EncMode
	decMode cbor.DecMode
)

func init() {
	var err error
	if encMode, err = (cbor.EncOptions{}).EncMode(); err != nil {
		panic(err)
	}
	decMode, err = cbor.DecOptions{
		MaxNestedLevels:   8,
		MaxArrayElements:  claimFields * MaxClaimsPerMessage,
		MaxMapPairs:       16,
		IndefLength:       cbor.IndefLengthForbidden,
		DupMapKey:         cbor.DupMapKeyEnforcedAPF,
		ExtraReturnErrors: cbor.ExtraDecErrorUnknownField,
	}.DecMode()
	if err != nil {
		panic(err)
	}
}

type wireHeader struct {
	_           struct{} `cbor:",toarray"`
	Version     uint8
	Type        uint8
	From        string
	Incarnation uint64
	AckUpTo     uint64
	AckFor      uint64
	Body        cbor.RawMessage
}

type wireBackend struct {
	_      struct{} `cbor:",toarray"`
	Name   string
	Gen    uint16
	State  uint8
	Time   uint64
	Origin uint32
}

type wireBatch struct {
	_        struct{} `cbor:",toarray"`
	Backends []wireBackend
	Origins  []uint32
	BaseTime uint64 // milliseconds
	BaseExp  int64
	Keys     []byte // 8 bytes per claim
	Fields   []byte // claimFields uvarints per claim
	Floor    int64
}

type wireDelta struct {
	_       struct{} `cbor:",toarray"`
	FromSeq uint64
	ToSeq   uint64
	Batch   wireBatch
}

type wireFull struct {
	_       struct{} `cbor:",toarray"`
	Epoch   uint64
	Chunk   uint32
	Chunks  uint32
	BaseSeq uint64
	Batch   wireBatch
}

type wireFullAck struct {
	_      struct{} `cbor:",toarray"`
	Epoch  uint64
	Chunk  uint32
	Chunks uint32
}

type wireDigest struct {
	_        struct{} `cbor:",toarray"`
	Now      int64
	Registry uint64
	Floor    int64
	Digest   []uint64
}

type wireRepairRequest struct {
	_       struct{} `cbor:",toarray"`
	Now     int64
	Buckets []uint32
}

type wireRepair struct {
	_     struct{} `cbor:",toarray"`
	Batch wireBatch
}

type wireEmpty struct {
	_ struct{} `cbor:",toarray"`
}

// Encode appends the wire form of m to dst.
func Encode(dst []byte, m *Message) ([]byte, error) {
	var body any
	switch m.Type {
	case MsgDelta:
		body = &wireDelta{FromSeq: m.FromSeq, ToSeq: m.ToSeq, Batch: toWire(&m.Batch)}
	case MsgAck:
		body = &wireEmpty{}
	case MsgFull:
		body = &wireFull{Epoch: m.Epoch, Chunk: m.Chunk, Chunks: m.Chunks, BaseSeq: m.BaseSeq, Batch: toWire(&m.Batch)}
	case MsgFullAck:
		body = &wireFullAck{Epoch: m.Epoch, Chunk: m.Chunk, Chunks: m.Chunks}
	case MsgDigest:
		body = &wireDigest{Now: m.Now, Registry: m.Registry, Floor: m.Batch.Floor, Digest: m.Digest}
	case MsgRepairRequest:
		body = &wireRepairRequest{Now: m.Now, Buckets: m.Buckets}
	case MsgRepair:
		body = &wireRepair{Batch: toWire(&m.Batch)}
	default:
		return dst, fmt.Errorf("crdt: cannot encode message type %v", m.Type)
	}
	raw, err := encMode.Marshal(body)
	if err != nil {
		return dst, fmt.Errorf("crdt: encode %v body: %w", m.Type, err)
	}
	h := wireHeader{Version: WireVersion, Type: uint8(m.Type), From: m.From, Incarnation: m.Incarnation,
		AckUpTo: m.AckUpTo, AckFor: m.AckFor, Body: raw}
	buf := bytes.NewBuffer(dst)
	if err := encMode.NewEncoder(buf).Encode(&h); err != nil {
		return dst, fmt.Errorf("crdt: encode %v: %w", m.Type, err)
	}
	return buf.Bytes(), nil
}

func toWire(b *Batch) wireBatch {
	w := wireBatch{Floor: b.Floor}
	w.Backends = make([]wireBackend, len(b.Backends))
	for i, e := range b.Backends {
		w.Backends[i] = wireBackend{Name: e.Name, Gen: e.Gen, State: uint8(e.State), Time: uint64(e.Time), Origin: uint32(e.Origin)}
	}
	if len(b.Claims) == 0 {
		return w
	}
	w.BaseTime, w.BaseExp = uint64(b.Claims[0].Time.Millis()), b.Claims[0].Expires
	for _, c := range b.Claims {
		w.BaseTime = min(w.BaseTime, uint64(c.Time.Millis()))
		w.BaseExp = min(w.BaseExp, c.Expires)
	}
	w.Keys = make([]byte, 8*len(b.Claims))
	w.Fields = make([]byte, 0, 8*len(b.Claims))
	originIdx := make(map[tree.NodeID]uint64, 4)
	for i, c := range b.Claims {
		binary.LittleEndian.PutUint64(w.Keys[8*i:], uint64(c.Key))
		oi, ok := originIdx[c.Origin]
		if !ok {
			oi = uint64(len(w.Origins))
			originIdx[c.Origin] = oi
			w.Origins = append(w.Origins, uint32(c.Origin))
		}
		for _, v := range [claimFields]uint64{uint64(c.Backend), uint64(c.Gen),
			uint64(c.Time.Millis()) - w.BaseTime, uint64(c.Time.Counter()),
			uint64(c.Expires - w.BaseExp), oi} {
			w.Fields = binary.AppendUvarint(w.Fields, v)
		}
	}
	return w
}

// DecodeError is a peer message that could not be decoded.
type DecodeError struct{ Reason string }

func (e *DecodeError) Error() string { return "crdt: bad message: " + e.Reason }

func bad(format string, args ...any) error { return &DecodeError{Reason: fmt.Sprintf(format, args...)} }

// Decode parses one message. It rejects malformed, truncated, oversized or
// out-of-range input with a *DecodeError and never panics; it allocates at
// most in proportion to len(data).
func Decode(data []byte) (*Message, error) {
	if len(data) > MaxMessageBytes {
		return nil, bad("%d bytes is over the %d-byte limit", len(data), MaxMessageBytes)
	}
	var h wireHeader
	if err := decMode.Unmarshal(data, &h); err != nil {
		return nil, bad("header: %v", err)
	}
	if h.Version != WireVersion {
		return nil, bad("unsupported version %d (this node speaks %d)", h.Version, WireVersion)
	}
	if h.Type == 0 || h.Type >= uint8(msgTypeEnd) {
		return nil, bad("unknown message type %d", h.Type)
	}
	if h.From == "" || len(h.From) > MaxNameBytes {
		return nil, bad("sender name of %d bytes", len(h.From))
	}
	m := &Message{Type: MsgType(h.Type), From: h.From, Incarnation: h.Incarnation, AckUpTo: h.AckUpTo, AckFor: h.AckFor}
	var err error
	switch m.Type {
	case MsgDelta:
		var b wireDelta
		if err = decMode.Unmarshal(h.Body, &b); err == nil {
			if b.ToSeq < b.FromSeq {
				return nil, bad("delta range (%d, %d] is reversed", b.FromSeq, b.ToSeq)
			}
			m.FromSeq, m.ToSeq = b.FromSeq, b.ToSeq
			err = fromWire(&b.Batch, &m.Batch)
		}
	case MsgAck:
		err = decMode.Unmarshal(h.Body, &wireEmpty{})
	case MsgFull:
		var b wireFull
		if err = decMode.Unmarshal(h.Body, &b); err == nil {
			if b.Chunks == 0 || b.Chunk >= b.Chunks || b.Chunks > MaxDigestBuckets {
				return nil, bad("full chunk %d of %d", b.Chunk, b.Chunks)
			}
			m.Epoch, m.Chunk, m.Chunks, m.BaseSeq = b.Epoch, b.Chunk, b.Chunks, b.BaseSeq
			err = fromWire(&b.Batch, &m.Batch)
		}
	case MsgFullAck:
		var b wireFullAck
		if err = decMode.Unmarshal(h.Body, &b); err == nil {
			if b.Chunks == 0 || b.Chunk >= b.Chunks || b.Chunks > MaxDigestBuckets {
				return nil, bad("full ack chunk %d of %d", b.Chunk, b.Chunks)
			}
			m.Epoch, m.Chunk, m.Chunks = b.Epoch, b.Chunk, b.Chunks
		}
	case MsgDigest:
		var b wireDigest
		if err = decMode.Unmarshal(h.Body, &b); err == nil {
			n := len(b.Digest)
			if n == 0 || n > MaxDigestBuckets || n&(n-1) != 0 {
				return nil, bad("digest of %d buckets", n)
			}
			m.Now, m.Registry, m.Batch.Floor, m.Digest = b.Now, b.Registry, b.Floor, b.Digest
		}
	case MsgRepairRequest:
		var b wireRepairRequest
		if err = decMode.Unmarshal(h.Body, &b); err == nil {
			if len(b.Buckets) > MaxDigestBuckets {
				return nil, bad("repair request for %d buckets", len(b.Buckets))
			}
			m.Now, m.Buckets = b.Now, b.Buckets
		}
	case MsgRepair:
		var b wireRepair
		if err = decMode.Unmarshal(h.Body, &b); err == nil {
			err = fromWire(&b.Batch, &m.Batch)
		}
	}
	if err != nil {
		var de *DecodeError
		if errors.As(err, &de) {
			return nil, err
		}
		return nil, bad("%v body: %v", m.Type, err)
	}
	return m, nil
}

func fromWire(w *wireBatch, b *Batch) error {
	if len(w.Backends) > MaxBackendsPerBatch {
		return bad("%d backends in one batch", len(w.Backends))
	}
	if len(w.Keys)%8 != 0 || len(w.Keys)/8 > MaxClaimsPerMessage {
		return bad("key column of %d bytes", len(w.Keys))
	}
	n := len(w.Keys) / 8
	if len(w.Fields) < claimFields*n {
		return bad("%d claims with %d bytes of fields", n, len(w.Fields))
	}
	if w.BaseTime >= 1<<47 {
		return bad("base time %d out of range", w.BaseTime)
	}
	b.Floor = w.Floor
	b.Backends = make([]tree.BackendEntry, len(w.Backends))
	for i, e := range w.Backends {
		if e.Name == "" || len(e.Name) > MaxNameBytes {
			return bad("backend name of %d bytes", len(e.Name))
		}
		if st := tree.BackendState(e.State); st != tree.BackendActive && st != tree.BackendRemoved {
			return bad("backend %q has unknown state %d", e.Name, e.State)
		}
		b.Backends[i] = tree.BackendEntry{Name: e.Name, Gen: e.Gen, State: tree.BackendState(e.State), Time: tree.Timestamp(e.Time), Origin: tree.NodeID(e.Origin)}
	}
	b.Claims = make([]WireClaim, n)
	fields := w.Fields
	var f [claimFields]uint64
	for i := 0; i < n; i++ {
		k := binary.LittleEndian.Uint64(w.Keys[8*i:])
		for j := range f {
			v, used := binary.Uvarint(fields)
			if used <= 0 {
				return bad("claim %d: malformed field %d", i, j)
			}
			f[j], fields = v, fields[used:]
		}
		bi, gen, dms, ctr, dexp, oi := f[0], f[1], f[2], f[3], f[4], f[5]
		switch {
		case k == 0:
			return bad("claim %d has key 0", i)
		case bi >= uint64(len(b.Backends)):
			return bad("claim %d refers to backend %d of %d", i, bi, len(b.Backends))
		case gen > math.MaxUint16 || ctr > math.MaxUint16:
			return bad("claim %d: generation %d or counter %d out of range", i, gen, ctr)
		case dms >= 1<<47 || w.BaseTime+dms >= 1<<47:
			return bad("claim %d: time out of range", i)
		case dexp > math.MaxInt64/2 || w.BaseExp > math.MaxInt64/2 || w.BaseExp < -math.MaxInt64/2:
			return bad("claim %d: expiry out of range", i)
		case oi >= uint64(len(w.Origins)):
			return bad("claim %d refers to origin %d of %d", i, oi, len(w.Origins))
		}
		b.Claims[i] = WireClaim{Key: tree.Key(k), Backend: uint32(bi), Gen: uint16(gen),
			Time: tree.MakeTimestamp(int64(w.BaseTime+dms), uint16(ctr)), Expires: w.BaseExp + int64(dexp), Origin: tree.NodeID(w.Origins[oi])}
	}
	if len(fields) != 0 {
		return bad("%d bytes after the last claim's fields", len(fields))
	}
	return nil
}
