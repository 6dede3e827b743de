package workload

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

const traceFile = "testdata/mooncake_conversation_trace.jsonl.gz"

// rawTrace reads the test trace with encoding/json only: the reference the
// loader is checked against.
type rawLine struct {
	Timestamp    int64   `json:"timestamp"`
	InputLength  int     `json:"input_length"`
	OutputLength int     `json:"output_length"`
	HashIDs      []int64 `json:"hash_ids"`
}

// readRawTrace returns the reference decoding, read once per test binary;
// callers must not modify it.
func readRawTrace(t testing.TB) []rawLine {
	t.Helper()
	raw, err := rawTraceOnce()
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

var rawTraceOnce = sync.OnceValues(func() ([]rawLine, error) {
	f, err := os.Open(traceFile)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return nil, err
	}
	data, err := io.ReadAll(zr)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(data)
	if got := hex.EncodeToString(sum[:]); got != "b8cbb061a85206d729d91cdc2981f43c9e0d99209dce588d3af5f7934408b9df" {
		return nil, fmt.Errorf("test trace sha256 %s: not the published Mooncake conversation trace", got)
	}
	var out []rawLine
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		var l rawLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			return nil, err
		}
		out = append(out, l)
	}
	return out, sc.Err()
})

// referenceBound is the textbook infinite-cache computation: walk each
// request's blocks while they were seen before, adding each block's tokens.
func referenceBound(lines []rawLine, until time.Duration) (hit, total int64, unique int) {
	seen := make(map[int64]bool)
	for _, l := range lines {
		if until > 0 && time.Duration(l.Timestamp)*time.Millisecond >= until {
			break
		}
		total += int64(l.InputLength)
		for k, id := range l.HashIDs {
			if !seen[id] {
				break
			}
			hit += int64(min(512, l.InputLength-512*k))
		}
		for _, id := range l.HashIDs {
			seen[id] = true
		}
	}
	return hit, total, len(seen)
}

