package bench

import "testing"

// A move is a follow-up sent elsewhere than its conversation's previous
// request; its regret is what some backend held that it recomputed. A
// conversation's first request, a failed request and a request without a
// route header are not follow-ups, and a failed request does not change
// where its conversation was.
func TestSessionMoves(t *testing.T) {
	conv := []int{0, 1, 0, 0, 1, 0, 2}
	samples := []Sample{
		{Index: 0, Backend: "b0", PromptTokens: 100},
		{Index: 1, Backend: "b1", PromptTokens: 100},
		{Index: 2, Backend: "b0", PromptTokens: 100, CachedTokens: 90, Available: 90},
		{Index: 3, Err: "http-500", Backend: "b1", PromptTokens: 100},
		{Index: 4, Backend: "b1", PromptTokens: 100, CachedTokens: 90, Available: 90},
		{Index: 5, Backend: "b1", PromptTokens: 100, CachedTokens: 10, Available: 95}, // moved: 85 held elsewhere
		{Index: 6, Backend: "b0", PromptTokens: 100},
	}
	st := sessionMoves(samples, func(i int) int { return conv[i] })
	// Follow-ups: 2, 4 and 5 (3 failed); moved: 5.
	if !near(st.Moved, 1.0/3) {
		t.Errorf("moved %v, want 1/3", st.Moved)
	}
	if !near(st.Regret, 85.0/600) {
		t.Errorf("regret in moves %v, want 85/600", st.Regret)
	}
	if st := sessionMoves(samples[:2], func(i int) int { return conv[i] }); st.Moved != 0 || st.Regret != 0 {
		t.Errorf("no follow-ups: %+v", st)
	}
}
