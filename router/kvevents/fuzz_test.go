package kvevents

import (
	"bytes"
	"testing"
)

// FuzzDecode feeds arbitrary bytes to Decode: it must never panic or hang,
// a failed decode leaves no events, and whatever decodes re-encodes to a
// payload that decodes to the same thing (in either encoding).
func FuzzDecode(f *testing.F) {
	f.Add(vllmArrayPayload())
	f.Add(vllmMapPayload())
	b := sampleBatch()
	f.Add(AppendBatch(nil, &b, EncodingArray))
	f.Add(AppendBatch(nil, &b, EncodingMap))
	f.Add([]byte{0x92, 0x00, 0x90})
	f.Fuzz(func(t *testing.T, p []byte) {
		var out Batch
		if err := Decode(p, &out); err != nil {
			if len(out.Events) != 0 {
				t.Fatal("failed decode left events")
			}
			return
		}
		for _, enc := range []Encoding{EncodingArray, EncodingMap} {
			p1 := AppendBatch(nil, &out, enc)
			var again Batch
			if err := Decode(p1, &again); err != nil {
				t.Fatalf("re-encoded batch does not decode: %v", err)
			}
			if p2 := AppendBatch(nil, &again, enc); !bytes.Equal(p1, p2) {
				t.Fatalf("not a fixed point:\n%x\n%x", p1, p2)
			}
		}
	})
}
