package sim

import (
	"context"
	"fmt"

	"github.com/kvmesh/kvmesh/router/kvevents"
)

// KV-cache events, as vLLM publishes them with --kv-events-config: each
// engine step's cache changes (blocks registered as prefix-cache entries,
// blocks evicted, the whole cache dropped by a restart) go out as one
// EventBatch over ZMQ PUB, with a ROUTER socket replaying recent batches.
// Block hashes are the sim's own chained block keys (integers, like vLLM's
// builtin hash); the first block of a chain has no parent and carries the
// request's cache_salt in its extra keys; models after Config.Models[0] are
// reported as LoRA adapters (lora_name), since the sim keys them apart.

// KVEventsConfig turns on the publisher. The zero value publishes nothing.
type KVEventsConfig struct {
	// Endpoint is bound by the publisher (tcp://127.0.0.1:0 picks a port;
	// vLLM's default is tcp://*:5557). Empty: no events.
	Endpoint string
	// ReplayEndpoint is bound for replay requests; empty: no replay.
	ReplayEndpoint string
	// Topic is every message's first frame (vLLM's default is empty).
	Topic string
	// Map selects the map ("type" key) event encoding instead of the
	// positional one.
	Map bool
	// Buffer is how many batches the replay socket keeps. Default 10,000,
	// vLLM's buffer_steps.
	Buffer int
}

// kvRecorder collects one engine step's events. Owned by the engine
// goroutine (writes happen under engine.mu, flushes after it).
type kvRecorder struct {
	pub    *kvevents.Publisher
	models []string
	batch  kvevents.Batch
	// open is the index in batch.Events of the BlockStored event being
	// extended for the current sequence (-1: none).
	open    int
	openSeq *seq
}

func newKVRecorder(cfg KVEventsConfig, models []string) (*kvRecorder, error) {
	if cfg.Endpoint == "" {
		return nil, nil
	}
	enc := kvevents.EncodingArray
	if cfg.Map {
		enc = kvevents.EncodingMap
	}
	pub, err := kvevents.NewPublisher(context.Background(), kvevents.PublisherConfig{
		Endpoint: cfg.Endpoint, ReplayEndpoint: cfg.ReplayEndpoint, Topic: cfg.Topic, Buffer: cfg.Buffer, Encoding: enc,
	})
	if err != nil {
		return nil, fmt.Errorf("sim: kv events: %w", err)
	}
	return &kvRecorder{pub: pub, models: models, batch: kvevents.Batch{DPRank: -1}, open: -1}, nil
}

// stored records that block b of s became a cache entry.
func (r *kvRecorder) stored(s *seq, b, blockSize int) {
	if r.open < 0 || r.openSeq != s || len(r.batch.Events[r.open].Hashes) == 0 ||
		r.batch.Events[r.open].Hashes[len(r.batch.Events[r.open].Hashes)-1] != kvevents.Hash(parentKey(s, b)) {
		e := kvevents.Event{Kind: kvevents.Stored, BlockSize: blockSize, LoraID: -1, Group: -1}
		if b > 0 {
			e.Parent, e.HasParent = kvevents.Hash(s.keys[b-1]), true
		} else if s.salt != "" {
			e.ExtraOff = []int32{0, 1}
			e.Extra = []kvevents.ExtraKey{{Str: s.salt, IsStr: true}}
		}
		if s.model > 0 && s.model < len(r.models) {
			e.LoraName = r.models[s.model]
			e.LoraID = int64(s.model)
		}
		r.batch.Events = append(r.batch.Events, e)
		r.open, r.openSeq = len(r.batch.Events)-1, s
	}
	e := &r.batch.Events[r.open]
	e.Hashes = append(e.Hashes, kvevents.Hash(s.keys[b]))
	e.Tokens = append(e.Tokens, s.tokens[b*blockSize:(b+1)*blockSize]...)
	if len(e.ExtraOff) > 0 && len(e.ExtraOff) < len(e.Hashes)+1 {
		e.ExtraOff = append(e.ExtraOff, int32(len(e.Extra)))
	}
}

func parentKey(s *seq, b int) uint64 {
	if b == 0 {
		return 0
	}
	return s.keys[b-1]
}

// removed records evicted cache entries.
func (r *kvRecorder) removed(keys []uint64) {
	if len(keys) == 0 {
		return
	}
	e := kvevents.Event{Kind: kvevents.Removed, LoraID: -1, Group: -1}
	for _, k := range keys {
		e.Hashes = append(e.Hashes, kvevents.Hash(k))
	}
	r.batch.Events = append(r.batch.Events, e)
	r.open = -1
}

// cleared records that the whole cache was dropped.
func (r *kvRecorder) cleared() {
	r.batch.Events = append(r.batch.Events[:0], kvevents.Event{Kind: kvevents.Cleared, LoraID: -1, Group: -1})
	r.open = -1
}

// flush publishes the step's events, if any. ts is the sim's clock.
func (r *kvRecorder) flush(ts float64) {
	r.open, r.openSeq = -1, nil
	if len(r.batch.Events) == 0 {
		return
	}
	r.batch.TS = ts
	_, _ = r.pub.Publish(&r.batch) // PUB never blocks on slow subscribers; a send error means closed
	r.batch.Events = r.batch.Events[:0]
}

func (r *kvRecorder) close() {
	if r != nil {
		r.pub.Close()
	}
}

// register makes block b of s a cache entry and records it.
func (e *engine) register(s *seq, b int) {
	id := s.blocks[b]
	was := e.pool.blocks[id].cached
	e.pool.register(id, s.keys[b])
	if e.kv != nil && !was && e.pool.blocks[id].cached {
		e.kv.stored(s, b, e.cfg.BlockSize)
	}
}

// flushKV publishes what the step changed in the cache: evictions first
// (they happened while scheduling), then the new entries.
func (e *engine) flushKV() {
	if e.kv == nil {
		return
	}
	e.mu.Lock()
	ev := e.pool.evicted
	e.pool.evicted = nil
	e.mu.Unlock()
	if len(ev) > 0 {
		stored := e.kv.batch.Events
		e.kv.batch.Events = nil
		e.kv.removed(ev)
		e.kv.batch.Events = append(e.kv.batch.Events, stored...)
	}
	e.kv.flush(e.v)
}

// clearedKV publishes AllBlocksCleared (the cache was reset).
func (e *engine) clearedKV() {
	if e.kv == nil {
		return
	}
	e.mu.Lock()
	e.pool.evicted = nil
	e.mu.Unlock()
	e.kv.cleared()
	e.kv.flush(e.v)
}

// KVEventsEndpoint is where the instance publishes KV events ("" when off).
func (in *Instance) KVEventsEndpoint() string {
	if in.eng.kv == nil {
		return ""
	}
	return in.eng.kv.pub.Addr()
}

// KVEventsReplayEndpoint is the instance's replay socket ("" when off).
func (in *Instance) KVEventsReplayEndpoint() string {
	if in.eng.kv == nil {
		return ""
	}
	return in.eng.kv.pub.ReplayAddr()
}
