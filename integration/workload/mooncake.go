package workload

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"time"
)

// LongPromptPolicy says what LoadMooncake does with a prompt longer than
// MooncakeOptions.MaxInputTokens.
type LongPromptPolicy int

const (
	// TruncateLongPrompts keeps the first MaxInputTokens tokens: the request
	// keeps its arrival time and its prefix relations with other requests
	// (it is cut at the end, so shared prefixes stay shared).
	TruncateLongPrompts LongPromptPolicy = iota
	// SkipLongPrompts drops the request.
	SkipLongPrompts
)

// MooncakeOptions select and shape a slice of a Mooncake trace.
type MooncakeOptions struct {
	// Start skips requests whose trace timestamp is before it; arrival
	// offsets are counted from Start. Default 0.
	Start time.Duration
	// Duration keeps requests with timestamp < Start+Duration; 0 means to
	// the end. Default 0: the conversation trace is one hour.
	Duration time.Duration
	// MaxRequests keeps at most this many requests (after Start, skips
	// excluded); 0 means no limit. Default 0.
	MaxRequests int
	// Compression divides arrival offsets: 4 replays an hour in 15 minutes
	// (4x the request rate, same request mix). Must be in [0.001, 1e6].
	// Default 1.
	Compression float64
	// MaxInputTokens caps the prompt length (sim tokens, template included);
	// 0 means no cap. Default 0: the trace's longest prompt is 126,195 tokens,
	// set this to the backends' context length minus output room.
	MaxInputTokens int
	// LongPrompts says how to apply MaxInputTokens. Default
	// TruncateLongPrompts, which keeps the arrival process intact.
	LongPrompts LongPromptPolicy
	// MaxOutputTokens caps max_tokens; 0 means no cap. Default 0 (the trace's
	// longest output is 2,000 tokens). max_tokens is always at least 1.
	MaxOutputTokens int
	// SpreadTies spreads the requests that share a timestamp evenly over
	// the time until the next timestamp. The conversation trace's
	// timestamps are quantized (to about 3 s, ~10 requests each): replayed
	// as they stand, every quantum's requests arrive in the same
	// microsecond, a synchronized burst that real traffic does not have and
	// that no distributed router can see coming (its nodes decide before
	// hearing of each other's bookings). Default false: the file as it is.
	SpreadTies bool
	// Seed selects the synthetic text the hash ids map to. Default 0.
	Seed uint64
	// Materialize renders every Body while loading. Default false: the whole
	// trace renders to 824 MB; use Request.BodyBytes or AppendBody instead.
	Materialize bool
	// Body sets model, streaming and ignore_eos.
	Body BodyOptions
}

// DefaultMooncakeOptions returns the defaults documented on MooncakeOptions.
func DefaultMooncakeOptions() MooncakeOptions {
	return MooncakeOptions{Compression: 1, LongPrompts: TruncateLongPrompts, Body: DefaultBodyOptions()}
}

func (o *MooncakeOptions) validate() error {
	switch {
	case !(o.Compression >= 1e-3 && o.Compression <= 1e6):
		return fmt.Errorf("workload: MooncakeOptions.Compression %v must be in [0.001, 1e6] (see DefaultMooncakeOptions)", o.Compression)
	case o.Start < 0 || o.Duration < 0 || o.MaxRequests < 0 || o.MaxOutputTokens < 0:
		return errors.New("workload: MooncakeOptions Start, Duration, MaxRequests and MaxOutputTokens must not be negative")
	case o.MaxInputTokens != 0 && o.MaxInputTokens < chatOverhead:
		return fmt.Errorf("workload: MooncakeOptions.MaxInputTokens %d is below the %d template tokens", o.MaxInputTokens, chatOverhead)
	case o.LongPrompts != TruncateLongPrompts && o.LongPrompts != SkipLongPrompts:
		return fmt.Errorf("workload: unknown LongPromptPolicy %d", o.LongPrompts)
	case o.Body.Model == "":
		return errors.New("workload: BodyOptions.Model is empty (see DefaultBodyOptions)")
	}
	return nil
}

// TraceInfo describes the trace slice a workload was built from.
type TraceInfo struct {
	// Lines is the number of lines read (including those before Start).
	Lines int
	// Skipped counts requests dropped by SkipLongPrompts; Truncated those cut
	// by TruncateLongPrompts; OutputClamped those whose max_tokens was capped
	// by MaxOutputTokens or raised to 1.
	Skipped, Truncated, OutputClamped int
	// Bound is the infinite-cache bound of the slice at the trace's own
	// 512-token granularity, over the replayed (possibly truncated) prompts in
	// trace order, starting cold at the slice's first request: a request's
	// hits are its leading blocks whose hash ids earlier requests of the
	// slice carried, counted with their token length (a partial last block
	// counts its own length). Bound.UniqueBlocks is the slice's working set
	// in distinct blocks. For the whole conversation trace the hit rate is
	// 0.3736 (FIELD-NOTES: 37.4%).
	Bound CacheBound
}

