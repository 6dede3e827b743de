package mesh

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
)

func sampleLoadMsgs() []loadMsg {
	return []loadMsg{
		{Seq: 1},
		{Seq: 7, Entries: []loadEntry{{Idx: 3, Units: 48_000, Requests: 2, InFlight: 5}}},
		{Seq: 1 << 40, Snapshot: true, Incarnation: 1<<64 - 1, Routed: 12345,
			Entries: []loadEntry{{Idx: 0, Units: 1}, {Idx: 65535, Units: maxLoadValue, Requests: 9, InFlight: 10, Written: 64 * 12345}}},
		{Seq: 3, Snapshot: true, Names: true, Incarnation: 42,
			Entries: []loadEntry{{Idx: 0, Name: "vllm-0"}, {Idx: 1, Name: "http://10.0.0.2:8000", Units: 5, Requests: 1, InFlight: 1}}},
	}
}

func TestLoadWireRoundTrip(t *testing.T) {
	for _, m := range sampleLoadMsgs() {
		data := appendLoad(nil, &m)
		if !isLoadMessage(data) {
			t.Fatalf("%+v: encoding does not start with the load magic", m)
		}
		var got loadMsg
		if err := decodeLoad(data, &got); err != nil {
			t.Fatalf("%+v: %v", m, err)
		}
		if len(got.Entries) == 0 {
			got.Entries = nil
		}
		if !reflect.DeepEqual(got, m) {
			t.Fatalf("round trip:\n got %+v\nwant %+v", got, m)
		}
	}
}

// A delta for one backend, the common message, stays under 20 bytes: the
// channel's budget is 64 bytes per routed request per peer, and a request
// makes two or three of them.
func TestLoadDeltaIsSmall(t *testing.T) {
	m := loadMsg{Seq: 100_000, Entries: []loadEntry{{Idx: 7, Units: 200_000, Requests: 12, InFlight: 40, Written: 5e9}}}
	if n := len(appendLoad(nil, &m)); n > 18 {
		t.Fatalf("a one-backend delta takes %d bytes, want <= 18", n)
	}
}

func TestLoadWireRejects(t *testing.T) {
	valid := appendLoad(nil, &loadMsg{Seq: 2, Snapshot: true, Names: true, Incarnation: 1,
		Entries: []loadEntry{{Idx: 1, Name: "b", Units: 3, Requests: 1, InFlight: 1}}})
	cases := map[string][]byte{
		"empty":            {},
		"not load":         {0x87, 0x02},
		"version 2":        {loadMagic, 2 << 4, 1, 0},
		"unknown flag":     {loadMagic, loadVersion<<4 | 8, 1, 0},
		"names, no snap":   {loadMagic, loadVersion<<4 | loadFlagNames, 1, 0},
		"truncated":        valid[:len(valid)-1],
		"trailing":         append(append([]byte{}, valid...), 0),
		"count lies":       {loadMagic, loadVersion << 4, 1, 100, 1, 1, 1, 1},
		"huge count":       {loadMagic, loadVersion << 4, 1, 0xff, 0xff, 0xff, 0xff, 0x0f},
		"overlong varint":  {loadMagic, loadVersion << 4, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 0},
		"index too large":  {loadMagic, loadVersion << 4, 1, 1, 0x80, 0x80, 0x04, 0, 0, 0},
		"value too large":  {loadMagic, loadVersion << 4, 1, 1, 0, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01, 0, 0},
		"empty name":       {loadMagic, loadVersion<<4 | 3, 1, 1, 0, 1, 0, 0, 0, 0, 0},
		"name not UTF-8":   {loadMagic, loadVersion<<4 | 3, 1, 1, 0, 1, 0, 2, 0xff, 0xfe, 0, 0, 0},
		"name beyond data": {loadMagic, loadVersion<<4 | 3, 1, 1, 0, 1, 0, 50, 'a', 0, 0, 0},
	}
	long := appendLoad(nil, &loadMsg{Seq: 1, Snapshot: true, Names: true, Incarnation: 1,
		Entries: []loadEntry{{Idx: 1, Name: strings.Repeat("x", 300)}}})
	cases["name too long"] = long
	for name, data := range cases {
		var m loadMsg
		if err := decodeLoad(data, &m); err == nil {
			t.Errorf("%s: %x decoded without an error: %+v", name, data, m)
		}
	}
}

// FuzzDecodeLoad: any bytes decode to an error or to a message that
// encodes back to the same bytes (the encoding is canonical), and never
// panic.
func FuzzDecodeLoad(f *testing.F) {
	for _, m := range sampleLoadMsgs() {
		f.Add(appendLoad(nil, &m))
	}
	f.Add([]byte{loadMagic, loadVersion << 4, 1, 0})
	f.Add([]byte{loadMagic})
	f.Fuzz(func(t *testing.T, data []byte) {
		var m loadMsg
		if err := decodeLoad(data, &m); err != nil {
			return
		}
		if len(m.Entries) > len(data) {
			t.Fatalf("%d entries from %d bytes", len(m.Entries), len(data))
		}
		again := appendLoad(nil, &m)
		var m2 loadMsg
		if err := decodeLoad(again, &m2); err != nil {
			t.Fatalf("re-encoding of %+v does not decode: %v", m, err)
		}
		if !bytes.Equal(appendLoad(nil, &m2), again) {
			t.Fatalf("encoding is not stable for %+v", m)
		}
	})
}
