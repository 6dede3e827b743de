package router

import (
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
)

func TestParseORCA(t *testing.T) {
	cases := []struct {
		name, value string
		want        LoadReport
	}{
		{"vLLM TEXT", "TEXT named_metrics.kv_cache_usage_perc=0.4, named_metrics.num_requests_waiting=0.0",
			LoadReport{KVCacheUsage: 0.4, Has: HasKVCacheUsage | HasWaiting}},
		{"Envoy colon form", "TEXT cpu_utilization:0.3,mem_utilization:0.5,named_metrics.num_requests_running:4,rps_fractional:12.5,application_utilization:1.7",
			LoadReport{CPU: 0.3, Mem: 0.5, Running: 4, RPS: 12.5, AppUtil: 1.7, Has: HasCPU | HasMem | HasRunning | HasRPS | HasAppUtil}},
		{"case-insensitive format, whitespace", "  text   named_metrics.num_requests_waiting = 3 ,, named_metrics.kv_cache_usage_perc :0.25 ,",
			LoadReport{Waiting: 3, KVCacheUsage: 0.25, Has: HasWaiting | HasKVCacheUsage}},
		{"duplicate keys: sum counts, max usage", "TEXT named_metrics.kv_cache_usage_perc=0.2, named_metrics.num_requests_waiting=2, named_metrics.num_requests_running=1, named_metrics.kv_cache_usage_perc=0.7, named_metrics.num_requests_waiting=3, named_metrics.num_requests_running=5, named_metrics.kv_cache_usage_perc=0.1",
			LoadReport{KVCacheUsage: 0.7, Waiting: 5, Running: 6, Has: HasKVCacheUsage | HasWaiting | HasRunning}},
		{"deprecated usage name", "TEXT named_metrics.gpu_cache_usage_perc=0.9",
			LoadReport{KVCacheUsage: 0.9, Has: HasKVCacheUsage}},
		{"usage clamped, cpu not", "TEXT named_metrics.kv_cache_usage_perc=1.5, mem_utilization=2, cpu_utilization=1.5",
			LoadReport{KVCacheUsage: 1, Mem: 1, CPU: 1.5, Has: HasKVCacheUsage | HasMem | HasCPU}},
		{"unknown keys skipped, colon in a metric name", "TEXT utilization.gpu=0.5, request_cost.db:3, named_metrics.vllm:foo:9, eps=2",
			LoadReport{}},
		{"empty TEXT", "TEXT", LoadReport{}},
		{"tab after the format name", "TEXT\tnamed_metrics.num_requests_running=2", LoadReport{Running: 2, Has: HasRunning}},
		{"vLLM JSON", `JSON {"named_metrics": {"kv_cache_usage_perc": 0.4, "num_requests_waiting": 0.0}}`,
			LoadReport{KVCacheUsage: 0.4, Has: HasKVCacheUsage | HasWaiting}},
		{"proto3 JSON camelCase, string numbers, duplicates", `json {"cpuUtilization":"0.25","namedMetrics":{"num_requests_running":2,"num_requests_running":"3","gpu_cache_usage_perc":0.5},"requestCost":{"x":1},"rpsFractional":4}`,
			LoadReport{CPU: 0.25, Running: 5, KVCacheUsage: 0.5, RPS: 4, Has: HasCPU | HasRunning | HasKVCacheUsage | HasRPS}},
		{"JSON null named_metrics", `JSON {"named_metrics":null,"mem_utilization":0.1}`, LoadReport{Mem: 0.1, Has: HasMem}},
	}
	for _, c := range cases {
		got, err := ParseORCA(c.value)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if got != c.want {
			t.Errorf("%s:\n got %+v\nwant %+v", c.name, got, c.want)
		}
	}
}

// protoMsg is a minimal protobuf encoder for test vectors.
type protoMsg []byte

func (m protoMsg) tag(field, wt int) protoMsg { return binary.AppendUvarint(m, uint64(field<<3|wt)) }
func (m protoMsg) double(field int, f float64) protoMsg {
	return binary.LittleEndian.AppendUint64(m.tag(field, 1), math.Float64bits(f))
}
func (m protoMsg) varint(field int, v uint64) protoMsg {
	return binary.AppendUvarint(m.tag(field, 0), v)
}
func (m protoMsg) bytes(field int, b []byte) protoMsg {
	return append(binary.AppendUvarint(m.tag(field, 2), uint64(len(b))), b...)
}
func (m protoMsg) entry(field int, key string, f float64) protoMsg {
	return m.bytes(field, protoMsg(nil).bytes(1, []byte(key)).double(2, f))
}

