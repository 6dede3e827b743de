package tree

// Match is one backend's deepest matched prefix.
type Match struct {
	Backend BackendID
	// Blocks is the matched depth in blocks; multiply by the chain's
	// UnitsPerBlock for units.
	Blocks int32
	// Time is the timestamp of the claim at that depth: when the prefix was
	// last sent to the backend (learned or refreshed).
	Time Timestamp
}

// Result is the answer to a Lookup. Reuse it across lookups: it keeps its
// buffers.
type Result struct {
	// Matches holds, for every backend with at least one matching claim, its
	// deepest matched depth, deepest first. Several backends may match at the
	// same depth (a prefix deliberately held by more than one backend).
	Matches []Match
	// Deepest is the deepest matched depth over all backends, in blocks (0
	// when nothing matched).
	Deepest int32
	// Probes counts the table probes the lookup made.
	Probes int

	seen []uint64 // bitset over backend ids
}

// Depth returns the matched depth of backend b in blocks (0 if none).
func (r *Result) Depth(b BackendID) int32 {
	for _, m := range r.Matches {
		if m.Backend == b {
			return m.Blocks
		}
	}
	return 0
}

func (r *Result) reset(backends int) {
	r.Matches = r.Matches[:0]
	r.Deepest = 0
	r.Probes = 0
	words := (backends + 63) / 64
	if cap(r.seen) < words {
		r.seen = make([]uint64, words)
	}
	r.seen = r.seen[:words]
	clear(r.seen)
}

// maxRetries bounds how often a lookup retries a probe that raced with a
// writer before it takes the writers' lock instead, so a reader always makes
// progress.
const maxRetries = 8

// Lookup finds, for each backend, the deepest prefix of ch that an unexpired
// claim of the backend's current generation says it holds. It takes no lock
// and allocates nothing once res has grown to the number of backends.
//
// It does not probe every block. Learn writes a prompt's claims together, so
// a claim at depth d comes with claims on the same backend at every
// checkpoint at or above d that expire no earlier. Lookup therefore probes
// the checkpoints first (deepest first), which gives each backend's deepest
// checkpoint c, and then only the blocks between c and the next checkpoint,
// where that backend's deepest claim must be, stopping a window as soon as
// every backend it was probed for has matched. Backends with no checkpoint
// match are looked for below the first checkpoint. With checkpoints disabled
// every block is probed. A claim that arrives from a peer before the
// checkpoint claims of the same learn can be missed until they arrive too.
func (ix *Index) Lookup(ch *Chain, now int64, res *Result) {
	ix.LookupSince(ch, now, nil, res)
}

// LookupSince is Lookup counting, for each backend b with since[b] > 0,
// only claims stamped at or after since[b] (a Timestamp): a caller that
// knows a backend's cache has turned over since then (it was sent more than
// it holds) ignores older claims, which would match prefixes evicted long
// ago. since may be shorter than the registry; missing entries filter
// nothing.
func (ix *Index) LookupSince(ch *Chain, now int64, since []Timestamp, res *Result) {
	res.reset(len(ix.reg.live))
	l := lookup{ix: ix, ch: ch, now: now, floor: ix.floor.Load(), res: res, since: since}
	active := int(ix.reg.active.Load())
	n := len(ch.Keys)
	cp := ix.keyer.checkpointBlocks
	if cp == 0 || n < cp {
		l.window(n, 1, active)
		res.finish()
		return
	}
	for d := n / cp * cp; d >= cp; d -= cp {
		l.probeDepth(d)
		if len(res.Matches) >= active {
			break
		}
	}
	atCheckpoints := len(res.Matches)
	// res.Matches now holds each backend's deepest checkpoint, deepest
	// first. Probe the window above each distinct checkpoint depth.
	for i := 0; i < len(res.Matches); {
		c := res.Matches[i].Blocks
		j := i
		for j < len(res.Matches) && res.Matches[j].Blocks == c {
			j++
		}
		l.window(min(int(c)+cp-1, n), int(c)+1, j-i)
		i = j
	}
	if unmatched := active - atCheckpoints; unmatched > 0 {
		l.window(min(cp-1, n), 1, unmatched)
	}
	res.finish()
}

