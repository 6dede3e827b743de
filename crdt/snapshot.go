package crdt

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/kvmesh/kvmesh/tree"
)

// A snapshot is the claim state of one node written down, so that a node
// (or a whole mesh) restarted at once starts with what it knew instead of
// an empty index. It holds every live claim with its timestamp, expiry,
// origin and generation, the backend registry and the eviction floor, in
// the wire encoding of claim batches, and is checked whole by a SHA-256
// before anything is loaded: a truncated or corrupted file is refused, never
// half-applied.
//
// Format, version 3 (versions 1 and 2, still read, lack the key scheme):
//
//	"KVMSNAP3"              8 bytes: magic and version
//	uvarint created         Unix ms when it was taken
//	uvarint length, bytes   the key scheme of the index it was taken from
//	                        (tree.Config.KeyScheme, at most 64 bytes): a node
//	                        that derives keys otherwise does not load it
//	uvarint batches         how many batches follow
//	batches                 each a uvarint length and a CBOR batch (as in messages):
//	                        the registry in batches of registry entries alone (at
//	                        most MaxBackendsPerBatch each, as a peer's decoder takes);
//	                        then the claims, each batch with the entries its claims
//	                        name (by position); then batches of registry entries
//	                        alone: the names forgotten without an id
//	                        (tree.Index.ForgetRemoved). (Versions before the
//	                        registry could outgrow a batch put the whole registry in
//	                        every claims batch; Apply reads both.)
//	SHA-256                 32 bytes, of everything before
const snapshotMagic = "KVMSNAP1"

// snapshotMagicForgotten marked a snapshot with batches of forgotten names
// (version 2; the layout is version 1's), so that a version that does not
// forget names, which would join them all into its registry, refused it.
const snapshotMagicForgotten = "KVMSNAP2"

// snapshotMagicScheme is version 3, the one written: version 2's layout
// with the key scheme after the creation time. Versions before it refuse
// the file and start cold, as they must: they could not tell a snapshot
// whose keys they cannot match.
const snapshotMagicScheme = "KVMSNAP3"

// maxSchemeBytes bounds a snapshot's key scheme ("k1.b16.c512" is 11 bytes).
const maxSchemeBytes = 64

// SnapshotBatchClaims is how many claims go into one batch of a snapshot.
const SnapshotBatchClaims = 1 << 16

// MaxSnapshotBytes bounds what ParseSnapshot accepts: far more than a
// node's largest index (~15 bytes a claim, 16 million claims).
const MaxSnapshotBytes = 1 << 30

// SnapshotInfo describes a snapshot.
type SnapshotInfo struct {
	Created  int64 // Unix ms
	Claims   int
	Backends int
	Floor    int64
	Bytes    int

	// KeyScheme is the scheme of the index it was taken from
	// (tree.Config.KeyScheme); empty in versions 1 and 2.
	KeyScheme string
}