func TestParseORCABinary(t *testing.T) {
	msg := protoMsg(nil).double(1, 0.5).double(2, 0.25).varint(3, 100).entry(4, "db", 7).entry(5, "gpu", 0.9).
		double(6, 12).double(7, 3).entry(8, "kv_cache_usage_perc", 0.3).entry(8, "num_requests_waiting", 2).
		entry(8, "num_requests_waiting", 1).entry(8, "kv_cache_usage_perc", 0.6).entry(8, "some_other", 1e9).
		double(9, 0.75).tag(99, 5)
	msg = append(msg, 1, 2, 3, 4)
	// A map entry with an unknown field and its value before its key.
	msg = msg.bytes(8, protoMsg(nil).double(2, 4).varint(3, 1).bytes(1, []byte("num_requests_running")))
	want := LoadReport{CPU: 0.5, Mem: 0.25, RPS: 12, AppUtil: 0.75, KVCacheUsage: 0.6, Waiting: 3, Running: 4,
		Has: HasCPU | HasMem | HasRPS | HasAppUtil | HasKVCacheUsage | HasWaiting | HasRunning}
	encodings := map[string]string{
		"std":       base64.StdEncoding.EncodeToString(msg),
		"raw std":   base64.RawStdEncoding.EncodeToString(msg),
		"url":       base64.URLEncoding.EncodeToString(msg),
		"raw url":   base64.RawURLEncoding.EncodeToString(msg),
		"std+space": " " + base64.StdEncoding.EncodeToString(msg) + " ",
	}
	for name, b64 := range encodings {
		got, err := ParseORCABinary(b64)
		if err != nil || got != want {
			t.Errorf("%s: got %+v, %v\nwant %+v", name, got, err, want)
		}
		got, err = ParseORCA("BIN " + b64)
		if err != nil || got != want {
			t.Errorf("BIN %s: got %+v, %v", name, got, err)
		}
	}
	if got, err := ParseORCA("bin "); err != nil || got != (LoadReport{}) {
		t.Errorf("empty BIN: %+v %v", got, err)
	}
	// A report larger than the stack buffer.
	big := protoMsg(nil)
	for range 100 {
		big = big.entry(8, "num_requests_running", 1)
	}
	if got, err := ParseORCABinary(base64.StdEncoding.EncodeToString(big)); err != nil || got.Running != 100 {
		t.Errorf("large BIN: %+v %v", got, err)
	}
}

func TestParseORCAErrors(t *testing.T) {
	b := func(m protoMsg) string { return "BIN " + base64.StdEncoding.EncodeToString(m) }
	cases := map[string]string{
		"no format":               "named_metrics.kv_cache_usage_perc=0.4",
		"empty":                   "",
		"unknown format":          "XML <a/>",
		"pair without separator":  "TEXT named_metrics.kv_cache_usage_perc",
		"not a number":            "TEXT named_metrics.kv_cache_usage_perc=abc",
		"NaN":                     "TEXT named_metrics.kv_cache_usage_perc=NaN",
		"Inf":                     "TEXT cpu_utilization=+Inf",
		"negative count":          "TEXT named_metrics.num_requests_waiting=-1",
		"negative unknown metric": "TEXT named_metrics.whatever=-1",
		"bad JSON":                "JSON {",
		"JSON not object":         "JSON [1]",
		"JSON named not object":   `JSON {"named_metrics":[1]}`,
		"JSON bool value":         `JSON {"named_metrics":{"num_requests_waiting":true}}`,
		"JSON string not number":  `JSON {"cpu_utilization":"high"}`,
		"JSON NaN string":         `JSON {"named_metrics":{"kv_cache_usage_perc":"NaN"}}`,
		"JSON Infinity string":    `JSON {"mem_utilization":"Infinity"}`,
		"JSON negative":           `JSON {"named_metrics":{"num_requests_running":-2}}`,
		"bad base64":              "BIN !!!!",
		"truncated tag":           b(protoMsg{0x80}),
		"field zero":              b(protoMsg{0x01, 1, 2, 3, 4, 5, 6, 7, 8}),
		"truncated double":        b(protoMsg(nil).tag(1, 1).append(1, 2, 3)),
		"truncated varint":        b(protoMsg(nil).tag(3, 0).append(0x80)),
		"truncated bytes":         b(protoMsg(nil).tag(8, 2).append(10, 1)),
		"truncated fixed32":       b(protoMsg(nil).tag(9, 5).append(1)),
		"group wire type":         b(protoMsg(nil).tag(4, 3)),
		"NaN cpu":                 b(protoMsg(nil).double(1, math.NaN())),
		"negative named":          b(protoMsg(nil).entry(8, "num_requests_waiting", -3)),
		"Inf unknown named":       b(protoMsg(nil).entry(8, "x", math.Inf(1))),
		"bad entry field":         b(protoMsg(nil).bytes(8, protoMsg(nil).tag(5, 3))),
		"truncated entry key":     b(protoMsg(nil).bytes(8, protoMsg(nil).tag(1, 2).append(9))),
		"truncated entry value":   b(protoMsg(nil).bytes(8, protoMsg(nil).tag(2, 1).append(9))),
		"too long":                "TEXT " + strings.Repeat("a=1,", 20000),
	}
	for name, v := range cases {
		got, err := ParseORCA(v)
		if err == nil {
			t.Errorf("%s: no error for %q (got %+v)", name, v, got)
			continue
		}
		if got != (LoadReport{}) {
			t.Errorf("%s: error %v but non-zero report %+v", name, err, got)
		}
		if !strings.HasPrefix(err.Error(), "orca: ") {
			t.Errorf("%s: error %q does not say where it comes from", name, err)
		}
	}
	if _, err := ParseORCA("YAML x: 1"); !errors.Is(err, ErrORCAFormat) {
		t.Errorf("unknown format error %v does not wrap ErrORCAFormat", err)
	}
	if _, err := ParseORCABinary(strings.Repeat("A", maxORCAValue+4)); err == nil {
		t.Error("oversized BIN accepted")
	}
}

