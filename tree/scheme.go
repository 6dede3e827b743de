package tree

import "strconv"

// KeyVersion numbers the way a prompt becomes keys: the block hash, the
// chain, the seed, and the router's rendering of a request into units.
// Raise it with any change that gives the same request other keys. Nodes
// whose KeyScheme differs never share claims, and a node does not load a
// snapshot written under another scheme: keys that can never match would
// only fill the index and crowd out the ones that do.
const KeyVersion = 1

// KeyScheme names what decides the key of a prompt's block under this
// configuration: KeyVersion and BlockTokens, as "k1.b16". Two nodes that
// announce the same scheme give the same prompt the same keys.
// CheckpointTokens and Capacity are left out: they change which claims a
// node learns and keeps, not what a key means, so nodes that differ there
// still read each other's claims (with checkpoints that differ, less
// deeply: Config asks for equal values).
func (c Config) KeyScheme() string {
	b := make([]byte, 0, 16)
	b = append(b, 'k')
	b = strconv.AppendInt(b, KeyVersion, 10)
	b = append(b, ".b"...)
	b = strconv.AppendInt(b, int64(c.BlockTokens), 10)
	return string(b)
}
