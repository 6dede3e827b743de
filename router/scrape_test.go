package router

import (
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"testing"
	"testing/iotest"
)

// vllmPage returns a /metrics page shaped like vLLM v1's for the given
// engines (data-parallel ranks), with histograms and process metrics around
// the gauges and counters the router reads.
func vllmPage(model string, engines int) string {
	var b strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	w("# HELP python_gc_objects_collected_total Objects collected during gc\n# TYPE python_gc_objects_collected_total counter\n")
	for g := 0; g < 3; g++ {
		w("python_gc_objects_collected_total{generation=\"%d\"} %d.0\n", g, 1000+g)
	}
	w("# HELP process_resident_memory_bytes Resident memory size in bytes.\n# TYPE process_resident_memory_bytes gauge\nprocess_resident_memory_bytes 2.147483648e+09\n")
	gauge := func(name string, vals ...float64) {
		w("# HELP %s gauge.\n# TYPE %s gauge\n", name, name)
		for e, v := range vals {
			w("%s{engine=\"%d\",model_name=\"%s\"} %v\n", name, e, model, v)
		}
	}
	counter := func(name string, vals ...float64) {
		w("# HELP %s counter.\n# TYPE %s counter\n", name, name)
		for e, v := range vals {
			w("%s_total{engine=\"%d\",model_name=\"%s\"} %v\n", name, e, model, v)
			w("%s_created{engine=\"%d\",model_name=\"%s\"} 1.7e+09\n", name, e, model)
		}
	}
	per := func(v float64) []float64 {
		out := make([]float64, engines)
		for i := range out {
			out[i] = v + float64(i)
		}
		return out
	}
	gauge("vllm:num_requests_running", per(3)...)
	gauge("vllm:num_requests_waiting", per(1)...)
	usage := make([]float64, engines)
	for i := range usage {
		usage[i] = 0.25 + 0.125*float64(i)
	}
	gauge("vllm:kv_cache_usage_perc", usage...)
	counter("vllm:prefix_cache_queries", per(1000)...)
	counter("vllm:prefix_cache_hits", per(400)...)
	counter("vllm:prompt_tokens", per(5000)...)
	counter("vllm:generation_tokens", per(7000)...)
	for _, h := range []string{"vllm:time_to_first_token_seconds", "vllm:e2e_request_latency_seconds", "vllm:request_prompt_tokens",
		"vllm:inter_token_latency_seconds", "vllm:request_queue_time_seconds", "vllm:request_prefill_time_seconds",
		"vllm:request_decode_time_seconds", "vllm:request_generation_tokens"} {
		w("# HELP %s histogram.\n# TYPE %s histogram\n", h, h)
		for e := 0; e < engines; e++ {
			for _, le := range []string{"0.001", "0.005", "0.01", "0.02", "0.04", "0.06", "0.08", "0.1", "0.25", "0.5", "0.75", "1.0", "2.5", "5.0", "7.5", "10.0", "20.0", "40.0", "80.0", "+Inf"} {
				w("%s_bucket{engine=\"%d\",le=\"%s\",model_name=\"%s\"} 12.0\n", h, e, le, model)
			}
			w("%s_count{engine=\"%d\",model_name=\"%s\"} 12.0\n%s_sum{engine=\"%d\",model_name=\"%s\"} 3.5\n", h, e, model, h, e, model)
		}
	}
	return b.String()
}

const sglangPage = `# HELP sglang:prompt_tokens_total Number of prefill tokens processed.
# TYPE sglang:prompt_tokens_total counter
sglang:prompt_tokens_total{model_name="meta-llama/Llama-3.1-8B-Instruct"} 8.128902e+06
# HELP sglang:cached_tokens_total Number of cached prompt tokens.
# TYPE sglang:cached_tokens_total counter
sglang:cached_tokens_total{cache_source="device",model_name="meta-llama/Llama-3.1-8B-Instruct"} 3.0e+06
sglang:cached_tokens_total{cache_source="host",model_name="meta-llama/Llama-3.1-8B-Instruct"} 1.0e+06
# HELP sglang:token_usage The token usage
# TYPE sglang:token_usage gauge
sglang:token_usage{model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.28
# HELP sglang:num_running_reqs The number of running requests.
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{model_name="meta-llama/Llama-3.1-8B-Instruct"} 12.0
# HELP sglang:num_queue_reqs The number of requests in the waiting queue.
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{model_name="meta-llama/Llama-3.1-8B-Instruct"} 4.0
# HELP sglang:cache_hit_rate The cache hit rate
# TYPE sglang:cache_hit_rate gauge
sglang:cache_hit_rate{model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.007507552643049313
`

