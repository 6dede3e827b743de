package bench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvmesh/kvmesh/router"
)

// Sample is what the client saw of one request.
type Sample struct {
	// Index is the request's position in the workload.
	Index int `json:"i"`
	// Start is when the request was sent, from the start of the run (wall).
	Start time.Duration `json:"start_ns"`
	// TTFT is the time from sending the request to the first SSE data event
	// carrying content (for a non-streaming reply: to the whole answer).
	// Wall clock; 0 if no content arrived.
	TTFT time.Duration `json:"ttft_ns"`
	// E2E is the time from sending the request to the end of the answer.
	E2E time.Duration `json:"e2e_ns"`
	// Late is how much later than its scheduled arrival the request was sent
	// (open loop: the in-flight cap or a slow machine held it back).
	Late time.Duration `json:"late_ns,omitempty"`
	// Capped says the open loop's in-flight cap held the request back: it
	// waited for a slot, or was due while the loop waited for one for an
	// earlier request (so its lateness is the system's backlog, not the
	// load generator's, and stays out of RunResult.DispatchLateP99).
	Capped bool `json:"capped,omitempty"`
	// OutputTokens and CachedTokens are the answer's usage (completion
	// tokens; prompt_tokens_details.cached_tokens as the backend reported).
	// CachedTokens is kept for cross-checks only: hit rates come from the
	// fleet's counters.
	OutputTokens int `json:"out"`
	CachedTokens int `json:"cached"`
	// PromptTokens is the answer's usage.prompt_tokens (0 if absent).
	PromptTokens int `json:"prompt,omitempty"`
	// EngineTTFT is the simulated engine's own time to first token for
	// this request (simulated time, from its arrival at the engine;
	// "kvmesh_sim":{"engine_ttft_us":N} after the usage), 0 when the
	// backend did not say (a real engine, or no usage asked for).
	EngineTTFT time.Duration `json:"engine_ttft_ns,omitempty"`
	// Matched is the share of the prompt the router believed the backend
	// held (matched/total of x-kvmesh-route), 0 when it said none.
	Matched float64 `json:"matched,omitempty"`
	// Status is the HTTP status (0 when none arrived).
	Status int `json:"status"`
	// Err names what went wrong ("" for success): "http-<status>",
	// "transport", "stream", "timeout", "no-content".
	Err string `json:"err,omitempty"`
	// Backend and Reason come from the router's x-kvmesh-route header, when
	// present.
	Backend string `json:"backend,omitempty"`
	Reason  string `json:"reason,omitempty"`
	// Held is how long the router held the request before deciding
	// (x-kvmesh-route's held_ms; 0 when it was not held).
	Held time.Duration `json:"held_ns,omitempty"`
	// Available is how many prompt tokens the best-placed backend had
	// cached when the request was sent (0 when nothing held any of it or
	// it was not measured: MeasureAvailable).
	Available int `json:"available,omitempty"`
	// AvailableAt names that backend ("" when none held any of the
	// prompt): where a request that recomputed what was held elsewhere
	// should have gone.
	AvailableAt string `json:"available_at,omitempty"`
	// Holder is the router's view of that backend just before the request
	// was sent (ReplayConfig.Explain; nil without it). When no backend held
	// any of the prompt it is the view of the chosen backend and of every
	// candidate alone (the holder's fields zero).
	Holder *HolderView `json:"holder,omitempty"`
	// Expected is where a shadow router seeing all the traffic of a
	// multi-node arm would have sent the request ("" without one).
	Expected       string `json:"expected,omitempty"`
	ExpectedReason string `json:"expected_reason,omitempty"`
}

// OK reports whether the request succeeded.
func (s *Sample) OK() bool { return s.Err == "" }

// newHTTPClient returns a client for one run: its own connection pool (so no
// connection outlives an arm), keep-alive sized for the concurrency, no
// compression, no proxy from the environment.
//
// conns bounds the idle connections per host only. A total bound of conns
// (MaxIdleConns) made a client that spreads fewer than one connection per
// host over several hosts (the raw-proxy comparison's direct arm over 4
// backends at concurrency 1, a replay over more fronts than clients) close
// one host's idle connection to keep another's, and dial again on nearly
// every request: the direct c1 baseline measured slower than the proxies.
// The per-host bound already caps the pool at conns per target.
func newHTTPClient(conns int) *http.Client {
	d := &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}
	return &http.Client{Transport: &http.Transport{
		Proxy:               nil,
		DialContext:         d.DialContext,
		MaxIdleConns:        0, // no total bound: see above
		MaxIdleConnsPerHost: conns,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
		WriteBufferSize:     64 << 10,
		ReadBufferSize:      32 << 10,
	}}
}

// bodyPool holds request body buffers. A buffer returns to the pool only
// after the transport has closed the request body (it may read it after
// the response arrived).
var bodyPool = sync.Pool{New: func() any { b := make([]byte, 0, 64<<10); return &b }}

// maxPooledBody: larger buffers are dropped rather than pooled.
const maxPooledBody = 4 << 20

// pooledBody is a request body over a pooled buffer.
type pooledBody struct {
	bytes.Reader
	buf    *[]byte
	closed atomic.Bool
}