func (m protoMsg) append(b ...byte) protoMsg { return append(m, b...) }

func FuzzParseORCA(f *testing.F) {
	for _, s := range []string{
		"TEXT named_metrics.kv_cache_usage_perc=0.4, named_metrics.num_requests_waiting=0.0",
		"TEXT cpu_utilization:0.3,named_metrics.x:1",
		`JSON {"named_metrics": {"kv_cache_usage_perc": 0.4}, "cpuUtilization": "0.5"}`,
		"BIN " + base64.StdEncoding.EncodeToString(protoMsg(nil).double(1, 0.5).entry(8, "num_requests_running", 3)),
		"BIN CAE=", "text a=1e308, b=1e-320", "json 1",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		checkReport := func(r LoadReport, err error) {
			if err != nil {
				if r != (LoadReport{}) {
					t.Fatalf("error %v with report %+v", err, r)
				}
				return
			}
			for _, x := range []float64{r.KVCacheUsage, r.Waiting, r.Running, r.CPU, r.Mem, r.AppUtil, r.RPS} {
				if math.IsNaN(x) || math.IsInf(x, 0) || x < 0 {
					t.Fatalf("%q: bad value in %+v", v, r)
				}
			}
			if r.KVCacheUsage > 1 || r.Mem > 1 {
				t.Fatalf("%q: usage not clamped: %+v", v, r)
			}
			if r.Waiting > maxLoadCount || r.Running > maxLoadCount || r.RPS > maxLoadCount {
				t.Fatalf("%q: count past the bound: %+v", v, r)
			}
		}
		checkReport(ParseORCA(v))
		checkReport(ParseORCABinary(v))
	})
}

func BenchmarkParseORCAText(b *testing.B) {
	v := "TEXT named_metrics.kv_cache_usage_perc=0.4132, named_metrics.num_requests_waiting=3.0, named_metrics.num_requests_running=17.0"
	b.ReportAllocs()
	b.SetBytes(int64(len(v)))
	for b.Loop() {
		if r, err := ParseORCA(v); err != nil || r.Running != 17 {
			b.Fatal(r, err)
		}
	}
}

func BenchmarkParseORCAJSON(b *testing.B) {
	v := `JSON {"named_metrics": {"kv_cache_usage_perc": 0.4132, "num_requests_waiting": 3.0, "num_requests_running": 17.0}}`
	b.ReportAllocs()
	for b.Loop() {
		if r, err := ParseORCA(v); err != nil || r.Running != 17 {
			b.Fatal(r, err)
		}
	}
}