// LoadMooncake reads a Mooncake trace (JSON lines, optionally gzipped) and
// builds the selected slice as a workload.
//
// Each request becomes one user message whose content is the concatenation
// of its hash ids' text blocks, 512 words each, the last cut so that the
// content has input_length-3 words: with the template's 3 tokens the sim
// counts exactly input_length prompt tokens. Equal hash ids give equal text,
// so the trace's prefix sharing carries over byte for byte.
//
// Conversation is inferred, since the trace has no session ids: a request
// continues a conversation when its cached prefix covers all full blocks of
// an earlier prompt of that conversation (the next turn of a chat resends the
// whole history); otherwise it starts a new one. Prompts under two full
// blocks never count as extended, since block 0 is shared by every request.
// On the whole trace this finds 8,056 conversations, 6,044 of them single
// requests, the longest 43 turns. Group numbers distinct second blocks
// (requests sharing their first 1,024 tokens: 7,373 on the whole trace) in
// order of first appearance. Turn counts requests within a Conversation.
//
// Errors name the line; a malformed line stops the load. Without Materialize
// the workload keeps ~24 bytes per hash id (about 7 MB for the whole trace)
// and bodies are rendered on demand; with it, the whole trace holds 824 MB of
// bodies.
func LoadMooncake(path string, opts MooncakeOptions) (*Workload, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("workload: %w", err)
	}
	defer f.Close()
	w, err := ReadMooncake(f, opts)
	if err != nil {
		return nil, fmt.Errorf("workload: %s: %w", path, err)
	}
	return w, nil
}

// ReadMooncake is LoadMooncake on a reader.
func ReadMooncake(r io.Reader, opts MooncakeOptions) (*Workload, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	br := bufio.NewReader(r)
	if magic, _ := br.Peek(2); bytes.Equal(magic, []byte{0x1f, 0x8b}) {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("gzip: %w", err)
		}
		defer zr.Close()
		r = zr
	} else {
		r = br
	}
	b := newMooncakeBuilder(opts)
	lines := newLineReader(r, maxLineBytes)
	for !b.done {
		line, err := lines.next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue // blank lines (a trailing newline) are not records
		}
		rec, err := ParseMooncakeLine(line)
		if err == nil {
			err = b.add(lines.line, rec)
		}
		if err != nil {
			return nil, &LineError{Line: lines.line, Err: err}
		}
	}
	b.info.Lines = lines.line
	return b.finish(), nil
}

// mooncakeBuilder turns validated records into requests, tracking the
// infinite-cache bound and inferred conversations as it goes.
type mooncakeBuilder struct {
	opts    MooncakeOptions
	enc     *encoding
	w       *Workload
	info    TraceInfo
	done    bool
	lastTS  int64
	parents map[int64]parentSeen // every block id read: its parent, for consistency
	seen    map[int64]struct{}   // block ids of the slice so far (the infinite cache)
	tips    map[int64]int32      // last full block of a prompt -> its conversation
	groups  map[int64]int        // second block id -> group
	turns   []int                // requests so far per conversation
}

type parentSeen struct {
	parent int64 // -1 for position 0
	line   int
}

func newMooncakeBuilder(opts MooncakeOptions) *mooncakeBuilder {
	return &mooncakeBuilder{
		opts:    opts,
		enc:     newEncoding(opts.Body),
		w:       &Workload{},
		lastTS:  -1,
		parents: make(map[int64]parentSeen),
		seen:    make(map[int64]struct{}),
		tips:    make(map[int64]int32),
		groups:  make(map[int64]int),
	}
}

