package sim

import (
	"errors"
	"sync/atomic"
	"time"
)

// Errors a sequence can end with.
var (
	errCancelled  = errors.New("sim: request cancelled by the client")
	errRestarted  = errors.New("sim: engine restarted; request dropped")
	errRestarting = errors.New("sim: engine is restarting")
	errClosed     = errors.New("sim: instance closed")
)

type seqState uint8

const (
	stateNew seqState = iota
	stateWaiting
	stateRunning
	stateFinished // completed all its output tokens
	stateDropped  // cancelled, or failed by a restart or Close
)

// seq is one request inside the engine. The HTTP handler creates it, the
// engine goroutine owns the middle block of fields, and the two meet in the
// last block.
type seq struct {
	id          uint64
	promptLen   int
	maxOut      int
	seed        uint64    // root block key (model, cache_salt)
	model       int       // index into Config.Models (KV events)
	salt        string    // cache_salt (KV events)
	arrivalReal time.Time // when the handler submitted it
	extraV      float64   // injected spike delay (simulated seconds), counted into latency

	// Owned by the engine goroutine.
	tokens     []uint32 // prompt, then sampled tokens
	keys       []uint64 // chained keys of the full blocks known so far
	state      seqState
	computed   int     // tokens whose KV is computed
	blocks     []int32 // KV blocks, in token order
	registered int     // leading blocks already registered as cache entries
	generated  int     // tokens sampled
	admitted   bool    // prefix-cache counters already updated
	arrivalV   float64 // simulated arrival time

	// Shared with the handler.
	progress atomic.Int64 // tokens sampled so far (handler side)
	cached   atomic.Int64 // prompt tokens served from the cache at first admission
	// ttftV is the engine's time to first token, simulated ns (0 until
	// the first token): the same figure as the TTFT histogram's.
	ttftV  atomic.Int64
	notify chan struct{} // cap 1: progress moved
	done   chan struct{} // closed when the sequence ends; err is set before
	err    error
}

func newSeq(id uint64, req *request, maxOut int, blockSize int) *seq {
	s := &seq{
		id:          id,
		promptLen:   len(req.tokens),
		maxOut:      maxOut,
		seed:        req.seed,
		model:       req.model,
		salt:        req.salt,
		arrivalReal: time.Now(),
		tokens:      req.tokens,
		notify:      make(chan struct{}, 1),
		done:        make(chan struct{}),
	}
	s.keys = appendBlockKeys(make([]uint64, 0, len(req.tokens)/blockSize+1), s.seed, s.tokens, blockSize)
	return s
}

// wake tells the handler that progress moved, without ever blocking.
func (s *seq) wake() {
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

// end finishes the sequence with err (nil for success).
func (s *seq) end(state seqState, err error) {
	s.progress.Store(int64(s.generated)) // tokens held back by Config.StreamInterval
	s.state = state
	s.err = err
	close(s.done)
}

// finished reports whether the sequence has ended (then err is readable).
func (s *seq) finished() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// seqQueue is the FIFO waiting queue; preempted sequences go back to its
// front.
type seqQueue struct {
	items []*seq
	head  int
}

func (q *seqQueue) len() int { return len(q.items) - q.head }

func (q *seqQueue) front() *seq { return q.items[q.head] }

func (q *seqQueue) pushBack(s *seq) { q.items = append(q.items, s) }

func (q *seqQueue) pushFront(s *seq) {
	if q.head > 0 {
		q.head--
		q.items[q.head] = s
		return
	}
	q.items = append(q.items, nil)
	copy(q.items[1:], q.items)
	q.items[0] = s
}

func (q *seqQueue) popFront() *seq {
	s := q.items[q.head]
	q.items[q.head] = nil
	q.head++
	if q.head == len(q.items) {
		q.items, q.head = q.items[:0], 0
	} else if q.head > 1024 && q.head*2 > len(q.items) {
		n := copy(q.items, q.items[q.head:])
		clear(q.items[n:])
		q.items, q.head = q.items[:n], 0
	}
	return s
}

// remove deletes s from the queue; it reports whether s was there.
func (q *seqQueue) remove(s *seq) bool {
	for i := q.head; i < len(q.items); i++ {
		if q.items[i] == s {
			copy(q.items[i:], q.items[i+1:])
			q.items[len(q.items)-1] = nil
			q.items = q.items[:len(q.items)-1]
			return true
		}
	}
	return false
}

// drain removes and returns every queued sequence.
func (q *seqQueue) drain() []*seq {
	out := append([]*seq(nil), q.items[q.head:]...)
	clear(q.items)
	q.items, q.head = q.items[:0], 0
	return out
}
