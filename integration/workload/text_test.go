package workload

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
)

func TestWordsDeterministicAndPinned(t *testing.T) {
	a, b := Words(42, 1000), Words(42, 1000)
	if a != b {
		t.Fatal("same id and length gave different text")
	}
	// Pinned: changing the vocabulary or the word stream changes every
	// workload (and invalidates recorded benchmark results). If you mean to,
	// update the hash and say so in the commit message.
	sum := sha256.Sum256([]byte(a))
	if got := hex.EncodeToString(sum[:]); got != pinnedWords42 {
		t.Fatalf("Words(42, 1000) changed: sha256 %s", got)
	}
}

const pinnedWords42 = "ec4f8e9616a24ab7740f076c648eecd9cf2102bc5b0bd125c2fa184871012a00"

func TestWordsPrefixProperty(t *testing.T) {
	long := Words(7, 600)
	for _, n := range []int{0, 1, 2, 3, 4, 5, 63, 64, 65, 511, 512, 599} {
		short := Words(7, n)
		if !strings.HasPrefix(long, short) {
			t.Fatalf("Words(7, %d) is not a prefix of Words(7, 600)", n)
		}
		if got := len(strings.Fields(short)); got != n {
			t.Fatalf("Words(7, %d) has %d words", n, got)
		}
		if n > 0 && long[len(short)] != ' ' {
			t.Fatalf("Words(7, %d) does not end at a word boundary", n)
		}
	}
}

func TestWordsDifferAcrossIDs(t *testing.T) {
	seen := make(map[string]uint64)
	for id := range uint64(20000) {
		w := Words(id, 8)
		if prev, ok := seen[w]; ok {
			t.Fatalf("ids %d and %d start with the same 8 words %q", prev, id, w)
		}
		seen[w] = id
	}
	// Neighbouring ids share no first word more often than chance (~1/4000
	// given duplicate short words): count equal first words over 20k pairs.
	same := 0
	for id := range uint64(20000) {
		if strings.Fields(Words(id, 1))[0] == strings.Fields(Words(id+1, 1))[0] {
			same++
		}
	}
	if same > 40 {
		t.Fatalf("%d of 20000 neighbouring ids start with the same word", same)
	}
}

func TestVocabularyShape(t *testing.T) {
	const n = 200000
	text := AppendWords(nil, 99, n)
	words := strings.Fields(string(text))
	if len(words) != n {
		t.Fatalf("%d words, want %d", len(words), n)
	}
	for _, w := range words {
		if len(w) < 2 || len(w) > 9 {
			t.Fatalf("word %q has %d letters, want 2-9", w, len(w))
		}
		for i := range len(w) {
			if w[i] < 'a' || w[i] > 'z' {
				t.Fatalf("word %q is not lowercase ASCII", w)
			}
		}
	}
	if strings.Contains(string(text), "  ") {
		t.Fatal("double space in text")
	}
	perWord := float64(len(text)+1) / n
	if perWord < 5.0 || perWord > 6.2 {
		t.Fatalf("%.2f bytes per word with its space, want ~5.7", perWord)
	}
	distinct := make(map[string]struct{})
	for _, w := range words {
		distinct[w] = struct{}{}
	}
	if len(distinct) < 20000 {
		t.Fatalf("only %d distinct words in %d", len(distinct), n)
	}
}

func TestSpacedLen(t *testing.T) {
	for _, n := range []int{-1, 0, 1, 3, 4, 5, 512, 1001} {
		if got, want := spacedLen(5, n), len(appendWordsSpaced(nil, 5, n)); got != want {
			t.Fatalf("spacedLen(5, %d) = %d, rendered %d bytes", n, got, want)
		}
	}
	if got := AppendWords([]byte("x"), 5, 0); string(got) != "x" {
		t.Fatalf("AppendWords with n=0 changed dst: %q", got)
	}
}