// AppendSnapshot appends a snapshot of ix's live claims at now to dst. It
// holds ix's writer lock while it walks the claims (about a millisecond per
// 200,000 slots).
func AppendSnapshot(dst []byte, ix *tree.Index, now int64) ([]byte, SnapshotInfo, error) {
	start := len(dst)
	// The registry without free ids (pos maps an id to its place).
	all := ix.Backends(nil)
	reg := make([]tree.BackendEntry, 0, len(all))
	pos := make([]uint32, len(all))
	for id := range all {
		if all[id].State != 0 {
			pos[id] = uint32(len(reg))
			reg = append(reg, all[id])
		}
	}
	forgotten := ix.AppendForgotten(nil)
	info := SnapshotInfo{Created: now, KeyScheme: ix.Config().KeyScheme(), Backends: len(reg) + len(forgotten), Floor: ix.Floor()}
	// The registry first, in batches a decoder takes (it can hold up to
	// tree's 65,535 backends): so entries without claims (removed, or
	// restarted cold) are restored too, and claims batches need only name
	// their own backends.
	var batches []Batch
	for rest := reg; len(rest) > 0; {
		k := min(len(rest), MaxBackendsPerBatch)
		batches = append(batches, Batch{Backends: rest[:k]})
		rest = rest[k:]
	}
	// at maps a registry position to its place in cur.Backends, plus one.
	at := make([]uint32, len(reg))
	var cur Batch
	flush := func() {
		batches = append(batches, cur)
		cur = Batch{}
		clear(at)
	}
	ix.Range(now, func(c *tree.Claim) bool {
		if int(c.Backend) >= len(all) || all[c.Backend].State == 0 {
			return true // registered (or its id given out again) during the walk: next snapshot
		}
		i := pos[c.Backend]
		if at[i] == 0 {
			if len(cur.Backends) == MaxBackendsPerBatch {
				flush()
			}
			cur.Backends = append(cur.Backends, reg[i])
			at[i] = uint32(len(cur.Backends))
		}
		cur.Claims = append(cur.Claims, WireClaim{Key: c.Key, Backend: at[i] - 1, Gen: c.Gen, Time: c.Time,
			Expires: c.Expires, Origin: c.Origin})
		if len(cur.Claims) == SnapshotBatchClaims {
			flush()
		}
		return true
	})
	if len(cur.Claims) > 0 || len(batches) == 0 {
		flush()
	}
	for i := range batches {
		batches[i].Floor = info.Floor // every batch, as before: old readers take it from any
	}
	// Then the names forgotten without an id (no claim refers to them), in
	// batches of registry entries alone.
	for rest := forgotten; len(rest) > 0; {
		k := min(len(rest), MaxBackendsPerBatch)
		batches = append(batches, Batch{Backends: rest[:k], Floor: info.Floor})
		rest = rest[k:]
	}
	dst = append(dst, snapshotMagicScheme...)
	dst = binary.AppendUvarint(dst, uint64(max(now, 0)))
	dst = binary.AppendUvarint(dst, uint64(len(info.KeyScheme)))
	dst = append(dst, info.KeyScheme...)
	dst = binary.AppendUvarint(dst, uint64(len(batches)))
	var buf bytes.Buffer
	for i := range batches {
		info.Claims += len(batches[i].Claims)
		w := toWire(&batches[i])
		buf.Reset()
		if err := encMode.NewEncoder(&buf).Encode(&w); err != nil {
			return dst[:start], SnapshotInfo{}, fmt.Errorf("crdt: encode snapshot batch: %w", err)
		}
		dst = binary.AppendUvarint(dst, uint64(buf.Len()))
		dst = append(dst, buf.Bytes()...)
	}
	sum := sha256.Sum256(dst[start:])
	dst = append(dst, sum[:]...)
	info.Bytes = len(dst) - start
	return dst, info, nil
}

// Snapshot is a parsed, fully checked snapshot, not yet applied.
type Snapshot struct {
	Info    SnapshotInfo
	batches []Batch
}

// ParseSnapshot checks data (its length, magic, checksum and every batch)
// and decodes it. Any defect is an error; nothing is applied anywhere.
func ParseSnapshot(data []byte) (*Snapshot, error) {
	if len(data) > MaxSnapshotBytes {
		return nil, fmt.Errorf("crdt: snapshot of %d bytes is over the %d-byte limit", len(data), MaxSnapshotBytes)
	}
	if len(data) < len(snapshotMagic)+sha256.Size {
		return nil, fmt.Errorf("crdt: snapshot of %d bytes is truncated", len(data))
	}
	magic := string(data[:len(snapshotMagic)])
	if magic != snapshotMagic && magic != snapshotMagicForgotten && magic != snapshotMagicScheme {
		return nil, errors.New("crdt: not a kvmesh snapshot (or an unsupported version)")
	}
	body, sum := data[:len(data)-sha256.Size], data[len(data)-sha256.Size:]
	if got := sha256.Sum256(body); !bytes.Equal(got[:], sum) {
		return nil, errors.New("crdt: snapshot checksum mismatch (truncated or corrupted)")
	}
	r := body[len(snapshotMagic):]
	next := func(what string) (uint64, error) {
		v, k := binary.Uvarint(r)
		if k <= 0 {
			return 0, fmt.Errorf("crdt: snapshot: malformed %s", what)
		}
		r = r[k:]
		return v, nil
	}
	created, err := next("creation time")
	if err != nil {
		return nil, err
	}
	var scheme string
	if magic == snapshotMagicScheme {
		size, err := next("key scheme length")
		if err != nil {
			return nil, err
		}
		if size > maxSchemeBytes {
			return nil, fmt.Errorf("crdt: snapshot: a key scheme of %d bytes (at most %d)", size, maxSchemeBytes)
		}
		if size > uint64(len(r)) {
			return nil, fmt.Errorf("crdt: snapshot: the key scheme (%d bytes) runs past the end", size)
		}
		scheme, r = string(r[:size]), r[size:]
	}
	n, err := next("batch count")
	if err != nil {
		return nil, err
	}
	if n > uint64(len(r)) { // every batch takes at least a byte
		return nil, fmt.Errorf("crdt: snapshot claims %d batches in %d bytes", n, len(r))
	}
	s := &Snapshot{Info: SnapshotInfo{Created: int64(min(created, 1<<62)), KeyScheme: scheme, Bytes: len(data)}}
	for i := uint64(0); i < n; i++ {
		size, err := next("batch length")
		if err != nil {
			return nil, err
		}
		if size > uint64(len(r)) {
			return nil, fmt.Errorf("crdt: snapshot batch %d of %d bytes runs past the end", i, size)
		}
		var w wireBatch
		if err := decMode.Unmarshal(r[:size], &w); err != nil {
			return nil, fmt.Errorf("crdt: snapshot batch %d: %v", i, err)
		}
		r = r[size:]
		var b Batch
		if err := fromWire(&w, &b); err != nil {
			return nil, fmt.Errorf("crdt: snapshot batch %d: %w", i, err)
		}
		s.Info.Claims += len(b.Claims)
		s.Info.Backends = max(s.Info.Backends, len(b.Backends))
		s.Info.Floor = max(s.Info.Floor, b.Floor)
		s.batches = append(s.batches, b)
	}
	if len(r) != 0 {
		return nil, fmt.Errorf("crdt: %d bytes after the snapshot's last batch", len(r))
	}
	return s, nil
}

