package tree

import "math"

// Ending claims: an engine's KV events (package router/kvevents) say when a
// block leaves its cache, and the claim for it must end on every replica.
// The join orders values by expiry before time (Claim.Dominates), so a value
// with an earlier expiry can never replace a live one. A claim is ended
// instead by a tombstone: a value with the same generation and expiry as the
// live one, a later timestamp and the reserved origin EndedOrigin. It
// dominates the value it ends, never matches a lookup, and expires when the
// ended claim would have, so replicas that join it in any order hold it
// dead until then. A later store of the same block (a new claim, learned
// with a fresh expiry) dominates the tombstone in turn: expiries only grow.

// EndedOrigin is the origin of tombstones. NodeIDOf never returns it.
const EndedOrigin NodeID = math.MaxUint32

// Ended reports whether c is a tombstone.
func (c Claim) Ended() bool { return c.Origin == EndedOrigin }

// ChainTokens returns the key of one token block following prev: prev is
// uint64 of the Seed for a prompt's first block, else the previous block's
// Key. len(block) must be the Index's BlockTokens (a multiple of 8). It is
// the step Keyer.Tokens takes per block, for callers that learn blocks one
// at a time (an engine's KV events).
func ChainTokens(prev uint64, block []uint32) Key { return hashBlockTokens(prev, block) }

// End writes a tombstone over the live claim for (key, b), stamped ts, and
// returns it (ok false when there is no live claim to end, or it is ended
// already). The caller replicates the tombstone like any changed claim.
func (ix *Index) End(key Key, b BackendID, ts Timestamp, now int64) (Claim, bool) {
	return ix.EndExpiring(key, b, ts, now, math.MaxInt64)
}

// EndExpiring is End for a live claim that expires at maxExpires (ms) or
// before only: a router retracting what a failed attempt learned at
// dispatch (short-lived, provisional claims) leaves a longer-lived claim
// for the same block, which a concurrent answer confirmed or an engine's
// events leased meanwhile, live.
func (ix *Index) EndExpiring(key Key, b BackendID, ts Timestamp, now, maxExpires int64) (Claim, bool) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	i, found := ix.t.find(key, b)
	if !found {
		return Claim{}, false
	}
	cur := ix.t.load(i)
	if cur.Ended() || ix.dead(&cur, now) || cur.Expires > maxExpires {
		return Claim{}, false
	}
	if ts <= cur.Time { // a tombstone must dominate: later time at equal expiry
		ts = cur.Time + 1
	}
	c := Claim{Key: key, Backend: b, Gen: cur.Gen, Time: ts, Expires: cur.Expires, Origin: EndedOrigin}
	o := ix.upsert(&c, now, false)
	ix.t.done()
	ix.sweepSome(now)
	return c, o.Changed()
}
