package kvevents

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"strings"
	"sync"

	"github.com/go-zeromq/zmq4"
)

// PublisherConfig sets up a vLLM-compatible KV-event publisher (the
// simulator's engines use it; so do tests).
type PublisherConfig struct {
	// Endpoint is bound for subscribers (tcp://127.0.0.1:0 picks a port).
	// Empty with Connect set: the publisher connects instead.
	Endpoint string
	// Connect is a subscriber's listening endpoint to connect to.
	Connect string
	// ReplayEndpoint, if set, is bound as a ROUTER socket answering replay
	// requests from the buffer.
	ReplayEndpoint string
	// Topic is the first frame of every message.
	Topic string
	// Buffer is how many recent messages the replay socket can resend
	// (vLLM's buffer_steps defaults to 10,000).
	Buffer int
	// Encoding of the events.
	Encoding Encoding
}

// Publisher publishes event batches as [topic, seq, payload] and answers
// replays ([empty, start seq] in, [empty, seq, payload]... then seq -1 out),
// as vLLM's ZmqEventPublisher does.
type Publisher struct {
	cfg    PublisherConfig
	pub    zmq4.Socket
	router zmq4.Socket
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu   sync.Mutex
	seq  int64
	ring []buffered // circular, len cfg.Buffer
	buf  []byte
}

type buffered struct {
	seq     int64
	payload []byte
}

// NewPublisher binds (or connects) the sockets.
func NewPublisher(ctx context.Context, cfg PublisherConfig) (*Publisher, error) {
	if cfg.Buffer <= 0 {
		cfg.Buffer = 10_000
	}
	if (cfg.Endpoint == "") == (cfg.Connect == "") {
		return nil, errors.New("kvevents: publisher needs exactly one of Endpoint and Connect")
	}
	ctx, cancel := context.WithCancel(ctx)
	zl := log.New(io.Discard, "", 0)
	p := &Publisher{cfg: cfg, cancel: cancel, ring: make([]buffered, 0, min(cfg.Buffer, 1024))}
	var err error
	if cfg.Endpoint != "" {
		p.pub = zmq4.NewPub(ctx, zmq4.WithLogger(zl))
		err = p.pub.Listen(cfg.Endpoint)
	} else {
		// Automatic reconnection only for a dialing socket: the library
		// would otherwise re-dial a listener's endpoint when a peer leaves.
		p.pub = zmq4.NewPub(ctx, zmq4.WithLogger(zl), zmq4.WithDialerMaxRetries(-1), zmq4.WithAutomaticReconnect(true))
		err = p.pub.Dial(cfg.Connect)
	}
	if err != nil {
		p.pub.Close()
		cancel()
		return nil, fmt.Errorf("kvevents: publisher: %w", err)
	}
	if cfg.ReplayEndpoint != "" {
		p.router = zmq4.NewRouter(ctx, zmq4.WithLogger(zl))
		if err := p.router.Listen(cfg.ReplayEndpoint); err != nil {
			p.pub.Close()
			p.router.Close()
			cancel()
			return nil, fmt.Errorf("kvevents: replay socket: %w", err)
		}
		p.wg.Add(1)
		go p.serveReplay(ctx)
	}
	return p, nil
}

// Addr is the publisher's bound endpoint (tcp://host:port), "" in connect mode.
func (p *Publisher) Addr() string {
	if a := p.pub.Addr(); a != nil {
		return "tcp://" + a.String()
	}
	return ""
}

// ReplayAddr is the replay socket's endpoint, "" without one.
func (p *Publisher) ReplayAddr() string {
	if p.router == nil {
		return ""
	}
	return "tcp://" + p.router.Addr().String()
}

// Publish encodes b, numbers it and sends it. It returns the sequence
// number used.
func (p *Publisher) Publish(b *Batch) (int64, error) { return p.publish(b, true) }

// Drop numbers and buffers b without sending it, as if subscribers lost it
// (tests of gap repair).
func (p *Publisher) Drop(b *Batch) int64 { s, _ := p.publish(b, false); return s }

func (p *Publisher) publish(b *Batch, send bool) (int64, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.buf = AppendBatch(p.buf[:0], b, p.cfg.Encoding)
	payload := append([]byte(nil), p.buf...)
	seq := p.seq
	p.seq++
	if len(p.ring) < p.cfg.Buffer {
		p.ring = append(p.ring, buffered{seq, payload})
	} else {
		p.ring[seq%int64(p.cfg.Buffer)] = buffered{seq, payload}
	}
	if !send {
		return seq, nil
	}
	return seq, p.pub.SendMulti(zmq4.NewMsgFrom([]byte(p.cfg.Topic), AppendSeq(nil, seq), payload))
}

// Subscribed reports whether a subscription covering the publisher's topic
// has reached it. A PUB socket drops what it sends before then (ZMQ's slow
// joiner): a subscriber that has dialled may still miss the next message.
// Tests wait for it before publishing what must arrive live.
func (p *Publisher) Subscribed() bool {
	ts, ok := p.pub.(interface{ Topics() []string })
	if !ok {
		return false
	}
	for _, t := range ts.Topics() {
		if strings.HasPrefix(p.cfg.Topic, t) {
			return true
		}
	}
	return false
}

// Seq is the next sequence number.
func (p *Publisher) Seq() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.seq
}

func (p *Publisher) serveReplay(ctx context.Context) {
	defer p.wg.Done()
	for ctx.Err() == nil {
		msg, err := p.router.Recv()
		if err != nil {
			return
		}
		f := msg.Frames
		if len(f) != 3 || len(f[1]) != 0 {
			continue // vLLM ignores malformed requests too
		}
		id := f[0]
		start, ok := ParseSeq(f[2])
		if !ok {
			continue
		}
		for _, m := range p.since(start) {
			if err := p.router.SendMulti(zmq4.NewMsgFrom(id, nil, AppendSeq(nil, m.seq), m.payload)); err != nil {
				break
			}
		}
		_ = p.router.SendMulti(zmq4.NewMsgFrom(id, nil, AppendSeq(nil, -1), nil))
	}
}

// since returns the buffered messages with seq >= start, in order.
func (p *Publisher) since(start int64) []buffered {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []buffered
	first := max(p.seq-int64(len(p.ring)), start, 0)
	for s := first; s < p.seq; s++ {
		m := p.ring[s%int64(p.cfg.Buffer)]
		if len(p.ring) < p.cfg.Buffer {
			m = p.ring[s]
		}
		out = append(out, m)
	}
	return out
}

// Close stops the sockets.
func (p *Publisher) Close() error {
	p.cancel()
	p.pub.Close()
	if p.router != nil {
		p.router.Close()
	}
	p.wg.Wait()
	return nil
}
