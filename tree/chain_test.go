package tree

import "testing"

// NextLearn finds the first learn depth strictly deeper than the one asked,
// and the chain's full length past the last.
func TestNextLearn(t *testing.T) {
	c := &Chain{Keys: make([]Key, 40), Learn: []int32{3, 8, 32, 40}}
	for _, tc := range []struct{ depth, want int32 }{
		{0, 3}, {2, 3}, {3, 8}, {7, 8}, {8, 32}, {31, 32}, {32, 40}, {39, 40}, {40, 40}, {50, 40},
	} {
		if got := c.NextLearn(tc.depth); got != tc.want {
			t.Errorf("NextLearn(%d) = %d, want %d", tc.depth, got, tc.want)
		}
	}
	empty := &Chain{Keys: make([]Key, 5)}
	if got := empty.NextLearn(0); got != 5 {
		t.Errorf("NextLearn on a chain without learn depths = %d, want its 5 blocks", got)
	}
}
