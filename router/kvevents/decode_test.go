package kvevents

import (
	"bytes"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
	"unsafe"
)

// vllmArrayPayload is an EventBatch as msgspec writes it with the
// positional (array_like, tag=True) event encoding: [1.5, [["BlockStored",
// [123, 456], nil, [1..32], 16, nil, "GPU", nil]]].
func vllmArrayPayload() []byte {
	var b []byte
	b = append(b, 0x92, 0xcb, 0x3f, 0xf8, 0, 0, 0, 0, 0, 0)
	b = append(b, 0x91, 0x98, 0xab)
	b = append(b, "BlockStored"...)
	b = append(b, 0x92, 0x7b, 0xcd, 0x01, 0xc8, 0xc0, 0xdc, 0x00, 0x20)
	for t := byte(1); t <= 32; t++ {
		b = append(b, t)
	}
	b = append(b, 0x10, 0xc0, 0xa3, 'G', 'P', 'U', 0xc0)
	return b
}

// vllmMapPayload is the map ("type" key) encoding with a 32-byte sha256
// hash, a CPU medium, a data-parallel rank and an unknown future field.
func vllmMapPayload() []byte {
	var b []byte
	b = append(b, 0x93, 0xcb, 0x3f, 0xf8, 0, 0, 0, 0, 0, 0, 0x92)
	b = append(b, 0x84, 0xa4)
	b = append(b, "type"...)
	b = append(b, 0xac)
	b = append(b, "BlockRemoved"...)
	b = append(b, 0xac)
	b = append(b, "block_hashes"...)
	b = append(b, 0x91, 0xc4, 0x20)
	b = append(b, bytes.Repeat([]byte{0xab}, 32)...)
	b = append(b, 0xa6)
	b = append(b, "medium"...)
	b = append(b, 0xa3, 'C', 'P', 'U')
	b = append(b, 0xb5)
	b = append(b, "remaining_copy_counts"...)
	b = append(b, 0x91, 0x01)
	b = append(b, 0x81, 0xa4)
	b = append(b, "type"...)
	b = append(b, 0xb0)
	b = append(b, "AllBlocksCleared"...)
	b = append(b, 0x02) // dp rank 2
	return b
}

func TestDecodeVLLMArrayEncoding(t *testing.T) {
	var b Batch
	if err := Decode(vllmArrayPayload(), &b); err != nil {
		t.Fatal(err)
	}
	if b.TS != 1.5 || b.DPRank != -1 || len(b.Events) != 1 || b.Skipped != 0 {
		t.Fatalf("batch = ts %v rank %d events %d skipped %d", b.TS, b.DPRank, len(b.Events), b.Skipped)
	}
	e := b.Events[0]
	if e.Kind != Stored || len(e.Hashes) != 2 || e.Hashes[0] != 123 || e.Hashes[1] != 456 || e.HasParent ||
		e.BlockSize != 16 || len(e.Tokens) != 32 || e.Tokens[31] != 32 || e.LoraID != -1 || e.LoraName != "" ||
		e.Medium != MediumGPU || e.Group != -1 {
		t.Fatalf("event = %+v", e)
	}
}

func TestDecodeVLLMMapEncoding(t *testing.T) {
	var b Batch
	if err := Decode(vllmMapPayload(), &b); err != nil {
		t.Fatal(err)
	}
	if b.DPRank != 2 || len(b.Events) != 2 {
		t.Fatalf("batch = %+v", b)
	}
	rm, cl := b.Events[0], b.Events[1]
	if rm.Kind != Removed || rm.Medium != MediumCPU || len(rm.Hashes) != 1 || rm.Hashes[0] != hashBytes(bytes.Repeat([]byte{0xab}, 32)) {
		t.Fatalf("removed = %+v", rm)
	}
	if cl.Kind != Cleared {
		t.Fatalf("cleared = %+v", cl)
	}
}

func sampleBatch() Batch {
	toks := make([]uint32, 48)
	for i := range toks {
		toks[i] = uint32(1000 + i*7919)
	}
	return Batch{TS: 1234.5, DPRank: -1, Events: []Event{
		{Kind: Stored, Hashes: []Hash{1, 2, 1 << 63}, Parent: 99, HasParent: true, Tokens: toks, BlockSize: 16,
			LoraID: 3, LoraName: "sql-lora", Medium: MediumGPU, Group: -1,
			ExtraOff: []int32{0, 2, 2, 3}, Extra: []ExtraKey{{Str: "sql-lora", IsStr: true}, {Str: "salt", IsStr: true}, {}}},
		{Kind: Removed, Hashes: []Hash{7, 8}, Medium: MediumCPU, LoraID: -1, Group: -1},
		{Kind: Cleared, LoraID: -1, Group: -1},
	}}
}