func parseString(t *testing.T, page, model string) ScrapedLoad {
	t.Helper()
	var s ScrapedLoad
	if err := ParseMetrics(strings.NewReader(page), model, &s); err != nil {
		t.Fatalf("ParseMetrics: %v", err)
	}
	return s
}

func TestParseMetricsVLLM(t *testing.T) {
	const model = "meta-llama/Llama-3.1-8B-Instruct"
	all := HasRunning | HasWaiting | HasKVCacheUsage | HasPrefixQueries | HasPrefixHits
	one := parseString(t, vllmPage(model, 1), model)
	if want := (ScrapedLoad{Running: 3, Waiting: 1, KVCacheUsage: 0.25, PrefixQueries: 1000, PrefixHits: 400, Has: all}); one != want {
		t.Errorf("1 engine:\n got %+v\nwant %+v", one, want)
	}
	// Two data-parallel engines: counts and counters summed, usage maxed.
	two := parseString(t, vllmPage(model, 2), "")
	if want := (ScrapedLoad{Running: 7, Waiting: 3, KVCacheUsage: 0.375, PrefixQueries: 2001, PrefixHits: 801, Has: all}); two != want {
		t.Errorf("2 engines:\n got %+v\nwant %+v", two, want)
	}
	if other := parseString(t, vllmPage(model, 2), "another-model"); other != (ScrapedLoad{}) {
		t.Errorf("samples of another model counted: %+v", other)
	}
	if lines := strings.Count(vllmPage(model, 1), "\n"); lines < 200 {
		t.Fatalf("benchmark page has only %d lines", lines)
	}
}

func TestParseMetricsSGLang(t *testing.T) {
	got := parseString(t, sglangPage, "meta-llama/Llama-3.1-8B-Instruct")
	want := ScrapedLoad{Running: 12, Waiting: 4, KVCacheUsage: 0.28, PrefixQueries: 8.128902e+06, PrefixHits: 4e6,
		Has: HasRunning | HasWaiting | HasKVCacheUsage | HasPrefixQueries | HasPrefixHits}
	if got != want {
		t.Errorf("\n got %+v\nwant %+v", got, want)
	}
}

func TestParseMetricsSyntax(t *testing.T) {
	cases := []struct {
		name, page, model string
		want              ScrapedLoad
	}{
		{"CRLF, timestamp, blank lines", "\r\n# comment\r\nvllm:num_requests_running 4 1700000000000\r\n\r\n", "",
			ScrapedLoad{Running: 4, Has: HasRunning}},
		{"no final newline", "vllm:num_requests_waiting{engine=\"0\"} 2", "", ScrapedLoad{Waiting: 2, Has: HasWaiting}},
		{"escaped quotes in labels, model match", `vllm:num_requests_running{x="a\"b\\c\n}",model_name="m\"1"} 5` + "\n", `m"1`,
			ScrapedLoad{Running: 5, Has: HasRunning}},
		{"model prefix does not match", `vllm:num_requests_running{model_name="m1x"} 5` + "\n" + `vllm:num_requests_running{model_name="m"} 5`, "m1",
			ScrapedLoad{}},
		{"sample without model_name kept", `vllm:num_requests_running{engine="0"} 5`, "m1", ScrapedLoad{Running: 5, Has: HasRunning}},
		{"spaces, trailing comma, exemplar", "  vllm:num_requests_running { engine = \"0\" , } 6 # {trace_id=\"x\"} 1\n", "",
			ScrapedLoad{Running: 6, Has: HasRunning}},
		{"NaN, Inf and negative ignored", "vllm:num_requests_running NaN\nvllm:num_requests_waiting +Inf\nvllm:kv_cache_usage_perc -1\nvllm:num_requests_running 2\n", "",
			ScrapedLoad{Running: 2, Has: HasRunning}},
		{"usage clamped, deprecated name", "vllm:gpu_cache_usage_perc 1.7\n", "", ScrapedLoad{KVCacheUsage: 1, Has: HasKVCacheUsage}},
		{"legacy prefix counters only when new absent", "vllm:gpu_prefix_cache_queries_total 10\nvllm:gpu_prefix_cache_hits_total 4\n", "",
			ScrapedLoad{PrefixQueries: 10, PrefixHits: 4, Has: HasPrefixQueries | HasPrefixHits}},
		{"legacy and new together: new wins", "vllm:gpu_prefix_cache_queries_total 10\nvllm:prefix_cache_queries_total 10\nvllm:gpu_prefix_cache_hits_total 4\nvllm:prefix_cache_hits_total 4\n", "",
			ScrapedLoad{PrefixQueries: 10, PrefixHits: 4, Has: HasPrefixQueries | HasPrefixHits}},
		{"lookalike names ignored, garbage in other lines ignored", "vllm:num_requests_running_total 9\nvllm:num_requests_runningx 9\nfoo{{{ bar\n", "", ScrapedLoad{}},
	}
	for _, c := range cases {
		if got := parseString(t, c.page, c.model); got != c.want {
			t.Errorf("%s:\n got %+v\nwant %+v", c.name, got, c.want)
		}
	}
}

