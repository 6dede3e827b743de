package crdt

import (
	"hash/fnv"

	"github.com/kvmesh/kvmesh/tree"
)

// Digests: the key space is cut into DigestBuckets ranges (by the top bits
// of the key) and each bucket's digest is the sum of a 64-bit hash of each
// live claim in it (backend by name, so the hash is the same on every node).
// Sums are order-independent, so two replicas with the same claims have the
// same digests. Two replicas compare digests and exchange only the claims of
// the buckets that differ.

func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

func nameHash(s string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(s))
	return h.Sum64()
}

func claimHash(c *tree.Claim, backend uint64) uint64 {
	h := splitmix(uint64(c.Key))
	h = splitmix(h ^ backend)
	h = splitmix(h ^ uint64(c.Gen)<<32 ^ uint64(c.Origin))
	h = splitmix(h ^ uint64(c.Time))
	return splitmix(h ^ uint64(c.Expires))
}

func entryHash(e *tree.BackendEntry) uint64 {
	h := splitmix(nameHash(e.Name))
	h = splitmix(h ^ uint64(e.Gen)<<8 ^ uint64(e.State))
	h = splitmix(h ^ uint64(e.Time))
	return splitmix(h ^ uint64(e.Origin))
}

// Digest computes the per-bucket digests of the live claims at time now
// into dst (resized to DigestBuckets), and the registry digest.
func (r *Replica) Digest(now int64, dst []uint64) ([]uint64, uint64) {
	n := r.cfg.DigestBuckets
	if cap(dst) < n {
		dst = make([]uint64, n)
	}
	dst = dst[:n]
	clear(dst)
	r.reg = r.ix.Backends(r.reg[:0])
	names := make([]uint64, len(r.reg))
	var reg uint64
	for i := range r.reg {
		if r.reg[i].State == 0 {
			continue // a free id (tree.Index.ForgetRemoved): no entry, no claims
		}
		names[i] = nameHash(r.reg[i].Name)
		reg += entryHash(&r.reg[i])
	}
	shift := 64 - bucketBits(n)
	r.ix.Range(now, func(c *tree.Claim) bool {
		b := 0
		if shift < 64 {
			b = int(uint64(c.Key) >> shift)
		}
		// The registry cannot change during the walk (it holds the index's
		// lock), so every claim's backend is in the snapshot.
		dst[b] += claimHash(c, names[c.Backend])
		return true
	})
	return dst, reg
}

// StartDigest queues a digest of the current state for a peer. The peer
// answers with the claims of the buckets that differ and a request for ours
// (or an empty request when nothing differs, which marks the peer
// converged). Call it periodically, one peer at a time.
func (r *Replica) StartDigest(peerName string, now int64) bool {
	p := r.peers[peerName]
	if p == nil {
		return false
	}
	d, reg := r.Digest(now, nil)
	p.control = append(p.control, &Message{Type: MsgDigest, Now: now, Digest: d, Registry: reg, Batch: Batch{Floor: r.ix.Floor()}})
	r.stats.DigestsSent++
	return true
}

func (r *Replica) onDigest(p *peer, m *Message, now int64) {
	r.observeLead(p, aheadOf(m.Now, now), true)
	r.raiseFloor(p, m.Batch.Floor, aheadOf(m.Now, now), now)
	if p.repairQueued() {
		// One round of repairs at a time per peer, as for repair requests:
		// each digest compares the whole index and may queue a repair per
		// bucket, so digests arriving faster than repairs drain (or from a
		// peer configured with other buckets, which differ everywhere)
		// must not pile up work and crowd out replication.
		r.stats.DigestsIgnored++
		return
	}
	var differ []uint32
	if len(m.Digest) != r.cfg.DigestBuckets {
		// Configured differently: compare everything.
		for b := 0; b < r.cfg.DigestBuckets; b++ {
			differ = append(differ, uint32(b))
		}
	} else {
		mine, reg := r.Digest(m.Now, nil)
		for b := range mine {
			if mine[b] != m.Digest[b] {
				differ = append(differ, uint32(b))
			}
		}
		if reg != m.Registry && len(differ) == 0 {
			differ = append(differ, 0) // repairs carry the whole registry
		}
	}
	// The request goes first: should the peer's send queue overflow with
	// the repairs, it is the other half of the exchange that is kept.
	p.control = append(p.control, &Message{Type: MsgRepairRequest, Now: m.Now, Buckets: differ})
	if len(differ) == 0 {
		p.converged, p.lastMatch = true, now
	} else {
		p.converged = false
		r.stats.DigestMismatches++
		r.queueRepair(p, differ, now)
	}
}
