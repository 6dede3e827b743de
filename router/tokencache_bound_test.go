package router

import "testing"

// Storing again under a key that is held (two requests with one prompt
// tokenized at once, a refresh, a tokenizer that changed) stays within the
// bound in tokens, however much longer the new tokens are.
func TestTokenCacheReplaceKeepsTheBound(t *testing.T) {
	c := newTokenCache(80)
	for k := uint64(1); k <= 80; k++ {
		c.put(k, []uint32{uint32(k)})
	}
	long := make([]uint32, 10)
	for k := uint64(1); k <= 80; k++ {
		long[0] = uint32(k)
		c.put(k, long)
		if _, tk := c.size(); tk > 80 {
			t.Fatalf("after replacing key %d: %d tokens held, bound 80", k, tk)
		}
	}
	if got := c.get(80); len(got) != 10 || got[0] != 80 {
		t.Fatalf("the last replaced entry: %v", got)
	}
	n, tk := c.size()
	sum := 0
	for k := uint64(1); k <= 80; k++ {
		sum += len(c.get(k))
	}
	if sum != tk || n > 80 {
		t.Fatalf("size says %d entries, %d tokens; the entries hold %d", n, tk, sum)
	}
}
