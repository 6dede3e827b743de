package kvevents

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/kvmesh/kvmesh/tree"
)

// Deps are what a Manager is built on.
type Deps struct {
	// Index resolves backend names to ids (required).
	Index *tree.Index
	// Sink receives the claim changes (required).
	Sink Sink
	// Logger; the zero Logger discards.
	Logger zerolog.Logger
	// Registerer receives the kvmesh_kvevents_* metrics; nil skips them.
	Registerer prometheus.Registerer
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Manager consumes the KV-event streams of the engines this node owns.
// SetOwned says which (the mesh decides, see Owner); a node alone owns
// every stream. Streams read from the Listen socket are consumed whenever
// their engine connects here.
type Manager struct {
	cfg     Config
	streams map[string]StreamConfig
	deps    Deps
	log     zerolog.Logger
	zlog    *log.Logger // the ZMQ library's logger, discarded

	mu        sync.Mutex
	consumers map[string]*consumer // by backend; kept for metrics after a stream stops
	running   map[string]context.CancelFunc
	byTopic   map[string]*consumer // streams read from the Listen socket
	listen    zmq4.Socket          // the Listen socket, nil without

	listenErrors atomic.Uint64 // receive errors on the Listen socket (an engine's connection ended)
	// wait pauses dialLoop between connections (sleepCtx; tests replace it
	// before SetOwned).
	wait   func(ctx context.Context, d time.Duration)
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// NewManager validates the configuration and registers the metrics.
func NewManager(cfg Config, streams []StreamConfig, deps Deps) (*Manager, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := cfg.ValidateStreams(streams); err != nil {
		return nil, err
	}
	if deps.Index == nil || deps.Sink == nil {
		return nil, errors.New("kvevents: Deps.Index and Deps.Sink are required")
	}
	if deps.Now == nil {
		deps.Now = time.Now
	}
	m := &Manager{
		cfg: cfg, deps: deps, streams: map[string]StreamConfig{},
		log:       deps.Logger.With().Str("component", "kvevents").Logger(),
		zlog:      log.New(io.Discard, "", 0),
		consumers: map[string]*consumer{}, running: map[string]context.CancelFunc{}, byTopic: map[string]*consumer{},
		wait: sleepCtx,
	}
	for _, s := range streams {
		m.streams[s.Backend] = s
		id, err := deps.Index.EnsureBackend(s.Backend)
		if err != nil {
			return nil, fmt.Errorf("kvevents: backend %q: %w", s.Backend, err)
		}
		var rp Replayer
		if s.ReplayEndpoint != "" {
			rp = &zmqReplayer{endpoint: s.ReplayEndpoint, limits: cfg.limits(), zlog: m.zlog}
		}
		c := newConsumer(s.Backend, id, deps.Index, s, &m.cfg, deps.Sink, rp, deps.Now, m.log)
		m.consumers[s.Backend] = c
		if s.Endpoint == "" {
			m.byTopic[s.Topic] = c
		}
	}
	// A stream's consumer keeps its backend's registry id for the process's
	// life: the Index must never forget the name and give the id to another
	// backend (m.streams is written only above).
	deps.Index.AddInUse(func(name string) bool { _, ok := m.streams[name]; return ok })
	if deps.Registerer != nil {
		if err := deps.Registerer.Register(&collector{m: m}); err != nil {
			return nil, fmt.Errorf("kvevents: registering metrics: %w", err)
		}
	}
	return m, nil
}

// Backends lists the backends that have a stream, sorted by nothing in
// particular.
func (m *Manager) Backends() []string {
	out := make([]string, 0, len(m.streams))
	for b := range m.streams {
		out = append(out, b)
	}
	return out
}

// Start launches the renewal loop and, with Config.Listen, the listening
// socket. Streams in connect mode start with SetOwned.
func (m *Manager) Start(ctx context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.ctx != nil {
		return errors.New("kvevents: already started")
	}
	m.ctx, m.cancel = context.WithCancel(ctx)
	if m.cfg.Listen != "" {
		sub := zmq4.NewSub(m.ctx, zmq4.WithLogger(m.zlog))
		if err := listenGuarded(sub, m.cfg.Listen, m.cfg.limits()); err != nil {
			sub.Close()
			m.cancel()
			return fmt.Errorf("kvevents: listen %s: %w", m.cfg.Listen, err)
		}
		if err := sub.SetOption(zmq4.OptionSubscribe, ""); err != nil {
			sub.Close()
			m.cancel()
			return fmt.Errorf("kvevents: subscribe: %w", err)
		}
		m.listen = sub
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			defer sub.Close()
			m.read(m.ctx, sub, true, func(topic []byte) *consumer { return m.byTopic[string(topic)] })
		}()
	}
	m.wg.Add(1)
	go m.renewLoop(m.ctx)
	return nil
}

// ListenAddr is the Listen socket's bound endpoint ("" without one); with
// port 0 this is where the engines must connect.
func (m *Manager) ListenAddr() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.listen == nil || m.listen.Addr() == nil {
		return ""
	}
	return "tcp://" + m.listen.Addr().String()
}

