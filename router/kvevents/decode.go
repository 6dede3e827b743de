package kvevents

import (
	"math"
	"unsafe"
)

// Limits on what one event may carry. vLLM batches the blocks of one
// scheduler step; even a 128k-token prompt stored at once is 8,192 blocks of
// 16 tokens, far below these.
const (
	// MaxBlockSize is the largest block size accepted (tokens).
	MaxBlockSize = 4096
)

// Bounds on what a Batch keeps between messages. Decode reuses the buffers
// of the events before, and each event slot used to keep the largest
// buffers it ever held: messages of k small events then one large one park
// a large buffer in a new slot each time (20 messages storing 1 MiB each
// kept 161 MiB). A typical message (a scheduler step: a few events, tens of
// blocks) fits far below these, so it still decodes with no allocation; a
// larger one allocates what it needs, which costs little beside decoding
// it, and leaves at most these bounds behind.
const (
	// maxRetainedEntries: an event buffer (Hashes, Tokens, ExtraOff, Extra)
	// of a larger capacity is dropped before the next message. 64K entries
	// hold the tokens of a 64k-token prompt stored at once.
	maxRetainedEntries = 1 << 16
	// maxRetainedBytes bounds the event buffers kept across all slots;
	// slots past it lose theirs.
	maxRetainedBytes = 4 << 20
	// maxRetainedEvents bounds the event slots kept (~170 bytes each
	// without their buffers); a larger Events array is dropped whole.
	maxRetainedEvents = 1024
)

// Decode parses one msgpack payload, vLLM's EventBatch [ts, events,
// dp_rank?] (a map with the same field names is accepted too), into b,
// reusing b's buffers. Both event encodings are accepted in any mix:
// positional arrays whose first element is the class name ("BlockStored",
// "BlockRemoved", "AllBlocksCleared"), and maps with a "type" key.
//
// A structurally malformed payload is an error (*DecodeError) and b must be
// ignored. A well-formed event of an unknown type, or one whose fields
// disagree (token count not blocks x block size, a block size out of range),
// is dropped and counted in b.Skipped while the rest of the batch is kept.
func Decode(payload []byte, b *Batch) error {
	r := reader{b: payload}
	b.TS, b.DPRank, b.Skipped = 0, -1, 0
	b.trim()
	switch c := r.peek(); {
	case (c >= 0x90 && c <= 0x9f) || c == 0xdc || c == 0xdd:
		n := r.arrayLen()
		if n < 2 && r.err == nil {
			r.fail("event batch has %d fields, want at least 2", n)
		}
		if n >= 2 {
			b.TS = r.floatVal()
			r.events(b)
		}
		if n >= 3 {
			b.DPRank = r.optInt(-1)
		}
		for k := 3; k < n && r.err == nil; k++ {
			r.skip(1)
		}
	case (c >= 0x80 && c <= 0x8f) || c == 0xde || c == 0xdf:
		n := r.mapLen()
		for k := 0; k < n && r.err == nil; k++ {
			switch string(r.strBytes()) {
			case "ts":
				b.TS = r.floatVal()
			case "events":
				r.events(b)
			case "data_parallel_rank", "dp_rank":
				b.DPRank = r.optInt(-1)
			default:
				r.skip(1)
			}
		}
	default:
		r.fail("expected an event batch (array or map), found type byte 0x%02x", c)
	}
	if r.err == nil && r.i != len(payload) {
		r.fail("%d trailing bytes after the event batch", len(payload)-r.i)
	}
	if math.IsNaN(b.TS) || math.IsInf(b.TS, 0) {
		b.TS = 0
	}
	if r.err != nil {
		b.Events = b.Events[:0]
	}
	return r.err
}

// trim empties b for the next message, dropping what the messages before
// left beyond the retention bounds (maxRetainedEntries, maxRetainedBytes,
// maxRetainedEvents).
func (b *Batch) trim() {
	if cap(b.Events) > maxRetainedEvents {
		b.Events = nil
		return
	}
	b.Events = b.Events[:cap(b.Events)]
	total := 0
	for i := range b.Events {
		ev := &b.Events[i]
		if cap(ev.Hashes) > maxRetainedEntries {
			ev.Hashes = nil
		}
		if cap(ev.Tokens) > maxRetainedEntries {
			ev.Tokens = nil
		}
		if cap(ev.ExtraOff) > maxRetainedEntries {
			ev.ExtraOff = nil
		}
		if cap(ev.Extra) > maxRetainedEntries {
			ev.Extra = nil
		}
		n := ev.retainedBytes()
		if total+n > maxRetainedBytes {
			ev.Hashes, ev.Tokens, ev.ExtraOff, ev.Extra = nil, nil, nil, nil
			continue
		}
		total += n
	}
	b.Events = b.Events[:0]
}

// retainedBytes is the memory of e's buffers.
func (e *Event) retainedBytes() int {
	return cap(e.Hashes)*int(unsafe.Sizeof(Hash(0))) + cap(e.Tokens)*4 + cap(e.ExtraOff)*4 +
		cap(e.Extra)*int(unsafe.Sizeof(ExtraKey{}))
}

// optInt reads an integer or nil (def).
func (r *reader) optInt(def int64) int {
	if r.isNil() {
		return int(def)
	}
	v := r.intVal()
	if v < math.MinInt32 || v > math.MaxInt32 {
		r.fail("integer %d out of range", v)
		return int(def)
	}
	return int(v)
}