func BenchmarkParseORCABinary(b *testing.B) {
	v := base64.StdEncoding.EncodeToString(protoMsg(nil).entry(8, "kv_cache_usage_perc", 0.41).
		entry(8, "num_requests_waiting", 3).entry(8, "num_requests_running", 17))
	b.ReportAllocs()
	for b.Loop() {
		if r, err := ParseORCABinary(v); err != nil || r.Running != 17 {
			b.Fatal(r, err)
		}
	}
}

func ExampleParseORCA() {
	// As vLLM sends it on a non-streaming reply to a request that asked for
	// endpoint-load-metrics-format: TEXT, from a data-parallel pair of engines.
	r, err := ParseORCA("TEXT named_metrics.kv_cache_usage_perc=0.4, named_metrics.num_requests_waiting=2.0, " +
		"named_metrics.kv_cache_usage_perc=0.55, named_metrics.num_requests_waiting=1.0")
	if err != nil {
		panic(err)
	}
	fmt.Println(r.KVCacheUsage, r.Waiting, r.Has&HasKVCacheUsage != 0, r.Has&HasRunning != 0)
	// Output: 0.55 3 true false
}

// TestParseORCABinarySkipsLikeProtobuf: what a protobuf parser skips, the
// decoder skips too: a whole group of an unknown field, a known field sent
// with an unexpected wire type, unknown fields inside a map entry.
func TestParseORCABinarySkipsLikeProtobuf(t *testing.T) {
	msg := protoMsg(nil).tag(20, 3).varint(1, 5).tag(20, 4) // group 20 {1: 5}
	msg = msg.varint(1, 7)                                  // cpu_utilization as a varint: not a double, skipped
	msg = msg.entry(8, "num_requests_waiting", 2).double(2, 0.5)
	msg = msg.bytes(8, protoMsg(nil).tag(7, 3).tag(7, 4).bytes(1, []byte("num_requests_running")).double(2, 3))
	got, err := ParseORCABinary(base64.StdEncoding.EncodeToString(msg))
	want := LoadReport{Mem: 0.5, Waiting: 2, Running: 3, Has: HasMem | HasWaiting | HasRunning}
	if err != nil || got != want {
		t.Fatalf("got %+v, %v; want %+v", got, err, want)
	}
}

// FuzzDecodeOrcaProto feeds raw protobuf bytes (no base64, so the fuzzer
// works on the wire format itself). Besides never panicking and never
// returning a partial report with an error, two reports that decode alone
// decode concatenated (protobuf merges concatenated messages), with counts
// summed and utilizations maximized.
func FuzzDecodeOrcaProto(f *testing.F) {
	f.Add([]byte(protoMsg(nil).double(1, 0.5).entry(8, "num_requests_running", 3)), []byte(protoMsg(nil).entry(8, "num_requests_running", 1)))
	f.Add([]byte(protoMsg(nil).tag(20, 3).tag(20, 4)), []byte{0x80})
	f.Add([]byte(protoMsg(nil).entry(8, "kv_cache_usage_perc", 0.7).double(9, 2)), []byte(protoMsg(nil).double(6, 3)))
	f.Fuzz(func(t *testing.T, a, b []byte) {
		var ra, rb, rab LoadReport
		errA := decodeOrcaProto(a, &ra)
		errB := decodeOrcaProto(b, &rb)
		errAB := decodeOrcaProto(append(append([]byte(nil), a...), b...), &rab)
		if errA != nil || errB != nil {
			return
		}
		if errAB != nil {
			if errors.Is(errAB, errLoadTotal) && (ra.Waiting+rb.Waiting > maxLoadCount || ra.Running+rb.Running > maxLoadCount || ra.RPS+rb.RPS > maxLoadCount) {
				return // each within the bound, not their sum
			}
			t.Fatalf("%x and %x decode alone but not concatenated: %v", a, b, errAB)
		}
		if rab.Has != ra.Has|rb.Has {
			t.Fatalf("fields %b | %b != %b", ra.Has, rb.Has, rab.Has)
		}
		if w := ra.Waiting + rb.Waiting; rab.Waiting != w && !(math.Abs(rab.Waiting-w) <= 1e-9*w) {
			t.Fatalf("waiting %v + %v != %v", ra.Waiting, rb.Waiting, rab.Waiting)
		}
		if rab.KVCacheUsage != max(ra.KVCacheUsage, rb.KVCacheUsage) {
			t.Fatalf("kv usage max(%v, %v) != %v", ra.KVCacheUsage, rb.KVCacheUsage, rab.KVCacheUsage)
		}
	})
}