// Fits reports whether the snapshot's claims can be read by ix: taken
// under the same key scheme (tree.Config.KeyScheme), or by a version that
// did not record one. A snapshot taken before index.block_tokens or
// index.checkpoint_tokens changed holds claims no lookup finds any longer:
// loaded, they would only fill the index, and go to the peers.
func (s *Snapshot) Fits(ix *tree.Index) error {
	if want := ix.Config().KeyScheme(); s.Info.KeyScheme != "" && s.Info.KeyScheme != want {
		return fmt.Errorf("crdt: the snapshot's keys were derived as %s and this index derives them as %s "+
			"(index.block_tokens or index.checkpoint_tokens changed since it was taken): its claims would not be found", s.Info.KeyScheme, want)
	}
	return nil
}

// SnapshotApplied says what Apply did.
type SnapshotApplied struct {
	Claims   int // claims joined into the index
	Rejected int // expired, evicted, older than what the index held, or of a backend that could not be registered
	Backends int // registry entries joined (or already held)
}

// Apply joins the snapshot into ix at now: the registry entries, the floor
// (unless it is beyond now + maxTTL, which no honest clock produces), and
// every claim still alive at now, with expiries capped at maxTTL from their
// timestamps. Joining is idempotent: what the index already holds wins
// where it dominates.
//
// The floor is an expiry on the clock that wrote the snapshot. A snapshot
// made after now was written by a clock running ahead of this one (by
// Created - now at least): its floor is lowered by as much, or it would end
// that much of every claim's life here, and peers' (see Replica.raiseFloor).
func (s *Snapshot) Apply(ix *tree.Index, now int64, maxTTL int64) SnapshotApplied {
	var out SnapshotApplied
	// Removals older than the forget horizon are kept by name, not given
	// an id: a snapshot taken after months of rollouts fits the registry.
	ix.ForgetRemoved(now, nil)
	var claims []tree.Claim
	for bi := range s.batches {
		b := &s.batches[bi]
		ids := make([]tree.BackendID, len(b.Backends))
		ok := make([]bool, len(b.Backends))
		for i, e := range b.Backends {
			id, _, err := ix.JoinBackendAt(e, min(s.Info.Created, now)) // it arrived by the snapshot's time
			if errors.Is(err, tree.ErrBackendForgotten) {
				if bi == 0 || len(b.Claims) == 0 {
					out.Backends++ // kept by name
				}
				continue
			}
			if err != nil {
				continue
			}
			ids[i], ok[i] = id, true
			if bi == 0 || len(b.Claims) == 0 { // the registry is in every claims batch
				out.Backends++
			}
		}
		if f := b.Floor; f > ix.Floor() {
			if f -= aheadOf(s.Info.Created, now); f > ix.Floor() && f <= now+maxTTL {
				ix.RaiseFloor(f, now)
			}
		}
		claims = claims[:0]
		for _, w := range b.Claims {
			if !ok[w.Backend] {
				out.Rejected++
				continue
			}
			c := tree.Claim{Key: w.Key, Backend: ids[w.Backend], Gen: w.Gen, Time: w.Time, Expires: w.Expires, Origin: w.Origin}
			c.Expires = min(c.Expires, c.Time.Millis()+maxTTL)
			claims = append(claims, c)
		}
		changed, counts := ix.UpsertBatch(claims, now, nil)
		out.Claims += len(changed)
		out.Rejected += counts[tree.RejectedExpired] + counts[tree.RejectedEvicted] + counts[tree.RejectedStale] + counts[tree.RejectedInvalid]
	}
	return out
}
