package bench

import (
	"bufio"
	"errors"
	"io"
	"strings"
	"testing"
	"time"
)

// endless yields n bytes of b (no newline), counting what was read.
type endless struct {
	b    byte
	n    int
	read int
}

func (e *endless) Read(p []byte) (int, error) {
	if e.read >= e.n {
		return 0, io.EOF
	}
	k := min(len(p), e.n-e.read)
	for i := range p[:k] {
		p[i] = e.b
	}
	e.read += k
	return k, nil
}

// A backend (or a proxy) that streams bytes without ever ending a line
// must not make the load generator keep them all: the line is refused
// once past maxStreamLine, as a stream error.
func TestReadStreamBoundsALine(t *testing.T) {
	src := &endless{b: 'a', n: 8 * maxStreamLine}
	var s Sample
	err := readStream(bufio.NewReaderSize(io.MultiReader(strings.NewReader("data: "), src), 16<<10), time.Now(), &s)
	var se *streamError
	if !errors.As(err, &se) || !strings.Contains(err.Error(), "longer than") {
		t.Errorf("err %v, want a stream error naming the line's length", err)
	}
	if src.read > 2*maxStreamLine {
		t.Errorf("read %d bytes of one line before giving up, want at most about %d", src.read, maxStreamLine)
	}
}

// A non-streaming answer longer than maxJSONAnswer is cut by the limit:
// it must fail rather than count as an answer read from its first part.
func TestReadJSONRefusesAnAnswerPastTheLimit(t *testing.T) {
	head := `{"usage":{"prompt_tokens":70,"completion_tokens":2},"pad":"`
	src := io.MultiReader(strings.NewReader(head), &endless{b: 'x', n: maxJSONAnswer})
	var s Sample
	if err := readJSON(bufio.NewReader(src), time.Now(), &s); err == nil {
		t.Errorf("a %d-byte answer was accepted (sample %+v)", maxJSONAnswer+len(head), s)
	}
}
