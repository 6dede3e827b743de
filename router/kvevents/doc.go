// Package kvevents ingests the KV-cache events that inference engines publish
// (vLLM's format: ZMQ PUB multipart [topic, 8-byte big-endian sequence,
// msgpack payload], payload [ts, events, dp_rank?]) and turns them into
// kvmesh claims: a stored block becomes a claim for its backend, a removed
// block ends it, a clear invalidates the backend.
//
// It owns:
//
//   - Decoding (decode.go, msgpack.go): a bounded, allocation-light msgpack
//     reader for BlockStored / BlockRemoved / AllBlocksCleared in both of
//     vLLM's encodings (positional arrays tagged by class name, and maps with
//     a "type" key). Outside bytes never panic or hang it; FuzzDecode checks.
//   - Encoding (encode.go): the same format written, for the simulator and
//     tests.
//   - Sequence tracking (seq.go): gaps, duplicates and publisher restarts,
//     pure, with time as an argument.
//   - Key mapping (mapper.go): engine block hash -> kvmesh chained key per
//     backend, bounded, with the lease each claim was last announced with.
//   - The subscriber (subscriber.go): one goroutine per engine stream that
//     connects to (or is connected to by) the engine's publisher, replays
//     gaps through the engine's ROUTER socket and writes claims through a
//     Sink.
//
// Everything but subscriber.go is pure: no goroutines, no clock, no I/O.
// kvevents may import tree and the ZMQ library. It must not import router,
// mesh, crdt, transport or cmd: the router and the mesh plug in through the
// Sink interface.
package kvevents
