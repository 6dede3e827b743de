package sim

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
)

// memoText is n distinct words: a text the memo keeps (n*7 bytes or so).
func memoText(tag string, n int) []byte {
	var b strings.Builder
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, "%s%d ", tag, i)
	}
	return []byte(b.String())
}

func TestWordMemoAnswersAsTheTokenizer(t *testing.T) {
	wm := newWordMemo(64, 1<<20)
	long, short := memoText("w", 100), []byte("a few words")
	for i := 0; i < 3; i++ {
		for _, s := range [][]byte{long, short} {
			got := wm.appendWords([]uint32{7}, s)
			want := appendWords([]uint32{7}, s)
			if !slices.Equal(got, want) {
				t.Fatalf("read %d of %q...: memo gave %d ids, the tokenizer %d (or other ids)", i, s[:10], len(got), len(want))
			}
		}
	}
	hits, misses, held := wm.stats()
	if hits != 2 || misses != 1 {
		t.Errorf("hits %d misses %d, want 2 and 1 (the short text is never kept)", hits, misses)
	}
	if want := len(long) + 4*len(appendWords(nil, long)); held != want {
		t.Errorf("held %d bytes, want %d", held, want)
	}
}

// Two texts under one hash: each is answered with its own ids (a hit is
// checked against the text), and the first keeps its place.
func TestWordMemoChecksTheText(t *testing.T) {
	wm := newWordMemo(8, 1<<20)
	wm.hash = func([]byte) uint64 { return 42 }
	a, b := memoText("a", 50), memoText("b", 60)
	for i := 0; i < 2; i++ {
		if got, want := wm.appendWords(nil, a), appendWords(nil, a); !slices.Equal(got, want) {
			t.Fatalf("text a, read %d: wrong ids", i)
		}
		if got, want := wm.appendWords(nil, b), appendWords(nil, b); !slices.Equal(got, want) {
			t.Fatalf("text b, read %d: wrong ids (the other text's?)", i)
		}
	}
	if hits, misses, _ := wm.stats(); hits != 1 || misses != 3 {
		t.Errorf("hits %d misses %d, want 1 (a's second read) and 3", hits, misses)
	}
}

// The memo holds at most maxBytes, dropping the oldest texts first.
func TestWordMemoBound(t *testing.T) {
	text := func(i int) []byte { return memoText(fmt.Sprintf("t%d-", i), 100) }
	one := len(text(0)) + 4*100
	wm := newWordMemo(8, 3*one+one/2)
	for i := 0; i < 10; i++ {
		wm.appendWords(nil, text(i))
		if _, _, held := wm.stats(); held > wm.maxBytes {
			t.Fatalf("after %d texts: %d bytes held, bound %d", i+1, held, wm.maxBytes)
		}
	}
	wm.appendWords(nil, text(9)) // the newest is kept
	wm.appendWords(nil, text(0)) // the oldest was dropped
	if hits, _, _ := wm.stats(); hits != 1 {
		t.Errorf("hits %d, want 1: the newest text kept, the oldest dropped", hits)
	}
	if len(wm.m) != 3 {
		t.Errorf("%d texts held, want 3", len(wm.m))
	}
}

func TestWordMemoConcurrentReaders(t *testing.T) {
	wm := newWordMemo(8, 64<<10)
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				s := memoText(fmt.Sprintf("c%d-", i%13), 40+i%7)
				if got, want := wm.appendWords(nil, s), appendWords(nil, s); !slices.Equal(got, want) {
					t.Errorf("wrong ids for text %d", i)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// The serving path reads long contents through the process's memo: a
// prompt decoded twice (the harness's reach figure, then the engine) is
// tokenized once.
func TestDecodeReadsLongContentThroughTheMemo(t *testing.T) {
	content := memoText("decode-memo-", 2000)
	body := fmt.Sprintf(`{"messages":[{"role":"user","content":%q}]}`, content)
	first, aerr := decodeFor(t, body, chatEndpoint)
	if aerr != nil {
		t.Fatal(aerr)
	}
	textMemo.mu.Lock()
	e := textMemo.m[textMemo.hash(content)]
	textMemo.mu.Unlock()
	if e == nil || !slices.Equal(e.text, content) {
		t.Fatal("the content's tokens are not in the memo after a decode")
	}
	second, aerr := decodeFor(t, body, chatEndpoint)
	if aerr != nil {
		t.Fatal(aerr)
	}
	if !slices.Equal(first.tokens, second.tokens) || len(first.tokens) != 2000+3 {
		t.Fatalf("decoded %d then %d tokens, want 2003 both times", len(first.tokens), len(second.tokens))
	}
}

func BenchmarkWordMemo35KB(b *testing.B) {
	s := memoText("bench", 5000)
	b.Run("tokenizer", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(s)))
		dst := make([]uint32, 0, 8000)
		for i := 0; i < b.N; i++ {
			dst = appendWords(dst[:0], s)
		}
	})
	b.Run("memo", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(s)))
		wm := newWordMemo(4<<10, 64<<20)
		dst := make([]uint32, 0, 8000)
		for i := 0; i < b.N; i++ {
			dst = wm.appendWords(dst[:0], s)
		}
	})
}