// lookup is the state of one Lookup call.
type lookup struct {
	ix         *Index
	ch         *Chain
	now, floor int64
	res        *Result
	since      []Timestamp // per backend: ignore older claims (nil: none)
	buf        [16]uint64
	times      [16]Timestamp
}

// window probes depths hi down to lo for want backends (those whose deepest
// checkpoint is just below the window) and stops once that many matched.
func (l *lookup) window(hi, lo int, want int) {
	found := 0
	for d := hi; d >= lo && (want <= 0 || found < want); d-- {
		found += l.probeDepth(d)
	}
}

// probeDepth probes the key at depth d (in blocks) and merges its holders
// into the result. It returns how many backends got a deeper match from it.
func (l *lookup) probeDepth(d int) int {
	ix, res := l.ix, l.res
	key := uint64(l.ch.Keys[d-1])
	res.Probes++
	n, ok := 0, false
	for try := 0; try < maxRetries && !ok; try++ {
		n, ok = ix.probe(ix.tab.Load(), key, l.now, l.floor, &l.buf, &l.times)
	}
	if !ok {
		n = ix.probeLocked(key, l.now, l.floor, &l.buf, &l.times)
	}
	improved := 0
	for k, m := range l.buf[:n] {
		b := BackendID(m)
		if !ix.reg.matches(b, uint16(m>>16)) {
			continue
		}
		t := l.times[k]
		if int(b) < len(l.since) && t < l.since[b] {
			continue
		}
		w, bit := b>>6, uint64(1)<<(b&63)
		if res.seen[w]&bit == 0 {
			res.seen[w] |= bit
			res.Matches = append(res.Matches, Match{Backend: b, Blocks: int32(d), Time: t})
			improved++
			continue
		}
		for i := range res.Matches {
			if res.Matches[i].Backend == b && res.Matches[i].Blocks < int32(d) {
				res.Matches[i].Blocks, res.Matches[i].Time = int32(d), t
				improved++
			}
		}
	}
	return improved
}

// finish orders the matches deepest first and sets Deepest.
func (r *Result) finish() {
	m := r.Matches
	for i := 1; i < len(m); i++ {
		v := m[i]
		j := i
		for j > 0 && (m[j-1].Blocks < v.Blocks || (m[j-1].Blocks == v.Blocks && m[j-1].Backend > v.Backend)) {
			m[j] = m[j-1]
			j--
		}
		m[j] = v
	}
	if len(m) > 0 {
		r.Deepest = m[0].Blocks
	}
}

// probe collects the meta words of the unexpired claims for key. It returns
// ok=false when the probe raced with a writer (or more than len(buf) claims
// matched) and must be retried.
func (ix *Index) probe(t *table, key uint64, now, floor int64, buf *[16]uint64, times *[16]Timestamp) (int, bool) {
	var rs readerStripes
	i := key >> t.shift
	st := i >> stripeShift
	if !rs.enter(t, st) {
		return 0, false
	}
	n := 0
	for {
		s := &t.slots[i]
		k := s.key.Load()
		if k == 0 {
			break
		}
		if k == key {
			e := int64(s.exp.Load())
			if m := s.meta.Load(); e > now && e > floor && NodeID(m>>32) != EndedOrigin {
				if n == len(buf) {
					return 0, false
				}
				buf[n] = m
				times[n] = Timestamp(s.time.Load())
				n++
			}
		}
		i = (i + 1) & t.mask
		if ns := i >> stripeShift; ns != st {
			st = ns
			if !rs.enter(t, st) {
				return 0, false
			}
		}
	}
	return n, rs.valid(t)
}

// probeLocked is probe under the writers' lock, the fallback that always
// succeeds. Matches beyond len(buf) are dropped: more than 16 backends
// holding one prefix is far beyond any sane replication of a hot prefix.
func (ix *Index) probeLocked(key uint64, now, floor int64, buf *[16]uint64, times *[16]Timestamp) int {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	t := ix.t
	n := 0
	for i := key >> t.shift; ; i = (i + 1) & t.mask {
		s := &t.slots[i]
		k := s.key.Load()
		if k == 0 {
			return n
		}
		if e, m := int64(s.exp.Load()), s.meta.Load(); k == key && e > now && e > floor && NodeID(m>>32) != EndedOrigin && n < len(buf) {
			buf[n] = m
			times[n] = Timestamp(s.time.Load())
			n++
		}
	}
}