func TestRoundTripBothEncodings(t *testing.T) {
	in := sampleBatch()
	for _, enc := range []Encoding{EncodingArray, EncodingMap} {
		p := AppendBatch(nil, &in, enc)
		var out Batch
		if err := Decode(p, &out); err != nil {
			t.Fatalf("enc %d: %v", enc, err)
		}
		if got, want := AppendBatch(nil, &out, enc), p; !bytes.Equal(got, want) {
			t.Fatalf("enc %d: re-encoding differs:\n%x\n%x", enc, got, want)
		}
		e := out.Events[0]
		if e.LoraName != "sql-lora" || e.Hashes[2] != 1<<63 || e.Parent != 99 || len(e.BlockExtra(0)) != 2 ||
			e.BlockExtra(0)[1].Str != "salt" || len(e.BlockExtra(1)) != 0 || e.BlockExtra(2)[0].IsStr {
			t.Fatalf("enc %d: stored = %+v", enc, e)
		}
	}
}

func TestDecodeReusesBuffers(t *testing.T) {
	in := sampleBatch()
	p := AppendBatch(nil, &in, EncodingArray)
	var out Batch
	if err := Decode(p, &out); err != nil {
		t.Fatal(err)
	}
	allocs := testing.AllocsPerRun(100, func() {
		if err := Decode(p, &out); err != nil {
			t.Fatal(err)
		}
	})
	// The lora name and extra-key strings are the only allocations.
	if allocs > 4 {
		t.Fatalf("Decode allocates %.0f times per batch with warm buffers", allocs)
	}
}

func TestDecodeSkipsBadEventsKeepsBatch(t *testing.T) {
	in := sampleBatch()
	in.Events[0].Tokens = in.Events[0].Tokens[:47] // not blocks x block size
	p := AppendBatch(nil, &in, EncodingArray)
	var out Batch
	if err := Decode(p, &out); err != nil {
		t.Fatal(err)
	}
	if out.Skipped != 1 || len(out.Events) != 2 || out.Events[0].Kind != Removed {
		t.Fatalf("skipped %d, events %+v", out.Skipped, out.Events)
	}
	// An unknown event type is skipped too.
	var b []byte
	b = append(b, 0x92, 0x00, 0x92, 0x92, 0xa6)
	b = append(b, "Future"...)
	b = append(b, 0x91, 0x01, 0x91, 0xb0)
	b = append(b, "AllBlocksCleared"...)
	if err := Decode(b, &out); err != nil {
		t.Fatal(err)
	}
	if out.Skipped != 1 || len(out.Events) != 1 || out.Events[0].Kind != Cleared {
		t.Fatalf("skipped %d, events %+v", out.Skipped, out.Events)
	}
}

func TestDecodeHostile(t *testing.T) {
	good := AppendBatch(nil, func() *Batch { b := sampleBatch(); return &b }(), EncodingMap)
	cases := map[string][]byte{
		"empty":            {},
		"nil":              {0xc0},
		"short batch":      {0x91, 0x00},
		"huge array":       {0xdd, 0xff, 0xff, 0xff, 0xff},
		"huge map":         {0xdf, 0x7f, 0xff, 0xff, 0xff},
		"huge events":      {0x92, 0x00, 0xdd, 0xff, 0xff, 0xff, 0xf0},
		"huge string":      {0x92, 0x00, 0x91, 0x91, 0xdb, 0xff, 0xff, 0xff, 0xff},
		"deep nesting":     append(append([]byte{0x92, 0x00, 0x91, 0x92, 0xa2, 'x', 'y'}, bytes.Repeat([]byte{0x91}, 100)...), 0x00),
		"invalid byte":     {0x92, 0x00, 0x91, 0xc1},
		"token negative":   append([]byte{0x92, 0x00, 0x91, 0x84, 0xa4, 't', 'y', 'p', 'e', 0xab}, append([]byte("BlockStored"), 0xa9, 't', 'o', 'k', 'e', 'n', '_', 'i', 'd', 's', 0x91, 0xff)...),
		"trailing bytes":   append(append([]byte{}, good...), 0x00),
		"truncated":        good[:len(good)-3],
		"ts is a string":   {0x92, 0xa1, 'x', 0x90},
		"uint64 too large": {0x93, 0x00, 0x90, 0xcf, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff},
	}
	for name, p := range cases {
		t.Run(name, func(t *testing.T) {
			var b Batch
			err := Decode(p, &b)
			var de *DecodeError
			if !errors.As(err, &de) {
				t.Fatalf("err = %v, want a *DecodeError", err)
			}
			if len(b.Events) != 0 {
				t.Fatalf("a failed decode left %d events", len(b.Events))
			}
			if !strings.HasPrefix(err.Error(), "kvevents: at byte") {
				t.Fatalf("error text %q", err)
			}
		})
	}
}