func loadTrace(t testing.TB, o MooncakeOptions) *Workload {
	t.Helper()
	w, err := LoadMooncake(traceFile, o)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func TestMooncakeWholeTrace(t *testing.T) {
	raw := readRawTrace(t)
	w := loadTrace(t, DefaultMooncakeOptions())
	if len(w.Requests) != 12031 || len(raw) != 12031 || w.Trace.Lines != 12031 {
		t.Fatalf("%d requests from %d lines, reference %d: want 12031", len(w.Requests), w.Trace.Lines, len(raw))
	}
	b := w.Trace.Bound
	rate := b.HitRate()
	t.Logf("infinite-cache bound %.4f (%d of %d tokens), working set %d blocks, span %v",
		rate, b.HitTokens, b.PromptTokens, b.UniqueBlocks, w.Span)
	if got := fmt.Sprintf("%.1f%%", 100*rate); got != "37.4%" {
		t.Fatalf("infinite-cache bound %s, FIELD-NOTES says 37.4%%", got)
	}
	hit, total, unique := referenceBound(raw, 0)
	if b.HitTokens != hit || b.PromptTokens != total || b.UniqueBlocks != unique || b.BlockTokens != 512 {
		t.Fatalf("bound %+v, reference hit %d total %d unique %d", b, hit, total, unique)
	}
	if w.PromptTokens != total {
		t.Fatalf("sum of PromptTokens %d, trace input tokens %d", w.PromptTokens, total)
	}
	if mean := float64(total) / 12031; mean < 12034 || mean > 12036 {
		t.Fatalf("mean input %.1f, FIELD-NOTES says 12,035", mean)
	}
	if w.Span != 3536999*time.Millisecond {
		t.Fatalf("span %v", w.Span)
	}
	for i, r := range w.Requests {
		if r.PromptTokens != raw[i].InputLength || r.OutputTokens != raw[i].OutputLength {
			t.Fatalf("request %d: %d/%d tokens, trace %d/%d", i, r.PromptTokens, r.OutputTokens, raw[i].InputLength, raw[i].OutputLength)
		}
		if r.At != time.Duration(raw[i].Timestamp)*time.Millisecond {
			t.Fatalf("request %d at %v, trace %d ms", i, r.At, raw[i].Timestamp)
		}
		if r.Body != nil {
			t.Fatal("bodies materialised without Materialize")
		}
	}
	// Rendering is checked on a sample: the full trace is 824 MB of JSON.
	for i := 0; i < len(w.Requests); i += 401 {
		checkRequest(t, &w.Requests[i])
	}
	if w.MaxPromptTokens != 126195 {
		t.Fatalf("MaxPromptTokens %d", w.MaxPromptTokens)
	}
	checkConversations(t, w, raw)
}

// checkConversations asserts the inferred sessions' defining property: turns
// of a conversation arrive in order, and every later turn's hash ids start
// with all full blocks (at least two) of an earlier turn of its conversation.
func checkConversations(t *testing.T, w *Workload, raw []rawLine) {
	t.Helper()
	members := make(map[int][]int)
	multi, longest := 0, 0
	for i, r := range w.Requests {
		prev := members[r.Conversation]
		if r.Turn != len(prev) {
			t.Fatalf("request %d: turn %d after %d turns", i, r.Turn, len(prev))
		}
		if r.Turn > 0 {
			ids := raw[i].HashIDs
			extends := false
			for _, j := range prev {
				full := raw[j].InputLength / 512
				if full >= 2 && full <= len(ids) && slices.Equal(raw[j].HashIDs[:full], ids[:full]) {
					extends = true
					break
				}
			}
			if !extends {
				t.Fatalf("request %d (conversation %d turn %d) extends no earlier turn", i, r.Conversation, r.Turn)
			}
		}
		members[r.Conversation] = append(prev, i)
	}
	for _, m := range members {
		if len(m) > 1 {
			multi++
		}
		longest = max(longest, len(m))
	}
	t.Logf("%d conversations (%d with several turns, longest %d turns), %d groups", w.Conversations, multi, longest, w.Groups)
	if multi == 0 || w.Conversations != len(members) {
		t.Fatalf("%d conversations, %d multi-turn", w.Conversations, multi)
	}
}

func TestMooncakeWorkingSetWindows(t *testing.T) {
	raw := readRawTrace(t)
	for _, d := range []time.Duration{5 * time.Minute, 10 * time.Minute} {
		o := DefaultMooncakeOptions()
		o.Duration = d
		w := loadTrace(t, o)
		hit, total, unique := referenceBound(raw, d)
		b := w.Trace.Bound
		if b.UniqueBlocks != unique || b.HitTokens != hit || b.PromptTokens != total {
			t.Fatalf("first %v: bound %+v, reference hit %d total %d unique %d", d, b, hit, total, unique)
		}
		t.Logf("first %v: %d requests, working set %d blocks (%.1f M tokens), bound %.4f",
			d, len(w.Requests), b.UniqueBlocks, float64(b.UniqueBlocks)*512/1e6, b.HitRate())
	}
}

func TestMooncakeSlicing(t *testing.T) {
	raw := readRawTrace(t)
	o := DefaultMooncakeOptions()
	o.Start = 10 * time.Minute
	o.Duration = 2 * time.Minute
	o.Compression = 4
	w := loadTrace(t, o)
	var want []rawLine
	for _, l := range raw {
		ts := time.Duration(l.Timestamp) * time.Millisecond
		if ts >= o.Start && ts < o.Start+o.Duration {
			want = append(want, l)
		}
	}
	if len(w.Requests) != len(want) || len(want) == 0 {
		t.Fatalf("%d requests, want %d", len(w.Requests), len(want))
	}
	for i, r := range w.Requests {
		at := time.Duration(float64(time.Duration(want[i].Timestamp)*time.Millisecond-o.Start) / 4)
		if r.At != at || r.PromptTokens != want[i].InputLength {
			t.Fatalf("request %d: at %v tokens %d, want %v %d", i, r.At, r.PromptTokens, at, want[i].InputLength)
		}
	}
	if w.Span > 30*time.Second {
		t.Fatalf("2 minutes compressed 4x span %v", w.Span)
	}
	// The slice starts cold: its bound counts only reuse inside the slice.
	hit, total, unique := referenceBound(want, 0)
	if b := w.Trace.Bound; b.HitTokens != hit || b.PromptTokens != total || b.UniqueBlocks != unique {
		t.Fatalf("slice bound %+v, reference %d/%d/%d", b, hit, total, unique)
	}

	o = DefaultMooncakeOptions()
	o.Start = time.Minute
	o.MaxRequests = 50
	o.Materialize = true
	w = loadTrace(t, o)
	if len(w.Requests) != 50 {
		t.Fatalf("MaxRequests 50 gave %d", len(w.Requests))
	}
	first := 0
	for raw[first].Timestamp < 60000 {
		first++
	}
	for i := range w.Requests {
		r := &w.Requests[i]
		if r.Body == nil || r.PromptTokens != raw[first+i].InputLength {
			t.Fatalf("request %d: materialised %v, tokens %d want %d", i, r.Body != nil, r.PromptTokens, raw[first+i].InputLength)
		}
		checkRequest(t, r)
	}
}

func TestMooncakeCaps(t *testing.T) {
	raw := readRawTrace(t)[:2000]
	longer, outLonger := 0, 0
	for _, l := range raw {
		if l.InputLength > 8192 {
			longer++
		}
		if l.OutputLength > 100 {
			outLonger++
		}
	}
	o := DefaultMooncakeOptions()
	o.MaxRequests = 2000
	o.MaxInputTokens = 8192
	o.MaxOutputTokens = 100
	w := loadTrace(t, o)
	if len(w.Requests) != 2000 || w.Trace.Truncated != longer || w.Trace.OutputClamped != outLonger || longer == 0 {
		t.Fatalf("truncate: %d requests, %d truncated (want %d), %d output-capped (want %d)",
			len(w.Requests), w.Trace.Truncated, longer, w.Trace.OutputClamped, outLonger)
	}
	for i := range w.Requests {
		r := &w.Requests[i]
		if r.PromptTokens != min(raw[i].InputLength, 8192) || r.OutputTokens != min(raw[i].OutputLength, 100) {
			t.Fatalf("request %d: %d/%d tokens", i, r.PromptTokens, r.OutputTokens)
		}
		if i%50 == 0 || (r.PromptTokens == 8192 && i%10 == 0) {
			checkRequest(t, r)
		}
	}
	o.LongPrompts = SkipLongPrompts
	w = loadTrace(t, o)
	if w.Trace.Skipped < longer || w.MaxPromptTokens > 8192 || len(w.Requests) != 2000 {
		t.Fatalf("skip: %d requests, %d skipped (>= %d), max %d", len(w.Requests), w.Trace.Skipped, longer, w.MaxPromptTokens)
	}
}

// A request that shares k hash ids with an earlier one shares exactly its
// first 512k content words.
func TestMooncakeSharedBlocksShareText(t *testing.T) {
	trace := `{"timestamp": 0, "input_length": 1600, "output_length": 5, "hash_ids": [0, 1, 2, 3]}
{"timestamp": 5, "input_length": 1100, "output_length": 5, "hash_ids": [0, 1, 9]}
{"timestamp": 9, "input_length": 1700, "output_length": 5, "hash_ids": [0, 1, 2, 3]}
`
	w, err := ReadMooncake(strings.NewReader(trace), DefaultMooncakeOptions())
	if err != nil {
		t.Fatal(err)
	}
	words := func(i int) []string {
		_, b, err := simPromptTokens(w.Requests[i].BodyBytes())
		if err != nil || len(b.Messages) != 1 {
			t.Fatalf("request %d: %v", i, err)
		}
		return strings.Fields(b.Messages[0].Content)
	}
	a, b, c := words(0), words(1), words(2)
	if len(a) != 1597 || len(b) != 1097 || len(c) != 1697 {
		t.Fatalf("content words %d %d %d", len(a), len(b), len(c))
	}
	if strings.Join(a[:1024], " ") != strings.Join(b[:1024], " ") || a[1024] == b[1024] {
		t.Fatal("requests sharing 2 hash ids must share exactly 1024 words")
	}
	if strings.Join(a, " ") != strings.Join(c[:1597], " ") {
		t.Fatal("same hash ids with a longer last block must extend the text")
	}
	// The trace-level bound trusts hash ids: request 3's partial last block
	// counts its own 164 tokens.
	if want := int64(1024 + 1700); w.Trace.Bound.HitTokens != want {
		t.Fatalf("hit tokens %d, want %d", w.Trace.Bound.HitTokens, want)
	}
}

func TestMooncakeConversationInference(t *testing.T) {
	trace := `{"timestamp": 0, "input_length": 1500, "output_length": 5, "hash_ids": [0, 1, 2]}
{"timestamp": 1, "input_length": 1000, "output_length": 5, "hash_ids": [0, 4]}
{"timestamp": 2, "input_length": 2000, "output_length": 5, "hash_ids": [0, 1, 2, 3]}
{"timestamp": 3, "input_length": 1200, "output_length": 5, "hash_ids": [0, 4, 5]}
{"timestamp": 4, "input_length": 1300, "output_length": 5, "hash_ids": [0, 1, 6]}

{"timestamp": 5, "input_length": 400, "output_length": 0, "hash_ids": [0]}
`
	w, err := ReadMooncake(strings.NewReader(trace), DefaultMooncakeOptions())
	if err != nil {
		t.Fatal(err)
	}
	// Request 2 extends request 0's full blocks [0 1]; request 3 shares
	// request 1's second block but request 1 had one full block only, so it
	// starts a conversation in request 1's group; request 4 extends request
	// 0's [0 1] again.
	type cgt struct{ c, g, t int }
	want := []cgt{{0, 0, 0}, {1, 1, 0}, {0, 0, 1}, {2, 1, 0}, {0, 0, 2}, {3, 2, 0}}
	for i, r := range w.Requests {
		if got := (cgt{r.Conversation, r.Group, r.Turn}); got != want[i] {
			t.Errorf("request %d: conversation/group/turn %v, want %v", i, got, want[i])
		}
	}
	if w.Conversations != 4 || w.Groups != 3 || w.Trace.Lines != 7 {
		t.Fatalf("%d conversations, %d groups, %d lines", w.Conversations, w.Groups, w.Trace.Lines)
	}
	if r := w.Requests[5]; r.OutputTokens != 1 || w.Trace.OutputClamped != 1 {
		t.Fatalf("output_length 0 must become max_tokens 1 (got %d, clamped %d)", r.OutputTokens, w.Trace.OutputClamped)
	}
}

func TestMooncakeMalformedLines(t *testing.T) {
	good := `{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [0, 1]}`
	cases := []struct {
		name, bad, msg string
	}{
		{"not json", `{"timestamp": 0,`, "invalid JSON"},
		{"not an object", `[1, 2]`, "invalid JSON"},
		{"trailing garbage", good + ` x`, "invalid JSON"},
		{"missing timestamp", `{"input_length": 600, "output_length": 5, "hash_ids": [0, 1]}`, `missing "timestamp"`},
		{"missing input", `{"timestamp": 1, "output_length": 5, "hash_ids": [0, 1]}`, `missing "input_length"`},
		{"null output", `{"timestamp": 1, "input_length": 600, "output_length": null, "hash_ids": [0, 1]}`, `missing "output_length"`},
		{"missing hash ids", `{"timestamp": 1, "input_length": 600, "output_length": 5}`, `missing "hash_ids"`},
		{"string length", `{"timestamp": 1, "input_length": "600", "output_length": 5, "hash_ids": [0, 1]}`, "invalid JSON"},
		{"float timestamp", `{"timestamp": 1.5, "input_length": 600, "output_length": 5, "hash_ids": [0, 1]}`, "invalid JSON"},
		{"negative timestamp", `{"timestamp": -1, "input_length": 600, "output_length": 5, "hash_ids": [0, 1]}`, "timestamp -1 out of range"},
		{"huge timestamp", `{"timestamp": 9223372036854775, "input_length": 600, "output_length": 5, "hash_ids": [0, 1]}`, "timestamp 9223372036854775 out of range"},
		{"zero input", `{"timestamp": 1, "input_length": 0, "output_length": 5, "hash_ids": []}`, "input_length 0 out of range"},
		{"huge input", `{"timestamp": 1, "input_length": 99999999999, "output_length": 5, "hash_ids": [0]}`, "out of range"},
		{"negative output", `{"timestamp": 1, "input_length": 600, "output_length": -5, "hash_ids": [0, 1]}`, "output_length -5"},
		{"too few ids", `{"timestamp": 1, "input_length": 1025, "output_length": 5, "hash_ids": [0, 1]}`, "2 hash_ids for input_length 1025, want 3"},
		{"too many ids", `{"timestamp": 1, "input_length": 512, "output_length": 5, "hash_ids": [0, 1]}`, "want 1"},
		{"negative id", `{"timestamp": 1, "input_length": 600, "output_length": 5, "hash_ids": [0, -1]}`, "negative hash id -1 at position 1"},
		{"time goes back", `{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [0, 2]}`, "before the previous"},
		{"unchained ids", `{"timestamp": 9, "input_length": 600, "output_length": 5, "hash_ids": [7, 1]}`, "hash id 1 at position 1 follows 7, but on line 2 it followed 0"},
		{"below template", `{"timestamp": 9, "input_length": 2, "output_length": 5, "hash_ids": [8]}`, "below the 3 tokens"},
		{"long line", strings.Repeat(" ", maxLineBytes+10), "longer than"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// Line 1 is blank, line 2 good, line 3 a later good line, line 4 bad.
			later := strings.Replace(good, `"timestamp": 0`, `"timestamp": 1`, 1)
			trace := "\n" + good + "\r\n" + later + "\n" + tc.bad + "\n" + good + "\n"
			_, err := ReadMooncake(strings.NewReader(trace), DefaultMooncakeOptions())
			var le *LineError
			if !errors.As(err, &le) {
				t.Fatalf("error %v is not a *LineError", err)
			}
			if le.Line != 4 || !strings.Contains(err.Error(), tc.msg) || !strings.HasPrefix(err.Error(), "line 4: ") {
				t.Fatalf("error %q, want line 4 and %q", err, tc.msg)
			}
		})
	}
}