// SetOwned starts the connect-mode streams of the backends in owned and
// stops the others. Unknown names are ignored.
func (m *Manager) SetOwned(owned []string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.ctx == nil || m.ctx.Err() != nil {
		return
	}
	want := map[string]bool{}
	for _, b := range owned {
		if s, ok := m.streams[b]; ok && s.Endpoint != "" {
			want[b] = true
		}
	}
	for b, cancel := range m.running {
		if !want[b] {
			cancel()
			m.consumers[b].stop() // after cancel: the stream applies nothing more
			delete(m.running, b)
			m.log.Info().Str("backend", b).Msg("kvevents: stream handed over")
		}
	}
	for b := range want {
		if m.running[b] != nil {
			continue
		}
		ctx, cancel := context.WithCancel(m.ctx)
		m.running[b] = cancel
		s, c := m.streams[b], m.consumers[b]
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			m.dialLoop(ctx, s, c)
		}()
		m.log.Info().Str("backend", b).Str("endpoint", s.Endpoint).Msg("kvevents: stream owned")
	}
}

// Owned lists the connect-mode streams running here.
func (m *Manager) Owned() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]string, 0, len(m.running))
	for b := range m.running {
		out = append(out, b)
	}
	return out
}

// Close stops every stream and waits for them.
func (m *Manager) Close() error {
	m.mu.Lock()
	if m.cancel != nil {
		m.cancel()
	}
	m.running = map[string]context.CancelFunc{}
	m.mu.Unlock()
	m.wg.Wait()
	return nil
}

// dialLoop connects to one engine's publisher and reads it until ctx ends,
// reconnecting when the connection drops. A new connection is a new stream:
// the consumer resyncs as it connects. A connection that drops ends the
// stream at once (consumer.lost): what the engine evicts meanwhile is
// unknown, so its claims are no longer renewed.
//
// The library's automatic reconnection is off: it would redial inside the
// socket's reader, retrying for as long as the engine stays unreachable,
// and Recv would report nothing meanwhile, so the stream would look alive
// and its claims be renewed with no end. (An engine that does not accept
// connections is redialled by the library's Dial, every DialRetry.)
//
// A connection that ends without having worked (no live message taken, and
// up for less than maxDialBackoff: an engine resending a message over
// MaxMessageBytes, a peer that drops every connection) is retried after a
// wait that doubles each time up to maxDialBackoff, jittered down to half:
// each connection's resync invalidates the backend mesh-wide, which a
// fixed DialRetry did about every second. A connection that worked resets
// the wait to DialRetry.
func (m *Manager) dialLoop(ctx context.Context, s StreamConfig, c *consumer) {
	backoff := m.cfg.DialRetry
	for ctx.Err() == nil {
		sctx, cancel := context.WithCancel(ctx)
		sub := zmq4.NewSub(sctx, zmq4.WithLogger(m.zlog), zmq4.WithDialerRetry(m.cfg.DialRetry),
			zmq4.WithDialerMaxRetries(-1))
		err := sub.SetOption(zmq4.OptionSubscribe, s.Topic)
		if err == nil {
			err = dialGuarded(sub, s.Endpoint, m.cfg.limits())
		}
		worked := false
		if err == nil {
			up, live := m.deps.Now(), c.liveMessages()
			c.resync(sctx)
			m.read(sctx, sub, false, func([]byte) *consumer { return c })
			c.lost(ctx)
			worked = c.liveMessages() != live || m.deps.Now().Sub(up) >= maxDialBackoff
		} else if ctx.Err() == nil {
			m.log.Debug().Err(err).Str("backend", s.Backend).Msg("kvevents: cannot reach the publisher")
		}
		sub.Close()
		cancel()
		if worked {
			backoff = m.cfg.DialRetry
		}
		m.wait(ctx, backoff/2+rand.N(backoff/2+1))
		backoff = min(2*backoff, max(maxDialBackoff, m.cfg.DialRetry))
	}
}

// maxDialBackoff bounds dialLoop's wait after connections that did not
// work: at most one resync (a mesh-wide invalidation) per 30 s for an
// engine that drops every connection, and a connection that stays up
// that long is taken for one that worked.
const maxDialBackoff = 30 * time.Second