func TestSeqFrames(t *testing.T) {
	p := AppendSeq(nil, 42)
	if hex.EncodeToString(p) != "000000000000002a" {
		t.Fatalf("seq bytes %x", p)
	}
	if s, ok := ParseSeq(p); !ok || s != 42 {
		t.Fatalf("ParseSeq = %d %v", s, ok)
	}
	if s, ok := ParseSeq(AppendSeq(nil, -1)); !ok || s != -1 {
		t.Fatalf("end marker = %d %v", s, ok)
	}
	if _, ok := ParseSeq([]byte{1, 2}); ok {
		t.Fatal("short seq accepted")
	}
}

// batchRetained is the memory b's event buffers hold, over every slot.
func batchRetained(b *Batch) int {
	n := 0
	for _, ev := range b.Events[:cap(b.Events)] {
		n += ev.retainedBytes()
	}
	return n
}

// TestDecodeBoundsRetainedBuffers: messages of k small events then one
// large one, decoded into one Batch, do not park a large buffer in a new
// slot each time: what the Batch keeps stays within the retention bounds
// plus the message just decoded.
func TestDecodeBoundsRetainedBuffers(t *testing.T) {
	const large = 1 << 17 // hashes of the large event: 1 MiB decoded
	big := make([]Hash, large)
	for i := range big {
		big[i] = Hash(i + 1)
	}
	var b Batch
	for k := range 20 {
		in := &Batch{DPRank: -1}
		for j := range k {
			in.Events = append(in.Events, Event{Kind: Removed, Hashes: []Hash{Hash(j + 1)}, Group: -1})
		}
		in.Events = append(in.Events, Event{Kind: Removed, Hashes: big, Group: -1})
		for _, enc := range []Encoding{EncodingArray, EncodingMap} {
			if err := Decode(AppendBatch(nil, in, enc), &b); err != nil {
				t.Fatal(err)
			}
			if len(b.Events) != k+1 || len(b.Events[k].Hashes) != large {
				t.Fatalf("message %d: %d events decoded", k, len(b.Events))
			}
			current := 0 // what the message holds (append may have grown each buffer up to twice that)
			for _, ev := range b.Events {
				current += len(ev.Hashes)*8 + len(ev.Tokens)*4 + len(ev.ExtraOff)*4 + len(ev.Extra)*int(unsafe.Sizeof(ExtraKey{}))
			}
			if got, limit := batchRetained(&b), maxRetainedBytes+2*current; got > limit {
				t.Fatalf("after message %d the batch holds %d bytes, over %d (the bound plus twice the message's %d)", k, got, limit, current)
			}
		}
	}
	// A message of more slots than kept: the next one starts from fresh ones.
	many := &Batch{DPRank: -1}
	for j := range maxRetainedEvents + 1 {
		many.Events = append(many.Events, Event{Kind: Removed, Hashes: []Hash{Hash(j + 1)}, Group: -1})
	}
	if err := Decode(AppendBatch(nil, many, EncodingArray), &b); err != nil {
		t.Fatal(err)
	}
	if err := Decode(AppendBatch(nil, &Batch{DPRank: -1}, EncodingArray), &b); err != nil {
		t.Fatal(err)
	}
	if cap(b.Events) > maxRetainedEvents {
		t.Fatalf("%d event slots kept after a message of %d", cap(b.Events), len(many.Events))
	}
}
