package bench

import (
	"bufio"
	"bytes"
	"strings"
	"testing"
	"time"
)

// The harness reads bytes from outside: answer streams, metrics pages and
// route headers. None of them may panic or hang it, whatever they hold.

func FuzzReadStream(f *testing.F) {
	f.Add([]byte(roleEvent + tokenEvent + usageEvent + doneEvent))
	f.Add([]byte("data: [DONE]\n\n"))
	f.Add([]byte(`data: {"error":{"message":"x"}}` + "\n\n"))
	f.Add([]byte("data: {\"usage\":{\"completion_tokens\":99999999999999999999}}\n"))
	f.Add([]byte(": comment\r\nevent: x\r\ndata: {\"choices\":[{\"text\":\"a\"}]}\r\n\r\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		var s Sample
		err := readStream(bufio.NewReaderSize(bytes.NewReader(in), 16), time.Now(), &s)
		if s.OutputTokens < 0 || s.CachedTokens < 0 {
			t.Errorf("negative usage %+v", s)
		}
		if err == nil && !bytes.Contains(in, doneMarker) {
			t.Errorf("a stream without [DONE] was accepted")
		}
		var j Sample
		_ = readJSON(bufio.NewReader(bytes.NewReader(in)), time.Now(), &j)
		if j.OutputTokens < 0 || j.CachedTokens < 0 {
			t.Errorf("negative usage %+v", j)
		}
	})
}

func FuzzParseCounters(f *testing.F) {
	f.Add("vllm:prefix_cache_queries_total{engine=\"0\"} 1200\nvllm:prefix_cache_hits_total 640\n")
	f.Add("# HELP x\nvllm:generation_tokens_total NaN\nvllm:request_success_total -3\n")
	f.Add("kvmesh_sim_engine_busy_seconds_total +Inf\nvllm:num_preemptions_total 1e300\n")
	f.Fuzz(func(t *testing.T, page string) {
		c, _ := parseCounters(strings.NewReader(page))
		if c.BusySeconds < 0 {
			t.Errorf("negative busy seconds %v", c.BusySeconds)
		}
	})
}

func FuzzParseRoute(f *testing.F) {
	f.Add("backend=b3; matched=640/9000; reason=prefix; policy=kvmesh")
	f.Add(";;backend=;reason")
	f.Fuzz(func(t *testing.T, v string) {
		b, r, m := parseRoute(v)
		if !strings.Contains(v, b) || !strings.Contains(v, r) {
			t.Errorf("parseRoute(%q) = %q, %q: not taken from the value", v, b, r)
		}
		if !(m >= 0 && m <= 1) {
			t.Errorf("parseRoute(%q) matched %v, want a share in [0, 1]", v, m)
		}
	})
}