// sleepCtx waits d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// read receives messages until ctx ends or, in connect mode, the socket
// fails (dialLoop then connects again). The Listen socket is shared by
// every engine that connects to it, and the library reports one engine's
// connection ending (a restart, a dropped link, a peer refused for a frame
// over the limit) as an error of the whole socket: listen mode keeps
// reading after a pause, so the other engines' streams go on and the one
// that left is read again when it connects back.
func (m *Manager) read(ctx context.Context, sub zmq4.Socket, listen bool, route func(topic []byte) *consumer) {
	pause := listenErrorPause
	for ctx.Err() == nil {
		msg, err := sub.Recv()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if !listen {
				m.log.Debug().Err(err).Msg("kvevents: receive failed; reconnecting")
				return
			}
			m.listenErrors.Add(1)
			lvl := zerolog.DebugLevel // an engine restarted or left
			if errors.Is(err, ErrFrameTooLarge) {
				lvl = zerolog.WarnLevel
			}
			m.log.WithLevel(lvl).Err(err).Msg("kvevents: an engine's connection to the listen socket ended")
			select {
			case <-ctx.Done():
				return
			case <-time.After(pause):
			}
			pause = min(2*pause, maxListenErrorPause) // a socket failing at once every time costs no CPU
			continue
		}
		pause = listenErrorPause
		if ctx.Err() != nil {
			// Handed over while a message was waiting: the next owner
			// consumes it. (Applying it here would make this node a second
			// consumer of the stream for a moment, whose first message
			// invalidates the backend everywhere.)
			return
		}
		if len(msg.Frames) == 0 {
			continue
		}
		c := route(msg.Frames[0])
		if c == nil {
			continue // an engine we have no stream for
		}
		c.handle(ctx, msg.Frames)
	}
}

// listenErrorPause and maxListenErrorPause bound how often listen mode
// retries a failing receive: at once is what one engine leaving needs (a
// burst of them, every engine dropping with the node's network, costs at
// most a few pauses of 50 ms), and a socket failing every time, which the
// library should not do, costs no more than a wake-up every 50 ms.
const (
	listenErrorPause    = time.Millisecond
	maxListenErrorPause = 50 * time.Millisecond
)

// renewLoop renews the claims of the streams consumed here: the
// connect-mode streams running here, and every listen-mode stream (an
// engine may connect any time). Each consumer decides which of its claims
// are still its to renew (consumer.renew).
func (m *Manager) renewLoop(ctx context.Context) {
	defer m.wg.Done()
	t := time.NewTicker(m.cfg.RenewEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		m.mu.Lock()
		var cs []*consumer
		for b, c := range m.consumers {
			if m.running[b] != nil || m.streams[b].Endpoint == "" {
				cs = append(cs, c)
			}
		}
		m.mu.Unlock()
		for _, c := range cs {
			c.renew()
		}
	}
}

// zmqReplayer asks an engine's ROUTER socket for missed messages: it sends
// [empty, start seq] from a DEALER and reads [empty, seq, payload] frames
// until seq -1 (vLLM's protocol; a frame without the empty delimiter is
// accepted too).
type zmqReplayer struct {
	endpoint string
	limits   frameLimits
	zlog     *log.Logger
}

func (r *zmqReplayer) Replay(ctx context.Context, from int64, fn func(int64, []byte) bool) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	d := zmq4.NewDealer(ctx, zmq4.WithLogger(r.zlog), zmq4.WithDialerMaxRetries(0))
	defer d.Close()
	if err := dialGuarded(d, r.endpoint, r.limits); err != nil {
		return fmt.Errorf("kvevents: replay dial %s: %w", r.endpoint, err)
	}
	if err := d.SendMulti(zmq4.NewMsgFrom([]byte{}, AppendSeq(nil, from))); err != nil {
		return fmt.Errorf("kvevents: replay request: %w", err)
	}
	type result struct {
		msg zmq4.Msg
		err error
	}
	for {
		ch := make(chan result, 1)
		go func() {
			msg, err := d.Recv()
			ch <- result{msg, err}
		}()
		var res result
		select {
		case res = <-ch:
		case <-ctx.Done():
			d.Close() // unblocks Recv
			<-ch
			return ctx.Err()
		}
		if res.err != nil {
			return fmt.Errorf("kvevents: replay receive: %w", res.err)
		}
		f := res.msg.Frames
		if len(f) > 0 && len(f[0]) == 0 {
			f = f[1:]
		}
		if len(f) != 2 {
			return fmt.Errorf("kvevents: replay frame of %d parts", len(f))
		}
		seq, ok := ParseSeq(f[0])
		if !ok {
			return errors.New("kvevents: replay frame without a sequence number")
		}
		if seq < 0 {
			return nil // end marker
		}
		if !fn(seq, f[1]) {
			return nil
		}
	}
}