func TestParseMetricsErrors(t *testing.T) {
	cases := map[string]string{
		"bad value":          "vllm:num_requests_running abc\n",
		"missing value":      "vllm:num_requests_running{engine=\"0\"}\n",
		"bad timestamp":      "vllm:num_requests_running 1 12:00\n",
		"trailing garbage":   "vllm:num_requests_running 1 1700000000 extra\n",
		"unterminated label": "vllm:num_requests_running{engine=\"0} 1\n",
		"unquoted label":     "vllm:num_requests_running{engine=0} 1\n",
		"missing equals":     "vllm:num_requests_running{engine} 1\n",
		"bad label name":     "vllm:num_requests_running{=\"x\"} 1\n",
		"bad escape":         "vllm:num_requests_running{a=\"\\t\"} 1\n",
		"missing comma":      "vllm:num_requests_running{a=\"x\" b=\"y\"} 1\n",
		"unclosed labels":    "vllm:num_requests_running{a=\"x\"",
	}
	for name, page := range cases {
		s := ScrapedLoad{Running: 99}
		err := ParseMetrics(strings.NewReader("vllm:num_requests_waiting 1\n"+page), "", &s)
		if err == nil || !strings.Contains(err.Error(), "line 2") {
			t.Errorf("%s: got error %v, want one naming line 2", name, err)
		}
		if s != (ScrapedLoad{}) {
			t.Errorf("%s: dst not zeroed on error: %+v", name, s)
		}
	}
	var s ScrapedLoad
	long := strings.Repeat("x", MaxMetricsLine+10) + "\n"
	if err := ParseMetrics(strings.NewReader(long), "", &s); !errors.Is(err, ErrMetricsTooLarge) {
		t.Errorf("long line: %v", err)
	}
	huge := io.MultiReader(strings.NewReader(strings.Repeat("# padding comment line\n", MaxMetricsBytes/23+10)))
	if err := ParseMetrics(huge, "", &s); !errors.Is(err, ErrMetricsTooLarge) {
		t.Errorf("huge page: %v", err)
	}
	boom := errors.New("connection reset")
	if err := ParseMetrics(iotest.ErrReader(boom), "", &s); !errors.Is(err, boom) {
		t.Errorf("read error not wrapped: %v", err)
	}
	if err := ParseMetrics(zeroReader{}, "", &s); !errors.Is(err, io.ErrNoProgress) {
		t.Errorf("stuck reader: %v", err)
	}
	// Byte-at-a-time reads give the same answer.
	page := vllmPage("m", 2)
	var a, b ScrapedLoad
	if err := ParseMetrics(iotest.OneByteReader(strings.NewReader(page)), "m", &a); err != nil {
		t.Fatal(err)
	}
	if err := ParseMetrics(iotest.DataErrReader(strings.NewReader(page)), "m", &b); err != nil || a != b || a.Running != 7 {
		t.Errorf("chunked reads: %+v vs %+v (%v)", a, b, err)
	}
}

type zeroReader struct{}

func (zeroReader) Read([]byte) (int, error) { return 0, nil }