// events reads the events array into b.
func (r *reader) events(b *Batch) {
	n := r.arrayLen()
	for k := 0; k < n && r.err == nil; k++ {
		if len(b.Events) < cap(b.Events) {
			b.Events = b.Events[:len(b.Events)+1]
		} else {
			b.Events = append(b.Events, Event{})
		}
		ev := &b.Events[len(b.Events)-1]
		ev.reset()
		if !r.event(ev) || !ev.valid() {
			b.Events = b.Events[:len(b.Events)-1]
			if r.err == nil {
				b.Skipped++
			}
		}
	}
}

// Field ids shared by both encodings.
const (
	fHashes = iota
	fParent
	fTokens
	fBlockSize
	fLoraID
	fMedium
	fLoraName
	fExtraKeys
	fGroup
	fSkip
)

// Positional field order after the class-name tag (vLLM's struct order).
var (
	storedFields  = [...]int{fHashes, fParent, fTokens, fBlockSize, fLoraID, fMedium, fLoraName, fExtraKeys, fGroup}
	removedFields = [...]int{fHashes, fMedium, fGroup}
)

func fieldByName(name []byte) int {
	switch string(name) {
	case "block_hashes":
		return fHashes
	case "parent_block_hash":
		return fParent
	case "token_ids":
		return fTokens
	case "block_size":
		return fBlockSize
	case "lora_id":
		return fLoraID
	case "medium":
		return fMedium
	case "lora_name":
		return fLoraName
	case "extra_keys":
		return fExtraKeys
	case "group_idx":
		return fGroup
	}
	return fSkip
}

func kindOf(tag []byte) Kind {
	switch string(tag) {
	case "BlockStored":
		return Stored
	case "BlockRemoved":
		return Removed
	case "AllBlocksCleared":
		return Cleared
	}
	return 0
}

// event reads one event; false when it is of an unknown type (consumed).
func (r *reader) event(ev *Event) bool {
	switch c := r.peek(); {
	case (c >= 0x90 && c <= 0x9f) || c == 0xdc || c == 0xdd:
		n := r.arrayLen()
		if n == 0 {
			r.fail("empty event array")
			return false
		}
		ev.Kind = kindOf(r.strBytes())
		var fields []int
		switch ev.Kind {
		case Stored:
			fields = storedFields[:]
		case Removed:
			fields = removedFields[:]
		}
		for k := 1; k < n && r.err == nil; k++ {
			f := fSkip
			if k-1 < len(fields) {
				f = fields[k-1]
			}
			r.field(ev, f)
		}
	case (c >= 0x80 && c <= 0x8f) || c == 0xde || c == 0xdf:
		n := r.mapLen()
		for k := 0; k < n && r.err == nil; k++ {
			name := r.strBytes()
			if string(name) == "type" {
				ev.Kind = kindOf(r.strBytes())
				continue
			}
			r.field(ev, fieldByName(name))
		}
	default:
		r.fail("expected an event (array or map), found type byte 0x%02x", c)
	}
	return r.err == nil && ev.Kind != 0
}

// field reads one field's value into ev.
func (r *reader) field(ev *Event, f int) {
	switch f {
	case fHashes:
		n := r.arrayLen()
		for k := 0; k < n && r.err == nil; k++ {
			ev.Hashes = append(ev.Hashes, r.hashVal())
		}
	case fParent:
		if !r.isNil() {
			ev.Parent, ev.HasParent = r.hashVal(), true
		}
	case fTokens:
		n := r.arrayLen()
		if cap(ev.Tokens) < n {
			ev.Tokens = make([]uint32, 0, n)
		}
		for k := 0; k < n && r.err == nil; k++ {
			t := r.intVal()
			if t < 0 || t > math.MaxUint32 {
				r.fail("token id %d out of range", t)
				return
			}
			ev.Tokens = append(ev.Tokens, uint32(t))
		}
	case fBlockSize:
		ev.BlockSize = r.optInt(0)
	case fLoraID:
		if !r.isNil() {
			ev.LoraID = r.intVal()
		}
	case fMedium:
		if !r.isNil() {
			ev.Medium = mediumOf(r.strBytes())
		}
	case fLoraName:
		if !r.isNil() {
			if s := r.strBytes(); len(s) > 0 {
				ev.LoraName = string(s)
			}
		}
	case fExtraKeys:
		r.extraKeys(ev)
	case fGroup:
		ev.Group = r.optInt(-1)
	default:
		r.skip(1)
	}
}

// extraKeys reads list[tuple | None] | None: one entry per block.
func (r *reader) extraKeys(ev *Event) {
	if r.isNil() {
		return
	}
	n := r.arrayLen()
	ev.ExtraOff = append(ev.ExtraOff[:0], 0)
	for k := 0; k < n && r.err == nil; k++ {
		if !r.isNil() {
			m := r.arrayLen()
			for j := 0; j < m && r.err == nil; j++ {
				if c := r.peek(); (c >= 0xa0 && c <= 0xbf) || c == 0xd9 || c == 0xda || c == 0xdb {
					ev.Extra = append(ev.Extra, ExtraKey{Str: string(r.strBytes()), IsStr: true})
					continue
				}
				r.skip(2)
				ev.Extra = append(ev.Extra, ExtraKey{})
			}
		}
		ev.ExtraOff = append(ev.ExtraOff, int32(len(ev.Extra)))
	}
}

// valid checks that a decoded event's fields agree.
func (e *Event) valid() bool {
	switch e.Kind {
	case Stored:
		n := len(e.Hashes)
		if n == 0 || e.BlockSize < 1 || e.BlockSize > MaxBlockSize || len(e.Tokens) != n*e.BlockSize {
			return false
		}
		if len(e.ExtraOff) != 0 && len(e.ExtraOff) != n+1 {
			return false
		}
	case Removed:
		e.Tokens, e.ExtraOff = e.Tokens[:0], e.ExtraOff[:0]
	case Cleared:
		e.Hashes = e.Hashes[:0]
	}
	return true
}
