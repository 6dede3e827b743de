package bench

import (
	"bytes"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestFormatProgress(t *testing.T) {
	got := formatProgress("kvmesh rep 1/3", 250, 1000, 10*time.Second, 1250, 5000, 50*time.Second)
	want := "kvmesh rep 1/3 [#####---------------]  250/1000  25% 0:10 left 0:30 | all 25% left 2:30"
	if got != want {
		t.Errorf("got  %q\nwant %q", got, want)
	}
	// Before any request finished there is no estimate; at the end, none left.
	if got := formatProgress("x", 0, 10, time.Second, 0, 0, 0); !strings.Contains(got, "left ?") || strings.Contains(got, "all") {
		t.Errorf("no progress yet: %q", got)
	}
	if got := formatProgress("x", 10, 10, time.Minute, 0, 0, 0); !strings.Contains(got, "[####################] 10/10 100% 1:00 left 0:00") {
		t.Errorf("finished: %q", got)
	}
	if got := clock(3725 * time.Second); got != "1:02:05" {
		t.Errorf("clock = %q", got)
	}
}

// syncBuffer is a bytes.Buffer safe for the progress goroutine and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestProgressPlainLines(t *testing.T) {
	var out syncBuffer
	p := NewProgress(&out)
	if p.tty {
		t.Fatal("a buffer was taken for a terminal")
	}
	// The ticks are driven here, one per request, not by the clock: a
	// loaded machine may not run the ticker at all within the test.
	p.Every = time.Hour
	p.Expect(10)
	p.Grow(10) // a rerun: 20 in all
	p.Begin("rr rep 1/1", 20)
	for range 20 {
		p.Add()
		p.tick()
	}
	p.End()
	s := out.String()
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if strings.Contains(s, "\r") || len(lines) != 11 {
		t.Errorf("plain output: want 11 lines (one per tenth, one at the end) without carriage returns, got %d:\n%s", len(lines), s)
	}
	if last := lines[len(lines)-1]; !strings.Contains(last, "rr rep 1/1") || !strings.Contains(last, "20/20 100%") || !strings.Contains(last, "all 100%") {
		t.Errorf("last line %q", last)
	}
}

func TestProgressTerminalRedraws(t *testing.T) {
	var out syncBuffer
	p := NewProgress(&out)
	p.tty = true // as if out were a terminal
	p.Every = time.Millisecond
	p.Begin("km", 5)
	p.Add()
	time.Sleep(20 * time.Millisecond)
	p.End()
	s := out.String()
	if !strings.Contains(s, "\r\033[Kkm [####----------------] 1/5  20%") || !strings.HasSuffix(s, "\n") {
		t.Errorf("terminal output %q: want in-place redraws and a final newline", s)
	}
}

func TestNilProgressIsANoOp(t *testing.T) {
	var p *Progress
	p.Expect(3)
	p.Begin("x", 3)
	p.Add()
	p.End()
}

// A rerun is announced on its own line, with why, and counted in the
// whole experiment's total.
func TestProgressRerunIsAnnounced(t *testing.T) {
	var out syncBuffer
	p := NewProgress(&out)
	p.Every = time.Hour
	p.Expect(10)
	p.Begin("km rep 1/1", 10)
	for range 10 {
		p.Add()
	}
	p.End()
	p.Rerun("km rep 1/1", "an engine fell 0.300 s behind its model clock", 10)
	p.Begin("km rep 1/1", 10)
	p.End()
	s := out.String()
	if !strings.Contains(s, "km rep 1/1: not trusted (an engine fell 0.300 s behind its model clock); running it again") {
		t.Errorf("the rerun is not announced:\n%s", s)
	}
	if lines := strings.Split(strings.TrimSpace(s), "\n"); !strings.Contains(lines[len(lines)-1], "all 50%") {
		t.Errorf("after a rerun 10 of 20 requests are done in all: %q", lines[len(lines)-1])
	}
}
