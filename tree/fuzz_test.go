package tree

import (
	"fmt"
	"testing"
)

// refModel is the naive reference for the Index: every claimed prefix kept
// in a map by its full text, every lookup checking every prefix.
type refModel struct {
	blockBytes int
	claims     map[string]map[BackendID]refClaim
	gen        []uint16
	removed    []bool
}

type refClaim struct {
	gen uint16
	exp int64
}

func (m *refModel) learn(units []byte, learn []int32, b BackendID, exp int64) {
	if m.removed[b] {
		return
	}
	for _, d := range learn {
		p := string(units[:int(d)*m.blockBytes])
		if m.claims[p] == nil {
			m.claims[p] = map[BackendID]refClaim{}
		}
		cur, ok := m.claims[p][b]
		next := refClaim{gen: m.gen[b], exp: exp}
		if !ok || genAfter(next.gen, cur.gen) || (next.gen == cur.gen && next.exp > cur.exp) {
			m.claims[p][b] = next
		}
	}
}

func (m *refModel) lookup(units []byte, now int64) map[BackendID]int32 {
	out := map[BackendID]int32{}
	for d := len(units) / m.blockBytes; d >= 1; d-- {
		for b, c := range m.claims[string(units[:d*m.blockBytes])] {
			if _, seen := out[b]; !seen && !m.removed[b] && c.gen == m.gen[b] && c.exp > now {
				out[b] = int32(d)
			}
		}
	}
	return out
}

// FuzzIndexMatchesReference drives the Index and the reference model with
// the same operations (learn, invalidate, remove, advance time, sweep) and
// checks that every lookup agrees.
func FuzzIndexMatchesReference(f *testing.F) {
	f.Add([]byte("the quick brown fox jumps over the lazy dog, again and again and again"), []byte{0, 1, 2, 3, 0, 0, 3, 1, 5, 2, 9, 3, 2, 4, 0, 2})
	f.Add([]byte("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"), []byte{0, 0, 0, 3, 1, 0, 3, 0, 6, 3})
	f.Add(make([]byte, 300), []byte{0, 7, 200, 2, 250, 3, 1, 1, 0, 3, 4, 3})
	f.Fuzz(func(t *testing.T, text []byte, ops []byte) {
		if len(text) > 4096 || len(ops) > 512 {
			return
		}
		cfg := DefaultConfig()
		cfg.BlockTokens = 8 // 32-byte blocks in byte mode
		cfg.CheckpointTokens = []int{0, 16, 32, 64}[len(ops)%4]
		cfg.Capacity = 1 << 14 // never full here: eviction is tested elsewhere
		cfg.RefreshFraction = 0
		ix, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		const nb = 4
		ref := &refModel{blockBytes: 32, claims: map[string]map[BackendID]refClaim{}, gen: make([]uint16, nb), removed: make([]bool, nb)}
		for i := 0; i < nb; i++ {
			if _, err := ix.EnsureBackend(fmt.Sprint("b", i)); err != nil {
				t.Fatal(err)
			}
		}
		// Four prompts that share prefixes of the text at different points.
		prompts := [][]byte{text}
		for i := 1; i < 4; i++ {
			cut := len(text) * i / 4
			p := append([]byte{}, text[:cut]...)
			p = append(p, fmt.Sprintf("|variant %d|", i)...)
			p = append(p, text[cut:]...)
			prompts = append(prompts, p)
		}
		now := int64(1000)
		var ch Chain
		var res Result
		seed := NewSeed("m", "", "")
		for len(ops) >= 3 {
			op, a, b := ops[0]%6, ops[1], ops[2]
			ops = ops[3:]
			switch op {
			case 0, 1: // learn prompt a on backend b with a TTL
				p := prompts[int(a)%len(prompts)]
				ends := []int{int(a) * 7 % (len(p) + 1), len(p) / 2, len(p)}
				ix.Keyer().Bytes(&ch, seed, p, ends)
				bk := BackendID(b % nb)
				ttl := int64(b)*10 + 1
				ts := MakeTimestamp(now, uint16(a))
				ix.Learn(&ch, bk, ts, ttl, 1, now, nil)
				if !ref.removed[bk] {
					ref.learn(p, ch.Learn, bk, now+ttl)
				}
			case 2: // invalidate (restart) or remove backend a
				bk := BackendID(a % nb)
				removed := b%4 == 0
				if _, err := ix.Invalidate(fmt.Sprint("b", bk), removed, MakeTimestamp(now, 0), 1); err != nil {
					t.Fatal(err)
				}
				ref.gen[bk]++
				ref.removed[bk] = removed
			case 3: // lookup
				p := prompts[int(a)%len(prompts)]
				ix.Keyer().Bytes(&ch, seed, p, nil)
				ix.Lookup(&ch, now, &res)
				want := ref.lookup(p, now)
				if len(res.Matches) != len(want) {
					t.Fatalf("lookup prompt %d at %d: got %+v, want %v", int(a)%len(prompts), now, res.Matches, want)
				}
				deepest := int32(0)
				for _, m := range res.Matches {
					if want[m.Backend] != m.Blocks {
						t.Fatalf("backend %d: depth %d, want %d", m.Backend, m.Blocks, want[m.Backend])
					}
					deepest = max(deepest, m.Blocks)
				}
				if res.Deepest != deepest {
					t.Fatalf("deepest %d, want %d", res.Deepest, deepest)
				}
			case 4: // time passes
				now += int64(a)
			case 5:
				ix.Sweep(now)
			}
		}
	})
}
