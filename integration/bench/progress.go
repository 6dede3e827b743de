package bench

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Progress draws a progress bar for a benchmark: requests done of the
// current phase (an arm's run), the phase's label, and the estimated time
// left for the phase and for the whole experiment. On a terminal it redraws
// one line in place; otherwise (a log file, CI) it prints a plain line
// whenever another tenth of the phase is done, or every PlainEvery, and at
// the end of each phase. A nil *Progress does nothing.
type Progress struct {
	w   io.Writer
	tty bool
	now func() time.Time
	// Every is the redraw interval on a terminal. PlainEvery is the longest
	// gap between two plain lines.
	Every, PlainEvery time.Duration

	done atomic.Int64

	mu         sync.Mutex
	label      string
	total      int
	start      time.Time
	allTotal   int // requests of the whole experiment (0 = unknown)
	allDone    int // requests of finished phases
	allStart   time.Time
	lastTenth  int
	lastPlain  time.Time
	stop, quit chan struct{}
}

// NewProgress writes to w; it draws in place when w is a terminal.
func NewProgress(w io.Writer) *Progress {
	return &Progress{w: w, tty: IsTerminal(w), now: time.Now, Every: 250 * time.Millisecond, PlainEvery: 30 * time.Second}
}

// IsTerminal reports whether w is a character device (a TTY): where
// progress is drawn in place and logs are coloured.
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// Expect announces the whole experiment's request count, for the overall
// estimate.
func (p *Progress) Expect(total int) {
	if p == nil {
		return
	}
	p.mu.Lock()
	p.allTotal, p.allDone, p.allStart = total, 0, p.now()
	p.mu.Unlock()
}

// Grow adds n requests to the whole experiment's count (a run repeated).
func (p *Progress) Grow(n int) {
	if p == nil {
		return
	}
	p.mu.Lock()
	if p.allTotal > 0 {
		p.allTotal += n
	}
	p.mu.Unlock()
}

// Rerun says, on a line of its own, that the phase just ended is not
// trusted (why) and runs again, and adds its n requests to the whole
// experiment's count: the overall share drops, and the line says why.
func (p *Progress) Rerun(label, why string, n int) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.allTotal > 0 {
		p.allTotal += n
	}
	fmt.Fprintf(p.w, "%s: not trusted (%s); running it again with a fresh fleet (+%d requests to do)\n", strings.TrimSpace(label), why, n)
}

// Begin starts a phase of total requests.
func (p *Progress) Begin(label string, total int) {
	if p == nil {
		return
	}
	p.mu.Lock()
	p.label, p.total, p.start = label, total, p.now()
	if p.allStart.IsZero() {
		p.allStart = p.start
	}
	p.lastTenth, p.lastPlain = 0, p.start
	p.done.Store(0)
	p.stop, p.quit = make(chan struct{}), make(chan struct{})
	stop, quit := p.stop, p.quit
	p.mu.Unlock()
	go p.loop(stop, quit)
}

// Add records one finished request. Safe for concurrent use.
func (p *Progress) Add() {
	if p != nil {
		p.done.Add(1)
	}
}

// End finishes the phase with a final line.
func (p *Progress) End() {
	if p == nil {
		return
	}
	p.mu.Lock()
	stop, quit := p.stop, p.quit
	p.stop = nil
	p.mu.Unlock()
	if stop == nil {
		return
	}
	close(stop)
	<-quit
	p.mu.Lock()
	defer p.mu.Unlock()
	line := p.lineLocked()
	if p.tty {
		fmt.Fprintf(p.w, "\r\033[K%s\n", line)
	} else {
		fmt.Fprintln(p.w, line)
	}
	p.allDone += int(p.done.Load())
}

func (p *Progress) loop(stop, quit chan struct{}) {
	defer close(quit)
	every := p.Every
	if !p.tty {
		every = min(every, time.Second) // plain mode only checks whether a line is due
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			p.tick()
		}
	}
}

// tick draws (terminal) or prints a line when one is due (plain).
func (p *Progress) tick() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.tty {
		fmt.Fprintf(p.w, "\r\033[K%s", p.lineLocked())
		return
	}
	done := int(p.done.Load())
	tenth := 0
	if p.total > 0 {
		tenth = done * 10 / p.total
	}
	now := p.now()
	if tenth > p.lastTenth || now.Sub(p.lastPlain) >= p.PlainEvery {
		p.lastTenth, p.lastPlain = tenth, now
		fmt.Fprintln(p.w, p.lineLocked())
	}
}

func (p *Progress) lineLocked() string {
	now := p.now()
	done := int(p.done.Load())
	return formatProgress(p.label, done, p.total, now.Sub(p.start), p.allDone+done, p.allTotal, now.Sub(p.allStart))
}

// formatProgress renders one progress line:
//
//	kvmesh rep 1/3 [########------------]  412/1000  41%  0:12 left 0:17 | all 9% left 3:05
func formatProgress(label string, done, total int, elapsed time.Duration, allDone, allTotal int, allElapsed time.Duration) string {
	const width = 20
	var b strings.Builder
	frac := 0.0
	if total > 0 {
		frac = min(float64(done)/float64(total), 1)
	}
	filled := int(frac * width)
	fmt.Fprintf(&b, "%s [%s%s] %*d/%d %3.0f%% %s left %s", label,
		strings.Repeat("#", filled), strings.Repeat("-", width-filled),
		len(fmt.Sprint(total)), done, total, 100*frac, clock(elapsed), eta(done, total, elapsed))
	if allTotal > 0 {
		fmt.Fprintf(&b, " | all %.0f%% left %s", 100*min(float64(allDone)/float64(allTotal), 1), eta(allDone, allTotal, allElapsed))
	}
	return b.String()
}

// eta estimates the time left from the rate so far ("?" before any
// progress).
func eta(done, total int, elapsed time.Duration) string {
	if done <= 0 {
		return "?"
	}
	if done >= total {
		return clock(0)
	}
	return clock(time.Duration(float64(elapsed) * float64(total-done) / float64(done)))
}

// clock formats d as m:ss (or h:mm:ss).
func clock(d time.Duration) string {
	s := int(d.Round(time.Second) / time.Second)
	if s >= 3600 {
		return fmt.Sprintf("%d:%02d:%02d", s/3600, s/60%60, s%60)
	}
	return fmt.Sprintf("%d:%02d", s/60, s%60)
}