func TestMooncakeInputErrors(t *testing.T) {
	if _, err := LoadMooncake("testdata/does-not-exist.jsonl", DefaultMooncakeOptions()); err == nil {
		t.Fatal("missing file: no error")
	}
	// A gzip header followed by garbage.
	if _, err := ReadMooncake(strings.NewReader("\x1f\x8b\x08\x00garbage"), DefaultMooncakeOptions()); err == nil {
		t.Fatal("corrupt gzip: no error")
	}
	for _, mut := range []func(*MooncakeOptions){
		func(o *MooncakeOptions) { o.Compression = 0 },
		func(o *MooncakeOptions) { o.Compression = 1e-300 },
		func(o *MooncakeOptions) { o.Start = -1 },
		func(o *MooncakeOptions) { o.MaxInputTokens = 2 },
		func(o *MooncakeOptions) { o.LongPrompts = 7 },
		func(o *MooncakeOptions) { o.Body.Model = "" },
	} {
		o := DefaultMooncakeOptions()
		mut(&o)
		if _, err := ReadMooncake(strings.NewReader(""), o); err == nil {
			t.Fatalf("options %+v: no error", o)
		}
	}
	w, err := ReadMooncake(strings.NewReader(""), DefaultMooncakeOptions())
	if err != nil || len(w.Requests) != 0 || w.Trace.Bound.HitRate() != 0 {
		t.Fatalf("empty trace: %v, %+v", err, w)
	}
}