func FuzzParseMetrics(f *testing.F) {
	f.Add([]byte(vllmPage("m", 2)), "m")
	f.Add([]byte(sglangPage), "")
	f.Add([]byte("vllm:num_requests_running{a=\"\\\"\",model_name=\"m\"} +Inf 1\r\nvllm:kv_cache_usage_perc 0.5 # x\n"), "m")
	f.Fuzz(func(t *testing.T, page []byte, model string) {
		var s ScrapedLoad
		if err := ParseMetrics(strings.NewReader(string(page)), model, &s); err != nil {
			if s != (ScrapedLoad{}) {
				t.Fatalf("error %v with non-zero result %+v", err, s)
			}
			return
		}
		for _, x := range []float64{s.Running, s.Waiting, s.KVCacheUsage, s.PrefixQueries, s.PrefixHits} {
			if math.IsNaN(x) || math.IsInf(x, 0) || x < 0 {
				t.Fatalf("bad value in %+v", s)
			}
		}
		if s.KVCacheUsage > 1 {
			t.Fatalf("usage %v > 1", s.KVCacheUsage)
		}
		if s.Running > maxLoadCount || s.Waiting > maxLoadCount || s.PrefixQueries > maxTokenCounter ||
			s.PrefixHits > maxTokenCounter || s.KVCapacityTokens > MaxKVCapacityTokens || math.IsNaN(s.KVCapacityTokens) {
			t.Fatalf("total past its bound in %+v", s)
		}
	})
}

func BenchmarkParseMetricsVLLM(b *testing.B) {
	page := vllmPage("meta-llama/Llama-3.1-8B-Instruct", 1)
	r := strings.NewReader(page)
	var s ScrapedLoad
	b.SetBytes(int64(len(page)))
	b.ReportAllocs()
	for b.Loop() {
		r.Reset(page)
		if err := ParseMetrics(r, "meta-llama/Llama-3.1-8B-Instruct", &s); err != nil || s.Running != 3 {
			b.Fatal(err, s)
		}
	}
	b.ReportMetric(float64(strings.Count(page, "\n")), "lines")
}

// HTTP bodies return their last bytes together with io.EOF: the final chunk
// may hold several lines and must be parsed line by line.
func TestParseMetricsDataWithEOF(t *testing.T) {
	page := "vllm:num_requests_running{model_name=\"m\"} 3\nvllm:num_requests_waiting{model_name=\"m\"} 5000\nvllm:kv_cache_usage_perc{model_name=\"m\"} 0.5\n"
	var got ScrapedLoad
	if err := ParseMetrics(iotest.DataErrReader(strings.NewReader(page)), "m", &got); err != nil {
		t.Fatal(err)
	}
	if got.Running != 3 || got.Waiting != 5000 || got.KVCacheUsage != 0.5 {
		t.Fatalf("%+v", got)
	}
}

// The KV capacity comes from vLLM's cache_config_info labels (per engine,
// summed) or SGLang's max_total_num_tokens; malformed figures are ignored.
func TestParseMetricsCapacity(t *testing.T) {
	for _, c := range []struct {
		page string
		want float64
	}{
		{`vllm:cache_config_info{block_size="16",cache_dtype="auto",engine="0",model_name="m",num_gpu_blocks="27000"} 1.0` + "\n", 27000 * 16},
		{`vllm:cache_config_info{engine="0",num_gpu_blocks="100",block_size="32"} 1` + "\n" +
			`vllm:cache_config_info{engine="1",num_gpu_blocks="100",block_size="32"} 1` + "\n", 6400},
		{"sglang:max_total_num_tokens 500000\n", 500000},
		{`vllm:cache_config_info{num_gpu_blocks="None",block_size="16"} 1` + "\n", 0},
		{`vllm:cache_config_info{num_gpu_blocks="-5",block_size="16"} 1` + "\n", 0},
		{`vllm:cache_config_info{block_size="16"} 1` + "\n", 0},
	} {
		var sl ScrapedLoad
		if err := ParseMetrics(strings.NewReader(c.page), "", &sl); err != nil {
			t.Fatalf("%q: %v", c.page, err)
		}
		if sl.KVCapacityTokens != c.want || (c.want > 0) != (sl.Has&HasKVCapacity != 0) {
			t.Errorf("%q: capacity %v (has %v), want %v", c.page, sl.KVCapacityTokens, sl.Has&HasKVCapacity != 0, c.want)
		}
	}
}
