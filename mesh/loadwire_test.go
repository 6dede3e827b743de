package mesh

import (
	"bytes"
	"math"
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
		{Seq: 9, Lessons: true, Entries: []loadEntry{
			{Idx: 2, Lesson: lessonWire{Stamp: 1_790_000_000_123, Scale: loadFracOne * 3 / 4, Learned: 64 * 1000, Doubt: loadFracOne / 5, DoubtN: 31}},
			{Idx: 65535, Lesson: lessonWire{Stamp: 1, Scale: maxLessonScale, Doubt: loadFracOne}}}},
		{Seq: 10, Lost: true, Entries: []loadEntry{
			{Idx: 4, Key: 0x9e3779b97f4a7c15, Age: 12},
			{Idx: 65535, Key: 1<<64 - 1, Age: maxLoadValue},
			{Idx: 0, Key: 0, Age: 0}}},
		{Seq: 11, Answers: true, Answered: answerTotals{N: 1_000_000, Prompt: 45_000_000_000, Cached: 41_000_000_000}},
		{Seq: 12, Answers: true},
		{Seq: 13, Prompts: true, Answered: answerTotals{Routed: 2_000_000, RoutedUnits: 27_000_000_000}},
		{Seq: 14, Prompts: true},
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

// A delta for one backend, the common message, stays near 20 bytes: the
// channel's budget is 64 bytes per routed request per peer, and a request
// makes two or three of them. Its sequence number, counted from the
// clock (loadSeqBase), takes 7 of them until 2042.
func TestLoadDeltaIsSmall(t *testing.T) {
	seq := loadSeqBase(2_272_000_000_000) + 100_000 // 2041-12
	m := loadMsg{Seq: seq, Entries: []loadEntry{{Idx: 7, Units: 200_000, Requests: 12, InFlight: 40, Written: 5e9}}}
	if n := len(appendLoad(nil, &m)); n > 20 {
		t.Fatalf("a one-backend delta takes %d bytes, want <= 20", n)
	}
}

// A lesson converts to wire units and back within their resolution, and
// out-of-range figures are clamped rather than sent.
func TestLessonWire(t *testing.T) {
	l := toLessonWire(1234, 0.75, 100_000, 0.2, 31)
	if l.Stamp != 1234 || l.Scale != loadFracOne*3/4 || l.Learned != 100_000/64*64 || l.Doubt != 13107 || l.DoubtN != 31 {
		t.Fatalf("lesson in wire units: %+v", l)
	}
	if l := toLessonWire(-1, 1e9, -5, 7, 1<<60); l.Stamp != 0 || l.Scale != maxLessonScale || l.Learned != 0 ||
		l.Doubt != loadFracOne || l.DoubtN != maxLoadValue {
		t.Fatalf("out-of-range lesson: %+v", l)
	}
	if l := toLessonWire(1, math.NaN(), math.Inf(1), math.NaN(), 0); l.Scale != 0 || l.Learned != maxLoadValue || l.Doubt != 0 {
		t.Fatalf("NaN and Inf lesson: %+v", l)
	}
}

func TestLoadWireRejects(t *testing.T) {
	valid := appendLoad(nil, &loadMsg{Seq: 2, Snapshot: true, Names: true, Incarnation: 1,
		Entries: []loadEntry{{Idx: 1, Name: "b", Units: 3, Requests: 1, InFlight: 1}}})
	cases := map[string][]byte{
		"empty":     {},
		"not load":  {0x87, 0x02},
		"version 2": {loadMagic, 2 << 4, 1, 0},
		// Answers: count, prompt, cached.
		"answers truncated":      {loadMagic, loadVersion<<4 | loadFlagAnswers, 1, 0},
		"answers cached > asked": {loadMagic, loadVersion<<4 | loadFlagAnswers, 1, 1, 10, 11},
		"answers trailing":       {loadMagic, loadVersion<<4 | loadFlagAnswers, 1, 1, 10, 10, 0},
		"answers too large":      {loadMagic, loadVersion<<4 | loadFlagAnswers, 1, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01, 0, 0},
		"answers and snapshot":   {loadMagic, loadVersion<<4 | loadFlagAnswers | loadFlagSnapshot, 1, 1, 10, 10},
		// Prompts: routed, units.
		"prompts truncated":  {loadMagic, loadVersion<<4 | loadFlagPrompts, 1, 5},
		"prompts trailing":   {loadMagic, loadVersion<<4 | loadFlagPrompts, 1, 5, 50, 0},
		"prompts too large":  {loadMagic, loadVersion<<4 | loadFlagPrompts, 1, 0, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01},
		"prompts + snapshot": {loadMagic, loadVersion<<4 | loadFlagPrompts | loadFlagSnapshot, 1, 1, 10, 10},
		"names, no snap":     {loadMagic, loadVersion<<4 | loadFlagNames, 1, 0},
		"truncated":          valid[:len(valid)-1],
		"trailing":           append(append([]byte{}, valid...), 0),
		"count lies":         {loadMagic, loadVersion << 4, 1, 100, 1, 1, 1, 1},
		"huge count":         {loadMagic, loadVersion << 4, 1, 0xff, 0xff, 0xff, 0xff, 0x0f},
		"overlong varint":    {loadMagic, loadVersion << 4, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 0},
		"index too large":    {loadMagic, loadVersion << 4, 1, 1, 0x80, 0x80, 0x04, 0, 0, 0},
		"value too large":    {loadMagic, loadVersion << 4, 1, 1, 0, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01, 0, 0},
		"empty name":         {loadMagic, loadVersion<<4 | 3, 1, 1, 0, 1, 0, 0, 0, 0, 0},
		"name not UTF-8":     {loadMagic, loadVersion<<4 | 3, 1, 1, 0, 1, 0, 2, 0xff, 0xfe, 0, 0, 0},
		"name beyond data":   {loadMagic, loadVersion<<4 | 3, 1, 1, 0, 1, 0, 50, 'a', 0, 0, 0},
		// A lesson: index, stamp, scale, learned, doubt, answers.
		"lessons and snapshot": {loadMagic, loadVersion<<4 | loadFlagLessons | loadFlagSnapshot, 1, 1, 0, 1, 0, 0, 0, 0},
		"lesson truncated":     {loadMagic, loadVersion<<4 | loadFlagLessons, 1, 1, 0, 1, 0, 0, 0},
		"scale too large":      {loadMagic, loadVersion<<4 | loadFlagLessons, 1, 1, 0, 1, 0x81, 0x80, 0x80, 0x02, 0, 0, 0},
		"doubt above 1":        {loadMagic, loadVersion<<4 | loadFlagLessons, 1, 1, 0, 1, 0, 0, 0x81, 0x80, 0x04, 0},
		// A lost mark: index, 8 key bytes, age.
		"lost and snapshot":  {loadMagic, loadVersion<<4 | loadFlagLost | loadFlagSnapshot, 1, 0, 0, 1, 0, 1, 2, 3, 4, 5, 6, 7, 8, 0},
		"lost key truncated": {loadMagic, loadVersion<<4 | loadFlagLost, 1, 1, 0x80, 0x80, 0x01, 1, 2, 3, 4, 5, 6, 7},
		"lost count lies":    {loadMagic, loadVersion<<4 | loadFlagLost, 1, 2, 0, 1, 2, 3, 4, 5, 6, 7, 8, 0, 0, 0, 0},
		"lost age too large": {loadMagic, loadVersion<<4 | loadFlagLost, 1, 1, 0, 1, 2, 3, 4, 5, 6, 7, 8, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01},
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