func (b *mooncakeBuilder) add(line int, rec MooncakeRecord) error {
	if rec.Timestamp < b.lastTS {
		return fmt.Errorf("timestamp %d before the previous line's %d (the trace must be in arrival order)", rec.Timestamp, b.lastTS)
	}
	b.lastTS = rec.Timestamp
	if rec.InputLength < chatOverhead {
		return fmt.Errorf("input_length %d is below the %d tokens of the chat template", rec.InputLength, chatOverhead)
	}
	for k, id := range rec.HashIDs {
		parent := int64(-1)
		if k > 0 {
			parent = rec.HashIDs[k-1]
		}
		if p, ok := b.parents[id]; !ok {
			b.parents[id] = parentSeen{parent: parent, line: line}
		} else if p.parent != parent {
			return fmt.Errorf("hash id %d at position %d follows %d, but on line %d it followed %d (hash ids must be chained)",
				id, k, parent, p.line, p.parent)
		}
	}

	ts := time.Duration(rec.Timestamp) * time.Millisecond
	if ts < b.opts.Start {
		return nil
	}
	if b.opts.Duration > 0 && ts-b.opts.Start >= b.opts.Duration {
		b.done = true
		return nil
	}

	in, ids := rec.InputLength, rec.HashIDs
	if b.opts.MaxInputTokens > 0 && in > b.opts.MaxInputTokens {
		if b.opts.LongPrompts == SkipLongPrompts {
			b.info.Skipped++
			return nil
		}
		b.info.Truncated++
		in = b.opts.MaxInputTokens
		ids = ids[:(in+MooncakeBlockTokens-1)/MooncakeBlockTokens]
	}
	out := rec.OutputLength
	if b.opts.MaxOutputTokens > 0 && out > b.opts.MaxOutputTokens {
		out = b.opts.MaxOutputTokens
		b.info.OutputClamped++
	} else if out < 1 {
		out = 1
		b.info.OutputClamped++
	}

	// One user message; content words = in - 3 so the sim counts in tokens.
	spans := make([]span, 0, len(ids))
	left := in - chatOverhead
	for _, id := range ids {
		n := min(left, MooncakeBlockTokens)
		if n <= 0 {
			break
		}
		spans = append(spans, span{block: textID(nsMooncake, b.opts.Seed, int(id), 0), words: int32(n)})
		left -= n
	}
	msgs := []message{{role: roleUser, spans: spans}}
	req := newRequest(b.enc, msgs, out)
	req.At = time.Duration(float64(ts-b.opts.Start) / b.opts.Compression)
	b.track(&req, ids, in)
	if b.opts.Materialize {
		req.Body = req.render()
	}
	b.w.Requests = append(b.w.Requests, req)
	if b.opts.MaxRequests > 0 && len(b.w.Requests) >= b.opts.MaxRequests {
		b.done = true
	}
	return nil
}

// track updates the trace-granularity bound and infers Conversation, Group
// and Turn for req.
func (b *mooncakeBuilder) track(req *Request, ids []int64, in int) {
	bound := &b.info.Bound
	bound.PromptTokens += int64(in)
	conv := int32(-1)
	for k, id := range ids {
		if _, ok := b.seen[id]; !ok {
			break
		}
		bound.HitTokens += int64(min(MooncakeBlockTokens, in-k*MooncakeBlockTokens))
		if c, ok := b.tips[id]; ok {
			conv = c // the deepest earlier prompt this one extends
		}
	}
	if conv < 0 {
		conv = int32(len(b.turns))
		b.turns = append(b.turns, 0)
	}
	for _, id := range ids {
		b.seen[id] = struct{}{}
	}
	// This prompt's last full block marks it as extendable, unless that is
	// block 0, which every request of the trace shares.
	if full := in / MooncakeBlockTokens; full >= 2 {
		if _, ok := b.tips[ids[full-1]]; !ok {
			b.tips[ids[full-1]] = conv
		}
	}
	key := ids[min(1, len(ids)-1)]
	g, ok := b.groups[key]
	if !ok {
		g = len(b.groups)
		b.groups[key] = g
	}
	req.Conversation, req.Group, req.Turn = int(conv), g, b.turns[conv]
	b.turns[conv]++
}

func (b *mooncakeBuilder) finish() *Workload {
	o := b.opts
	if o.SpreadTies {
		spreadTies(b.w.Requests)
	}
	b.info.Bound.BlockTokens = MooncakeBlockTokens
	b.info.Bound.UniqueBlocks = len(b.seen)
	b.w.Name = fmt.Sprintf("mooncake(start=%v duration=%v max=%d compression=%g)", o.Start, o.Duration, o.MaxRequests, o.Compression)
	if o.SpreadTies {
		b.w.Name = fmt.Sprintf("mooncake(start=%v duration=%v max=%d compression=%g spread)", o.Start, o.Duration, o.MaxRequests, o.Compression)
	}
	info := b.info
	b.w.Trace = &info
	b.w.summarize()
	return b.w
}

// spreadTies gives the k requests sharing an arrival time t the times
// t + i*(t'-t)/k, i = 0..k-1, where t' is the next distinct arrival time
// (for the last group, the gap before it), keeping their order.
func spreadTies(reqs []Request) {
	var gap time.Duration
	for i := 0; i < len(reqs); {
		j := i + 1
		for j < len(reqs) && reqs[j].At == reqs[i].At {
			j++
		}
		if j < len(reqs) {
			gap = reqs[j].At - reqs[i].At
		}
		k := time.Duration(j - i)
		for n := i; n < j; n++ {
			reqs[n].At += gap * time.Duration(n-i) / k
		}
		i = j
	}
}
