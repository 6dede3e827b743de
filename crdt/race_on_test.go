//go:build race

package crdt

// raceEnabled shrinks the randomized simulation under the race detector,
// which slows it ~10x; the full sizes run without -race and with -crdt.long.
const raceEnabled = true
