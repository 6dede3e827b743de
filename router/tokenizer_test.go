package router

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

var _ Tokenizer = WordTokenizer{}

func TestWordTokenizer(t *testing.T) {
	var tk WordTokenizer
	p := mustRender(t, EndpointChat, `{"model":"m","messages":[{"role":"system","content":"Be  brief.\n"},{"role":"user","content":"Hi there"}]}`)
	toks, ends, err := tk.Tokenize(p.Model, p.Units, p.Ends, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	// §system ¦tBe brief. | §user ¦tHi there
	word := func(s string) uint32 { return tk.wordID([]byte(s)) }
	rs, gs := uint32(markMsg-markEsc)+1, uint32(markPart-markEsc)+1
	want := []uint32{rs, word("system"), gs, word("tBe"), word("brief."), rs, word("user"), gs, word("tHi"), word("there")}
	if !slices.Equal(toks, want) || !slices.Equal(ends, []int{5, 10}) {
		t.Fatalf("got %v %v\nwant %v [5 10]", toks, ends, want)
	}
	for _, id := range toks[1:2] {
		if id < reservedTokenIDs {
			t.Fatalf("word id %d in the reserved range", id)
		}
	}
	// Another seed, another vocabulary; same structure.
	toks2, ends2, _ := WordTokenizer{Seed: 7}.Tokenize("", p.Units, p.Ends, make([]uint32, 0, 64), nil)
	if slices.Equal(toks2, toks) || !slices.Equal(ends2, ends) || toks2[0] != rs {
		t.Fatalf("seed had no effect or changed structure: %v %v", toks2, ends2)
	}
}

func TestWordTokenizerBoundariesSplitWords(t *testing.T) {
	// Completion segments concatenate without separators: "ab"+"cd" must
	// still be two tokens, with the boundary between them.
	p := mustRender(t, EndpointCompletions, `{"model":"m","prompt":["ab","cd",""]}`)
	toks, ends, err := WordTokenizer{}.Tokenize("", p.Units, p.Ends, nil, nil)
	if err != nil || len(toks) != 2 || !slices.Equal(ends, []int{1, 2, 2}) {
		t.Fatalf("got %v %v %v", toks, ends, err)
	}
}

func TestWordTokenizerPrefixProperty(t *testing.T) {
	var msgs []string
	var prevToks []uint32
	var prevEnds []int
	for i := 0; i < 8; i++ {
		msgs = append(msgs, fmt.Sprintf(`{"role":"user","content":"turn %d says\u001e%s"}`, i, strings.Repeat("x ", i)))
		p := mustRender(t, EndpointChat, `{"model":"m","messages":[`+strings.Join(msgs, ",")+`]}`)
		toks, ends, err := WordTokenizer{}.Tokenize("", p.Units, p.Ends, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(toks[:len(prevToks)], prevToks) || !slices.Equal(ends[:len(prevEnds)], prevEnds) || ends[len(ends)-1] != len(toks) {
			t.Fatalf("turn %d: tokens do not extend the previous turn's", i)
		}
		prevToks, prevEnds = toks, ends
	}
}

func TestWordTokenizerErrors(t *testing.T) {
	for _, ends := range [][]int{{3, 2}, {-1}, {10}} {
		if _, _, err := (WordTokenizer{}).Tokenize("", []byte("abc def"), ends, nil, nil); err == nil {
			t.Errorf("ends %v accepted", ends)
		}
	}
}

func TestDecodeTokenIDs(t *testing.T) {
	p := mustRender(t, EndpointCompletions, `{"model":"m","prompt":[1,256,4294967295]}`)
	if got := DecodeTokenIDs(append(p.Units, 9), []uint32{42}); !slices.Equal(got, []uint32{1, 256, 4294967295}) {
		t.Fatalf("got %v", got)
	}
}
