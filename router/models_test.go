package router

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
)

func TestParseModelsSkipsBadAndDuplicateEntries(t *testing.T) {
	in := `{"object":"list","data":[
		{"id":"a","max_model_len":4096},
		{"id":"b"},
		{"id":"a","max_model_len":1},
		{"id":""},
		{"id":7},
		"not an object",
		{"id":"c", "root": "x"}]}`
	got, err := parseModels(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range got {
		ids = append(ids, m.ID)
	}
	if fmt.Sprint(ids) != "[a b c]" {
		t.Fatalf("ids %v, want [a b c]", ids)
	}
	if string(got[0].Raw) != `{"id":"a","max_model_len":4096}` {
		t.Errorf("a duplicate replaced the first entry: %s", got[0].Raw)
	}
	if _, err := parseModels(strings.NewReader(`{"data":[`)); err == nil {
		t.Error("a truncated list was accepted")
	}
}

// modelList is an OpenAI model list of n entries, each id repeated twice.
func modelList(n int) []byte {
	var b bytes.Buffer
	b.WriteString(`{"object":"list","data":[`)
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"id":"adapter-%d","object":"model"}`, i/2)
	}
	b.WriteString("]}")
	return b.Bytes()
}

// BenchmarkParseModels80K is a backend answering 80,000 model entries (a
// LoRA-heavy server, half of them duplicates): deduplication must stay
// linear, since the parse runs on the backend's watch goroutine and delays
// its probes.
func BenchmarkParseModels80K(b *testing.B) {
	list := modelList(80000)
	b.SetBytes(int64(len(list)))
	b.ReportAllocs()
	for b.Loop() {
		out, err := parseModels(bytes.NewReader(list))
		if err != nil || len(out) != 40000 {
			b.Fatalf("%d models, %v", len(out), err)
		}
	}
}

func FuzzParseModels(f *testing.F) {
	f.Add([]byte(`{"object":"list","data":[{"id":"m1"},{"id":"m1"},{"id":"m2","max_model_len":8192}]}`))
	f.Add([]byte(`{"data":[{"id":null},{}, 3, "x"]}`))
	f.Add([]byte(`{"data":{}}`))
	f.Add(modelList(10))
	f.Fuzz(func(t *testing.T, data []byte) {
		out, err := parseModels(bytes.NewReader(data))
		if err != nil {
			return
		}
		seen := map[string]bool{}
		for _, m := range out {
			if m.ID == "" || seen[m.ID] {
				t.Fatalf("empty or duplicate id %q in %q", m.ID, data)
			}
			seen[m.ID] = true
		}
	})
}
