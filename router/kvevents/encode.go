package kvevents

import (
	"encoding/binary"
	"math"
)

// Encoding selects how events are written: vLLM wrote them as positional
// arrays tagged by class name until mid-2026 and as maps with a "type" key
// since; a subscriber must accept both.
type Encoding uint8

const (
	// EncodingArray is the positional form: ["BlockStored", hashes, ...].
	EncodingArray Encoding = iota
	// EncodingMap is the map form: {"type": "BlockStored", "block_hashes": ...}.
	EncodingMap
)

// AppendBatch appends b in vLLM's wire format to dst: [ts, events] (and
// dp_rank when b.DPRank >= 0), each event in enc. Hashes are written as
// unsigned integers. Extra keys are written for blocks that have any.
func AppendBatch(dst []byte, b *Batch, enc Encoding) []byte {
	n := 2
	if b.DPRank >= 0 {
		n = 3
	}
	dst = appendArrayHeader(dst, n)
	dst = append(dst, 0xcb)
	dst = binary.BigEndian.AppendUint64(dst, math.Float64bits(b.TS))
	dst = appendArrayHeader(dst, len(b.Events))
	for i := range b.Events {
		dst = appendEvent(dst, &b.Events[i], enc)
	}
	if n == 3 {
		dst = appendInt(dst, int64(b.DPRank))
	}
	return dst
}

func appendEvent(dst []byte, e *Event, enc Encoding) []byte {
	var tag string
	var names []string
	switch e.Kind {
	case Stored:
		tag = "BlockStored"
		names = []string{"block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium", "lora_name"}
		if len(e.ExtraOff) > 0 {
			names = append(names, "extra_keys")
		}
	case Removed:
		tag = "BlockRemoved"
		names = []string{"block_hashes", "medium"}
	default:
		tag = "AllBlocksCleared"
	}
	if enc == EncodingMap {
		dst = appendMapHeader(dst, len(names)+1)
		dst = appendStr(dst, "type")
		dst = appendStr(dst, tag)
	} else {
		dst = appendArrayHeader(dst, len(names)+1)
		dst = appendStr(dst, tag)
	}
	for _, name := range names {
		if enc == EncodingMap {
			dst = appendStr(dst, name)
		}
		switch name {
		case "block_hashes":
			dst = appendArrayHeader(dst, len(e.Hashes))
			for _, h := range e.Hashes {
				dst = appendUint(dst, uint64(h))
			}
		case "parent_block_hash":
			if e.HasParent {
				dst = appendUint(dst, uint64(e.Parent))
			} else {
				dst = append(dst, 0xc0)
			}
		case "token_ids":
			dst = appendArrayHeader(dst, len(e.Tokens))
			for _, t := range e.Tokens {
				dst = appendUint(dst, uint64(t))
			}
		case "block_size":
			dst = appendInt(dst, int64(e.BlockSize))
		case "lora_id":
			if e.LoraID >= 0 {
				dst = appendInt(dst, e.LoraID)
			} else {
				dst = append(dst, 0xc0)
			}
		case "medium":
			switch e.Medium {
			case MediumCPU:
				dst = appendStr(dst, "CPU")
			case MediumOther:
				dst = appendStr(dst, "DISK")
			default:
				dst = appendStr(dst, "GPU")
			}
		case "lora_name":
			if e.LoraName != "" {
				dst = appendStr(dst, e.LoraName)
			} else {
				dst = append(dst, 0xc0)
			}
		case "extra_keys":
			blocks := len(e.ExtraOff) - 1
			dst = appendArrayHeader(dst, blocks)
			for i := 0; i < blocks; i++ {
				ks := e.BlockExtra(i)
				if len(ks) == 0 {
					dst = append(dst, 0xc0)
					continue
				}
				dst = appendArrayHeader(dst, len(ks))
				for _, k := range ks {
					if k.IsStr {
						dst = appendStr(dst, k.Str)
					} else {
						dst = appendInt(dst, 0)
					}
				}
			}
		}
	}
	return dst
}

func appendArrayHeader(dst []byte, n int) []byte {
	switch {
	case n < 16:
		return append(dst, 0x90|byte(n))
	case n <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(dst, 0xdc), uint16(n))
	}
	return binary.BigEndian.AppendUint32(append(dst, 0xdd), uint32(n))
}

func appendMapHeader(dst []byte, n int) []byte {
	switch {
	case n < 16:
		return append(dst, 0x80|byte(n))
	case n <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(dst, 0xde), uint16(n))
	}
	return binary.BigEndian.AppendUint32(append(dst, 0xdf), uint32(n))
}

func appendStr(dst []byte, s string) []byte {
	switch n := len(s); {
	case n < 32:
		dst = append(dst, 0xa0|byte(n))
	case n <= math.MaxUint8:
		dst = append(dst, 0xd9, byte(n))
	case n <= math.MaxUint16:
		dst = binary.BigEndian.AppendUint16(append(dst, 0xda), uint16(n))
	default:
		dst = binary.BigEndian.AppendUint32(append(dst, 0xdb), uint32(n))
	}
	return append(dst, s...)
}

func appendUint(dst []byte, v uint64) []byte {
	switch {
	case v <= 0x7f:
		return append(dst, byte(v))
	case v <= math.MaxUint8:
		return append(dst, 0xcc, byte(v))
	case v <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(dst, 0xcd), uint16(v))
	case v <= math.MaxUint32:
		return binary.BigEndian.AppendUint32(append(dst, 0xce), uint32(v))
	}
	return binary.BigEndian.AppendUint64(append(dst, 0xcf), v)
}

func appendInt(dst []byte, v int64) []byte {
	if v >= 0 {
		return appendUint(dst, uint64(v))
	}
	if v >= -32 {
		return append(dst, byte(int8(v)))
	}
	return binary.BigEndian.AppendUint64(append(dst, 0xd3), uint64(v))
}

// Frames is one published message as ZMQ frames: [topic, seq, payload].
// AppendSeq writes the 8-byte big-endian sequence number vLLM uses.
func AppendSeq(dst []byte, seq int64) []byte { return binary.BigEndian.AppendUint64(dst, uint64(seq)) }

// ParseSeq reads an 8-byte big-endian sequence number (ok false for any
// other length).
func ParseSeq(p []byte) (int64, bool) {
	if len(p) != 8 {
		return 0, false
	}
	return int64(binary.BigEndian.Uint64(p)), true
}