func FuzzParseMooncakeLine(f *testing.F) {
	f.Add([]byte(`{"timestamp": 0, "input_length": 6758, "output_length": 500, "hash_ids": [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13]}`))
	f.Add([]byte(`{"timestamp": 3, "input_length": 512, "output_length": 0, "hash_ids": [9], "extra": {"x": [1]}}`))
	f.Add([]byte(`{"timestamp": 1, "input_length": 1025, "output_length": 5, "hash_ids": [0, 1]}`))
	f.Add([]byte(`{"timestamp": -1}`))
	f.Add([]byte(`{"hash_ids": null}`))
	f.Add([]byte(`[]`))
	f.Add([]byte(`{"timestamp": 1e3, "input_length": 1, "output_length": 1, "hash_ids": [1]}`))
	f.Add([]byte("\xff\x00"))
	f.Fuzz(func(t *testing.T, line []byte) {
		rec, err := ParseMooncakeLine(line)
		if err != nil {
			if rec.HashIDs != nil || rec.InputLength != 0 {
				t.Fatalf("error %v with a non-zero record", err)
			}
			return
		}
		if rec.Timestamp < 0 || rec.InputLength < 1 || rec.OutputLength < 0 {
			t.Fatalf("accepted out-of-range record %+v", rec)
		}
		if len(rec.HashIDs) != (rec.InputLength+511)/512 {
			t.Fatalf("accepted %d ids for %d tokens", len(rec.HashIDs), rec.InputLength)
		}
		// An accepted record round-trips through its canonical encoding.
		canon, _ := json.Marshal(rawLine{rec.Timestamp, rec.InputLength, rec.OutputLength, rec.HashIDs})
		again, err := ParseMooncakeLine(canon)
		if err != nil || fmt.Sprint(again) != fmt.Sprint(rec) {
			t.Fatalf("round trip: %v, %+v vs %+v", err, again, rec)
		}
	})
}

