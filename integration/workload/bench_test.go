package workload

import (
	"fmt"
	"strings"
	"testing"
)

// request12k is a Mooncake-shaped request of 12,035 prompt tokens (the
// trace's mean) over 24 hash-id blocks.
func request12k(b *testing.B) *Request {
	b.Helper()
	ids := make([]string, 24)
	for i := range ids {
		ids[i] = fmt.Sprint(i)
	}
	line := `{"timestamp": 0, "input_length": 12035, "output_length": 343, "hash_ids": [` + strings.Join(ids, ", ") + "]}"
	w, err := ReadMooncake(strings.NewReader(line), DefaultMooncakeOptions())
	if err != nil {
		b.Fatal(err)
	}
	return &w.Requests[0]
}

// Rendering into a reused buffer: the harness's steady state.
func BenchmarkAppendBody12k(b *testing.B) {
	r := request12k(b)
	buf := r.AppendBody(nil)
	b.SetBytes(int64(len(buf)))
	b.ReportAllocs()
	for b.Loop() {
		buf = r.AppendBody(buf[:0])
	}
}

// A fresh, exactly sized body per call (one allocation).
func BenchmarkBodyBytes12k(b *testing.B) {
	r := request12k(b)
	b.SetBytes(int64(r.BodyLen()))
	b.ReportAllocs()
	for b.Loop() {
		_ = r.BodyBytes()
	}
}

func BenchmarkBodyLen12k(b *testing.B) {
	r := request12k(b)
	b.ReportAllocs()
	for b.Loop() {
		_ = r.BodyLen()
	}
}

func BenchmarkParseMooncakeLine(b *testing.B) {
	line := []byte(`{"timestamp": 27000, "input_length": 12035, "output_length": 343, "hash_ids": [0, 113, 114, 115, 116, 117, 118, 119, 120, 121, 122, 123, 124, 125, 126, 127, 128, 129, 130, 131, 132, 133, 134, 135]}`)
	b.SetBytes(int64(len(line)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseMooncakeLine(line); err != nil {
			b.Fatal(err)
		}
	}
}

// Loading the whole trace without bodies (the default).
func BenchmarkLoadMooncake(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := LoadMooncake(traceFile, DefaultMooncakeOptions()); err != nil {
			b.Fatal(err)
		}
	}
}

// Streaming every body of the whole trace through one reused buffer: the
// time to generate the trace's 824 MB of JSON with constant memory.
func BenchmarkRenderMooncakeTrace(b *testing.B) {
	w, err := LoadMooncake(traceFile, DefaultMooncakeOptions())
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(w.TotalBodyBytes())
	var buf []byte
	b.ReportAllocs()
	for b.Loop() {
		for i := range w.Requests {
			buf = w.Requests[i].AppendBody(buf[:0])
		}
	}
}

// Loading the whole trace with every body materialised: B/op is the memory
// a fully materialised trace needs.
func BenchmarkMaterializeMooncake(b *testing.B) {
	o := DefaultMooncakeOptions()
	o.Materialize = true
	b.ReportAllocs()
	for b.Loop() {
		if _, err := LoadMooncake(traceFile, o); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkSharedPrefixDefault(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := SharedPrefix(DefaultSharedPrefixOptions()); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkPrefixCacheBoundSharedPrefix(b *testing.B) {
	w, err := SharedPrefix(DefaultSharedPrefixOptions())
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		_ = w.PrefixCacheBound(16)
	}
}