func (b *pooledBody) Close() error { b.closed.Store(true); return nil }

// release returns the buffer to the pool if the transport is done with it.
func (b *pooledBody) release() {
	if b.closed.Load() && cap(*b.buf) <= maxPooledBody {
		bodyPool.Put(b.buf)
	}
}

var readerPool = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 16<<10) }}

// send posts one rendered chat body to url and reads the answer, streaming
// or not, filling s (Start and Index are the caller's). render appends the
// body to the buffer it is given; before, if set, is shown the body first
// and fills what it measures into s (ReplayConfig.before).
func send(ctx context.Context, c *http.Client, url string, render func([]byte) []byte, before func(url string, body []byte, s *Sample), s *Sample) {
	bp := bodyPool.Get().(*[]byte)
	*bp = render((*bp)[:0])
	if before != nil {
		before(url, *bp, s)
	}
	body := &pooledBody{buf: bp}
	body.Reset(*bp)
	defer body.release()

	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, body)
	if err != nil {
		s.Err = "transport"
		return
	}
	req.ContentLength = int64(len(*bp))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream, application/json")
	t0 := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		s.E2E = time.Since(t0)
		s.Err = classify(ctx, err)
		return
	}
	defer resp.Body.Close()
	s.Status = resp.StatusCode
	route := resp.Header.Get(router.RouteHeader)
	s.Backend, s.Reason, s.Matched = parseRoute(route)
	s.Held = parseHeld(route)
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
		s.E2E = time.Since(t0)
		s.Err = "http-" + strconv.Itoa(resp.StatusCode)
		return
	}
	br := readerPool.Get().(*bufio.Reader)
	br.Reset(resp.Body)
	if isEventStream(resp.Header.Get("Content-Type")) {
		err = readStream(br, t0, s)
	} else {
		err = readJSON(br, t0, s)
	}
	br.Reset(nil)
	readerPool.Put(br)
	s.E2E = time.Since(t0)
	switch {
	case err != nil:
		s.Err = classify(ctx, err)
	case s.TTFT == 0:
		s.Err = "no-content"
	}
}

func isEventStream(ct string) bool { return strings.HasPrefix(ct, "text/event-stream") }

func classify(ctx context.Context, err error) string {
	if ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) {
		return "timeout"
	}
	var se *streamError
	if errors.As(err, &se) {
		return "stream"
	}
	return "transport"
}

// streamError is an error event inside a stream, or a stream that ended
// without [DONE].
type streamError struct{ msg string }

func (e *streamError) Error() string { return "stream: " + e.msg }

var (
	dataPrefix   = []byte("data: ")
	doneMarker   = []byte("[DONE]")
	contentKey   = []byte(`"content":"`)
	textKey      = []byte(`"text":"`)
	usageName    = []byte(`"usage"`)
	completionKy = []byte(`"completion_tokens":`)
	cachedKey    = []byte(`"cached_tokens":`)
	promptKey    = []byte(`"prompt_tokens":`)
	engineKey    = []byte(`"engine_ttft_us":`)
	errorName    = []byte(`"error"`)
)

// objectAt returns the offset in b of the object that is the value of the
// first member named name (quoted) in b, -1 if none. JSON allows whitespace
// around the colon, and vLLM writes it there where its output comes from
// json.dumps: a stream that fails after some content ends with
// `data: {"error": {...}}` and then `data: [DONE]`, so a compact-only match
// counted the failure as a success. A name inside a string is escaped
// (\"error\") and so never matches.
func objectAt(b, name []byte) int {
	for off := 0; ; {
		j := bytes.Index(b[off:], name)
		if j < 0 {
			return -1
		}
		k := skipSpace(b, off+j+len(name))
		if k < len(b) && b[k] == ':' {
			if k = skipSpace(b, k+1); k < len(b) && b[k] == '{' {
				return k
			}
		}
		off += j + 1
	}
}

// skipSpace returns the offset of the first non-whitespace byte of b at or
// after i (len(b) if none).
func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// maxStreamLine bounds one line of an answer stream. An SSE event of a
// chat answer carries a few tokens (vLLM's are well under 1 KiB; the
// harness's own longest, a usage event, a few hundred bytes), so 4 MiB is
// far above anything real while a stream that never sends a newline
// cannot grow the load generator's memory without bound.
const maxStreamLine = 4 << 20

// maxJSONAnswer bounds a non-streaming answer: the workloads' longest
// output is a few thousand tokens, a few tens of KB.
const maxJSONAnswer = 64 << 20