// FuzzReadMooncake feeds whole files: the loader must return an error or a
// workload whose every body the reference counts at PromptTokens.
func FuzzReadMooncake(f *testing.F) {
	f.Add([]byte("{\"timestamp\": 0, \"input_length\": 600, \"output_length\": 5, \"hash_ids\": [0, 1]}\n{\"timestamp\": 2, \"input_length\": 40, \"output_length\": 5, \"hash_ids\": [0]}\n"))
	f.Add([]byte("\n\n{\"timestamp\": 0, \"input_length\": 3, \"output_length\": 0, \"hash_ids\": [5]}"))
	f.Add([]byte("{\"timestamp\": 5, \"input_length\": 600, \"output_length\": 5, \"hash_ids\": [0, 1]}\n{\"timestamp\": 2"))
	f.Add([]byte("\x1f\x8b"))
	f.Fuzz(func(t *testing.T, data []byte) {
		o := DefaultMooncakeOptions()
		o.MaxInputTokens = 4096 // keep rendering cheap
		w, err := ReadMooncake(strings.NewReader(string(data)), o)
		if err != nil {
			return
		}
		for i := range w.Requests {
			checkRequest(t, &w.Requests[i])
		}
		if hr := w.Trace.Bound.HitRate(); hr < 0 || hr > 1 {
			t.Fatalf("hit rate %v", hr)
		}
	})
}

