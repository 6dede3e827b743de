package workload

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"time"
)

// MooncakeBlockTokens is the block size of the Mooncake traces' hash_ids.
const MooncakeBlockTokens = 512

// MooncakeRecord is one decoded line of a Mooncake trace.
type MooncakeRecord struct {
	// Timestamp is the arrival time in ms since the start of the trace.
	Timestamp int64
	// InputLength and OutputLength are token counts.
	InputLength  int
	OutputLength int
	// HashIDs are chained ids of the prompt's 512-token blocks (the last one
	// possibly partial): equal ids at equal positions mean equal prefixes.
	HashIDs []int64
}

// mooncakeLine mirrors the JSON; pointers tell a missing field from a zero.
type mooncakeLine struct {
	Timestamp    *int64   `json:"timestamp"`
	InputLength  *int64   `json:"input_length"`
	OutputLength *int64   `json:"output_length"`
	HashIDs      *[]int64 `json:"hash_ids"`
}

// maxTraceTimestamp bounds timestamps (ms) so that they convert to a
// time.Duration without overflow: about 292 years.
const maxTraceTimestamp = math.MaxInt64 / int64(time.Millisecond)

// maxTraceTokens bounds input_length and output_length: far beyond any
// model's context today, small enough that no arithmetic on them overflows.
const maxTraceTokens = 1 << 30

// ParseMooncakeLine decodes and validates one trace line (without its
// newline). It checks that all four fields are present, that the lengths are
// non-negative integers, input_length >= 1, hash ids are non-negative, and
// that there is exactly one hash id per started 512-token block of the input.
// Unknown fields are ignored. It never panics.
func ParseMooncakeLine(line []byte) (MooncakeRecord, error) {
	var raw mooncakeLine
	if err := json.Unmarshal(line, &raw); err != nil {
		return MooncakeRecord{}, fmt.Errorf("invalid JSON: %w", err)
	}
	switch {
	case raw.Timestamp == nil:
		return MooncakeRecord{}, errors.New(`missing "timestamp"`)
	case raw.InputLength == nil:
		return MooncakeRecord{}, errors.New(`missing "input_length"`)
	case raw.OutputLength == nil:
		return MooncakeRecord{}, errors.New(`missing "output_length"`)
	case raw.HashIDs == nil:
		return MooncakeRecord{}, errors.New(`missing "hash_ids"`)
	}
	ts, in, out, ids := *raw.Timestamp, *raw.InputLength, *raw.OutputLength, *raw.HashIDs
	if ts < 0 || ts > maxTraceTimestamp {
		return MooncakeRecord{}, fmt.Errorf("timestamp %d out of range [0, %d]", ts, int64(maxTraceTimestamp))
	}
	if in < 1 || in > maxTraceTokens {
		return MooncakeRecord{}, fmt.Errorf("input_length %d out of range [1, %d]", in, maxTraceTokens)
	}
	if out < 0 || out > maxTraceTokens {
		return MooncakeRecord{}, fmt.Errorf("output_length %d out of range [0, %d]", out, maxTraceTokens)
	}
	if want := (in + MooncakeBlockTokens - 1) / MooncakeBlockTokens; int64(len(ids)) != want {
		return MooncakeRecord{}, fmt.Errorf("%d hash_ids for input_length %d, want %d (one per %d-token block)",
			len(ids), in, want, MooncakeBlockTokens)
	}
	for i, id := range ids {
		if id < 0 {
			return MooncakeRecord{}, fmt.Errorf("negative hash id %d at position %d", id, i)
		}
	}
	return MooncakeRecord{Timestamp: ts, InputLength: int(in), OutputLength: int(out), HashIDs: ids}, nil
}

// LineError reports a bad line of an input file. Line is 1-based.
type LineError struct {
	Line int
	Err  error
}

func (e *LineError) Error() string { return fmt.Sprintf("line %d: %v", e.Line, e.Err) }
func (e *LineError) Unwrap() error { return e.Err }

// maxLineBytes caps one trace line. Mooncake lines are at most a few KB (a
// 128k-token prompt has 250 hash ids); 4 MiB leaves room for far longer
// prompts while bounding memory on garbage input.
const maxLineBytes = 4 << 20

// lineReader yields lines without their newline (and without a trailing \r),
// counting them from 1. A line longer than max is an error.
type lineReader struct {
	r    *bufio.Reader
	buf  []byte
	line int
	max  int
}

func newLineReader(r io.Reader, max int) *lineReader {
	return &lineReader{r: bufio.NewReaderSize(r, 64<<10), max: max}
}

// next returns the next line (valid until the following call), io.EOF at the
// end, or a *LineError.
func (l *lineReader) next() ([]byte, error) {
	l.buf = l.buf[:0]
	for {
		frag, err := l.r.ReadSlice('\n')
		l.buf = append(l.buf, frag...)
		if len(l.buf) > l.max+1 { // +1: the newline itself
			l.line++
			return nil, &LineError{Line: l.line, Err: fmt.Errorf("line longer than %d bytes", l.max)}
		}
		switch {
		case err == nil:
			l.line++
			return bytes.TrimSuffix(l.buf[:len(l.buf)-1], []byte{'\r'}), nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF):
			if len(l.buf) == 0 {
				return nil, io.EOF
			}
			l.line++
			return bytes.TrimSuffix(l.buf, []byte{'\r'}), nil
		default:
			return nil, fmt.Errorf("after line %d: %w", l.line, err)
		}
	}
}