// readStream reads an SSE stream: TTFT at the first data event whose delta
// carries non-empty content (or text), usage from the event that has it,
// success at data: [DONE]. A line longer than maxStreamLine is an error.
func readStream(br *bufio.Reader, t0 time.Time, s *Sample) error {
	var long []byte // a line longer than the reader's buffer
	for {
		line, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			if len(long)+len(line) > maxStreamLine {
				return &streamError{msg: fmt.Sprintf("a line longer than %d bytes", maxStreamLine)}
			}
			long = append(long, line...)
			continue
		}
		if long != nil {
			line = append(long, line...)
			long = nil
		}
		if len(line) > 0 && bytes.HasPrefix(line, dataPrefix) {
			ev := bytes.TrimSpace(line[len(dataPrefix):])
			switch {
			case bytes.Equal(ev, doneMarker):
				return nil
			case objectAt(ev, errorName) >= 0:
				return &streamError{msg: "error event"}
			}
			if s.TTFT == 0 && hasContent(ev) {
				s.TTFT = time.Since(t0)
			}
			if i := objectAt(ev, usageName); i >= 0 {
				s.OutputTokens = intAfter(ev[i:], completionKy)
				s.CachedTokens = intAfter(ev[i:], cachedKey)
				s.PromptTokens = intAfter(ev[i:], promptKey)
				s.EngineTTFT = time.Duration(intAfter(ev[i:], engineKey)) * time.Microsecond
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				return &streamError{msg: "ended without [DONE]"}
			}
			return err
		}
	}
}

// readJSON reads a non-streaming answer: the first token is the whole answer.
func readJSON(br *bufio.Reader, t0 time.Time, s *Sample) error {
	body, err := io.ReadAll(io.LimitReader(br, maxJSONAnswer+1))
	if err != nil {
		return err
	}
	if len(body) > maxJSONAnswer {
		// Cut, its usage may be missing or wrong: not an answer to count.
		return &streamError{msg: fmt.Sprintf("an answer longer than %d bytes", maxJSONAnswer)}
	}
	if len(bytes.TrimSpace(body)) == 0 {
		// A 200 with nothing in it (a router that gave up on a request
		// its server had cancelled): no answer to count.
		return &streamError{msg: "an empty answer"}
	}
	usage := objectAt(body, usageName)
	if usage < 0 && objectAt(body, errorName) >= 0 {
		return &streamError{msg: "error object"}
	}
	s.TTFT = time.Since(t0)
	if i := usage; i >= 0 {
		s.OutputTokens = intAfter(body[i:], completionKy)
		s.CachedTokens = intAfter(body[i:], cachedKey)
		s.PromptTokens = intAfter(body[i:], promptKey)
		s.EngineTTFT = time.Duration(intAfter(body[i:], engineKey)) * time.Microsecond
	}
	return nil
}

// hasContent reports whether an event has a non-empty "content" or "text"
// string (the sim's and vLLM's first chat event carries role and "").
func hasContent(ev []byte) bool {
	for _, key := range [][]byte{contentKey, textKey} {
		if i := bytes.Index(ev, key); i >= 0 && i+len(key) < len(ev) && ev[i+len(key)] != '"' {
			return true
		}
	}
	return false
}

// intAfter parses the non-negative integer following key in b (0 if absent).
func intAfter(b, key []byte) int {
	i := bytes.Index(b, key)
	if i < 0 {
		return 0
	}
	n := 0
	for _, c := range b[i+len(key):] {
		if c == ' ' && n == 0 {
			continue
		}
		if c < '0' || c > '9' || n > 1<<40 {
			break
		}
		n = n*10 + int(c-'0')
	}
	return n
}

// nextField splits the first ";"-separated field, trimmed, off an
// x-kvmesh-route value.
func nextField(v string) (field, rest string) {
	if i := strings.IndexByte(v, ';'); i >= 0 {
		return strings.TrimSpace(v[:i]), v[i+1:]
	}
	return strings.TrimSpace(v), ""
}

// parseRoute reads backend, reason and the matched share of the prompt
// from an x-kvmesh-route value.
func parseRoute(v string) (backend, reason string, matched float64) {
	for v != "" {
		var field string
		field, v = nextField(v)
		if b, ok := strings.CutPrefix(field, "backend="); ok {
			backend = b
		} else if r, ok := strings.CutPrefix(field, "reason="); ok {
			reason = r
		} else if m, ok := strings.CutPrefix(field, "matched="); ok {
			if a, b, ok := strings.Cut(m, "/"); ok {
				num, err1 := strconv.ParseFloat(a, 64)
				den, err2 := strconv.ParseFloat(b, 64)
				if err1 == nil && err2 == nil && den > 0 && num >= 0 {
					matched = min(num/den, 1)
				}
			}
		}
	}
	return backend, reason, matched
}

// parseHeld reads held_ms from an x-kvmesh-route value (0 when absent or
// not a non-negative number).
func parseHeld(v string) time.Duration {
	for v != "" {
		var field string
		field, v = nextField(v)
		if h, ok := strings.CutPrefix(field, "held_ms="); ok {
			ms, err := strconv.ParseFloat(h, 64)
			if err != nil || !(ms >= 0) || ms > 1e9 {
				return 0
			}
			return time.Duration(ms * float64(time.Millisecond))
		}
	}
	return 0
}

// String formats a sample for debugging.
func (s *Sample) String() string {
	return fmt.Sprintf("#%d status=%d ttft=%v e2e=%v out=%d err=%q backend=%s reason=%s",
		s.Index, s.Status, s.TTFT, s.E2E, s.OutputTokens, s.Err, s.Backend, s.Reason)
}
