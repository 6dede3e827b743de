package tree

// ClaimTime returns the timestamp of backend b's unexpired claim on the
// prefix of ch that is depth blocks deep, and whether there is one (of b's
// current generation, not ended). Lookup reports each backend's deepest
// claim only; a caller that needs to know how recently a shallower prefix
// was used there (another prompt may have refreshed a shared head since the
// deepest claim was stamped) asks here, one probe per depth. Like Lookup,
// it takes no lock unless the probe keeps racing with writers, and
// allocates nothing.
func (ix *Index) ClaimTime(ch *Chain, depth int32, b BackendID, now int64) (Timestamp, bool) {
	if depth < 1 || int(depth) > len(ch.Keys) || int(b) >= len(ix.reg.live) {
		return 0, false
	}
	var (
		buf   [16]uint64
		times [16]Timestamp
	)
	key, floor := uint64(ch.Keys[depth-1]), ix.floor.Load()
	n, ok := 0, false
	for try := 0; try < maxRetries && !ok; try++ {
		n, ok = ix.probe(ix.tab.Load(), key, now, floor, &buf, &times)
	}
	if !ok {
		n = ix.probeLocked(key, now, floor, &buf, &times)
	}
	for k, m := range buf[:n] {
		if BackendID(m) == b && ix.reg.matches(b, uint16(m>>16)) {
			return times[k], true
		}
	}
	return 0, false
}
