package tree

import "strconv"

// KeyVersion numbers the way a prompt becomes keys: the block hash, the
// chain, the seed, and the router's rendering of a request into units.
// Raise it with any change that gives the same request other keys.
const KeyVersion = 1

// KeyScheme names what decides the keys a prompt's claims sit at and how
// a lookup finds them: KeyVersion, BlockTokens and CheckpointTokens, as
// "k1.b16.c512". Nodes whose schemes differ never share claims, and a node
// does not load a snapshot written under another scheme:
//   - another block size or key version gives the same prompt other keys,
//     which no request here looks up: they would only fill the index;
//   - other checkpoints hide claims from lookups, which probe this node's
//     checkpoints and then only up to the next one (Index.Lookup): a
//     peer's claim past a checkpoint it did not write is never found.
//
// Capacity is left out: it changes how many claims a node keeps, not where
// they sit.
func (c Config) KeyScheme() string {
	b := make([]byte, 0, 24)
	b = append(b, 'k')
	b = strconv.AppendInt(b, KeyVersion, 10)
	b = append(b, ".b"...)
	b = strconv.AppendInt(b, int64(c.BlockTokens), 10)
	b = append(b, ".c"...)
	b = strconv.AppendInt(b, int64(c.CheckpointTokens), 10)
	return string(b)
}