// SpreadTies keeps every request and its order, spaces the requests of one
// quantized timestamp evenly up to the next timestamp, and leaves the
// first of each group where the trace put it.
func TestMooncakeSpreadTies(t *testing.T) {
	o := DefaultMooncakeOptions()
	o.Duration = 2 * time.Minute
	plain := loadTrace(t, o)
	o.SpreadTies = true
	spread := loadTrace(t, o)
	if len(spread.Requests) != len(plain.Requests) || len(plain.Requests) < 20 {
		t.Fatalf("%d requests spread, %d plain", len(spread.Requests), len(plain.Requests))
	}
	ties := 0
	for i := range plain.Requests {
		p, s := plain.Requests[i].At, spread.Requests[i].At
		if plain.Requests[i].PromptTokens != spread.Requests[i].PromptTokens {
			t.Fatalf("request %d changed", i)
		}
		if i > 0 {
			if s <= spread.Requests[i-1].At {
				t.Fatalf("request %d at %v, not after request %d at %v", i, s, i-1, spread.Requests[i-1].At)
			}
			if p == plain.Requests[i-1].At {
				ties++
			} else if s != p {
				t.Fatalf("request %d opens a group at %v but was moved to %v", i, p, s)
			}
		}
		if s < p || s >= p+3100*time.Millisecond {
			t.Fatalf("request %d moved from %v to %v, beyond its ~3 s quantum", i, p, s)
		}
	}
	if ties < len(plain.Requests)/2 {
		t.Fatalf("only %d of %d requests share a timestamp: is the trace still quantized?", ties, len(plain.Requests))
	}
}
