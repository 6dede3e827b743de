package transport

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/rs/zerolog"
)

// QUIC is the production transport: one UDP socket, mutual TLS against the
// cluster CA, one outbound connection per peer address (dialled lazily on
// the first Send, cached, re-dialled after it fails) and one unidirectional
// stream per message (see framing.go). Incoming connections are used for
// receiving only, so two nodes that talk both ways hold two connections.
//
// Guarantees: a nil error from Send means the whole message was handed to
// QUIC, which retransmits it until the peer acknowledges it or the
// connection dies; there is no end-to-end acknowledgement, no ordering
// between messages (each has its own stream), and no duplication.
type QUIC struct {
	cfg  Config
	log  zerolog.Logger
	m    *metrics
	tls  tlsPair
	addr string

	udp      *net.UDPConn
	tr       *quic.Transport
	ln       *quic.Listener
	dialConf *quic.Config

	inbound chan Message

	// ctx is cancelled when Close stops waiting for in-progress Sends; it is
	// the parent of every dial, accept and read.
	ctx    context.Context
	cancel context.CancelFunc

	mu       sync.Mutex
	closed   bool                    // no new Sends
	aborted  bool                    // no new connections are kept
	peers    map[string]*peer        // outbound connections by address
	inConns  map[*quic.Conn]struct{} // accepted connections
	inByPeer map[string][]*quic.Conn // accepted connections by peer name, oldest first (see admitConn)
	sends    sync.WaitGroup          // Sends in progress
	lastSend atomic.Int64            // UnixNano of the last Send that returned nil
	// dialWarned: when a failed dial to each address was last logged at
	// warn level (dialFailLevel); an address is dropped on a good dial.
	dialWarned map[string]time.Time
	wg         sync.WaitGroup // every goroutine started by QUIC
	done       chan struct{}  // closed when Close has finished
}

// peer is one outbound connection, or the dial that will produce it.
// conn, err and failedAt are written before ready is closed.
type peer struct {
	addr     string
	ready    chan struct{}
	conn     *quic.Conn
	err      error
	failedAt time.Time
}

func (p *peer) dialled() bool {
	select {
	case <-p.ready:
		return true
	default:
		return false
	}
}

// QUIC application error codes (connections) and stream error codes.
const (
	codeShutdown quic.ApplicationErrorCode = 0 // graceful Close
	codeNoName   quic.ApplicationErrorCode = 1 // peer certificate without a node name
	codeTooMany  quic.ApplicationErrorCode = 2 // peer over MaxInboundConnsPerPeer: its oldest connection goes

	streamAborted  quic.StreamErrorCode = 1 // sender gave up (ctx, timeout, Close)
	streamRejected quic.StreamErrorCode = 2 // receiver refused the message
)

// NewQUIC validates cfg, binds the UDP socket and starts accepting peers.
func NewQUIC(cfg Config) (*QUIC, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, fmt.Errorf("transport: register metrics: %w", err)
	}
	log := cfg.Logger.With().Str("component", "transport").Logger()
	pair, err := buildTLS(cfg.TLS, func(side string, err error) {
		m.rejected.WithLabelValues(side).Inc()
		log.Debug().Str("side", side).Err(err).Msg("transport: peer rejected")
	})
	if err != nil {
		return nil, err
	}
	if cfg.NodeName != "" && cfg.NodeName != pair.self {
		return nil, fmt.Errorf("transport: NodeName %q does not match the certificate's node name %q", cfg.NodeName, pair.self)
	}
	log = log.With().Str("node", pair.self).Logger()

	laddr, err := net.ResolveUDPAddr("udp", cfg.ListenAddr)
	if err != nil {
		return nil, fmt.Errorf("transport: listen address: %w", err)
	}
	udp, err := net.ListenUDP("udp", laddr)
	if err != nil {
		return nil, fmt.Errorf("transport: listen: %w", err)
	}
	tuneSocketBuffers(udp, log)

	base := quic.Config{
		HandshakeIdleTimeout: cfg.HandshakeTimeout,
		MaxIdleTimeout:       cfg.MaxIdleTimeout,
		KeepAlivePeriod:      cfg.KeepAlivePeriod,
		MaxIncomingStreams:   -1, // messages travel on unidirectional streams only
	}
	serverConf, dialConf := base, base
	serverConf.MaxIncomingUniStreams = cfg.MaxIncomingStreams
	dialConf.MaxIncomingUniStreams = -1 // outbound connections only send

	q := &QUIC{
		cfg:      cfg,
		log:      log,
		m:        m,
		tls:      pair,
		udp:      udp,
		dialConf: &dialConf,
		inbound:  make(chan Message, cfg.InboundQueueLen),
		peers:    make(map[string]*peer),
		inConns:  make(map[*quic.Conn]struct{}),
		inByPeer: make(map[string][]*quic.Conn),
		done:     make(chan struct{}),
	}
	q.tr = &quic.Transport{Conn: udp, StatelessResetKey: statelessResetKey(cfg)}
	q.ln, err = q.tr.Listen(pair.server, &serverConf)
	if err != nil {
		_ = q.tr.Close()
		_ = udp.Close()
		return nil, fmt.Errorf("transport: listen: %w", err)
	}
	q.addr = cfg.AdvertiseAddr
	if q.addr == "" {
		q.addr = udp.LocalAddr().String()
	}
	q.ctx, q.cancel = context.WithCancel(context.Background())
	q.wg.Add(1)
	go q.acceptLoop()
	log.Info().Str("addr", q.addr).Str("listen", udp.LocalAddr().String()).Msg("transport: QUIC listening")
	return q, nil
}

// statelessResetKey derives a key that stays the same across restarts of a
// node (it comes from the node's private key), so that a restarted node
// answers packets of its previous life with a stateless reset and peers drop
// their stale connection at once instead of after MaxIdleTimeout.
func statelessResetKey(cfg Config) *quic.StatelessResetKey {
	der, err := x509.MarshalPKCS8PrivateKey(cfg.TLS.Certificates[0].PrivateKey)
	if err != nil {
		return nil // resets are an optimisation; idle timeout still applies
	}
	k := quic.StatelessResetKey(sha256.Sum256(append([]byte("kvmesh/1 stateless reset key\x00"), der...)))
	return &k
}

// Addr returns the address peers use to reach this node.
func (q *QUIC) Addr() string { return q.addr }

// Inbound returns the messages received from peers. It is closed by Close.
func (q *QUIC) Inbound() <-chan Message { return q.inbound }

// smallMessage is the size up to which quic-go copies a Write into its
// packet buffer without waiting for flow control (it buffers up to one
// packet, 1452 bytes, header included).
const smallMessage = 1024

// Send hands one message to the peer at addr. It dials the peer if there is
// no live connection (concurrent Sends share one dial), opens a stream,
// writes the message and returns; data may be reused once Send returns. It
// is bounded by ctx and by Config.SendTimeout, and fails fast during
// Config.DialBackoff after a failed dial. Safe for concurrent use.
func (q *QUIC) Send(ctx context.Context, addr string, data []byte) error {
	if len(data) > q.cfg.MaxMessageBytes {
		q.m.sendErrors.WithLabelValues(reasonTooLarge).Inc()
		return fmt.Errorf("%w: %d bytes, limit %d", ErrMessageTooLarge, len(data), q.cfg.MaxMessageBytes)
	}
	if err := ctx.Err(); err != nil {
		q.m.sendErrors.WithLabelValues(reasonCancelled).Inc()
		return err
	}
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		q.m.sendErrors.WithLabelValues(reasonClosed).Inc()
		return ErrClosed
	}
	q.sends.Add(1)
	q.mu.Unlock()
	defer q.sends.Done()

	// One deadline bounds the whole Send. A caller's earlier deadline is used
	// as is (no extra context). Close needs no hook here: it cancels dials
	// and closes the connections, which unblocks every step below.
	deadline := time.Now().Add(q.cfg.SendTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	} else {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline)
		defer cancel()
	}

	conn, err := q.conn(ctx, addr)
	if err != nil {
		return q.sendFailed(ctx, reasonDial, addr, err)
	}
	str, err := conn.OpenUniStreamSync(ctx)
	if err != nil {
		return q.sendFailed(ctx, reasonStream, addr, err)
	}
	_ = str.SetWriteDeadline(deadline)
	// A large Write can block on flow control; cancelling the stream is what
	// unblocks it if ctx is cancelled before its deadline. A small one is
	// copied into quic-go's buffer at once and needs no such hook.
	stop := func() bool { return true }
	if len(data) > smallMessage {
		stop = context.AfterFunc(ctx, func() { str.CancelWrite(streamAborted) })
	}
	h := headerPool.Get().(*[frameHeaderLen]byte)
	putFrameHeader(h[:], len(data))
	_, err = str.Write(h[:])
	headerPool.Put(h)
	if err == nil {
		_, err = str.Write(data)
	}
	if err == nil {
		err = str.Close()
	}
	if !stop() {
		// ctx ended while we wrote: the stream is being reset, so even a
		// complete write may not arrive.
		return q.sendFailed(ctx, reasonCancelled, addr, ctx.Err())
	}
	if err != nil {
		str.CancelWrite(streamAborted)
		return q.sendFailed(ctx, reasonWrite, addr, err)
	}
	q.m.msgsSent.Inc()
	q.m.bytesSent.Add(float64(len(data)))
	q.lastSend.Store(time.Now().UnixNano())
	return nil
}

// closeLinger is how long Close keeps the connections open after the last
// Send returned, at most (and never past DrainTimeout): a Send returns once
// its message is handed to QUIC, and closing a connection discards the
// streams the peer has not received and read yet, so a node that sent its
// last changes and closed at once lost a few of every 200 (loopback, no
// load). 250 ms is many LAN round trips and a short wait at shutdown.
const closeLinger = 250 * time.Millisecond

// sendFailed counts and wraps a Send error. Close, then an ended ctx, win
// over the reason given, since they are usually the cause.
func (q *QUIC) sendFailed(ctx context.Context, reason, addr string, err error) error {
	switch {
	case q.ctx.Err() != nil:
		reason, err = reasonClosed, ErrClosed
	case ctx.Err() != nil:
		reason = reasonCancelled
		if !errors.Is(err, ctx.Err()) {
			err = fmt.Errorf("%w (%v)", ctx.Err(), err)
		}
	}
	q.m.sendErrors.WithLabelValues(reason).Inc()
	q.log.Debug().Str("peer", addr).Str("reason", reason).Err(err).Msg("transport: send failed")
	return fmt.Errorf("transport: send to %s: %w", addr, err)
}

// conn returns the live outbound connection to addr, starting a dial if
// there is none (unless the last dial failed less than DialBackoff ago).
func (q *QUIC) conn(ctx context.Context, addr string) (*quic.Conn, error) {
	q.mu.Lock()
	p := q.peers[addr]
	if p != nil && p.dialled() {
		switch {
		case p.err != nil && time.Since(p.failedAt) < q.cfg.DialBackoff:
			q.mu.Unlock()
			return nil, fmt.Errorf("%w (retrying after %s)", p.err, q.cfg.DialBackoff)
		case p.err != nil || p.conn.Context().Err() != nil:
			delete(q.peers, addr)
			p = nil
		}
	}
	if p == nil {
		if q.aborted {
			q.mu.Unlock()
			return nil, ErrClosed
		}
		p = &peer{addr: addr, ready: make(chan struct{})}
		q.peers[addr] = p
		q.wg.Add(1)
		go q.dialAndWatch(p)
	}
	q.mu.Unlock()
	select {
	case <-p.ready:
		if p.err != nil {
			return nil, p.err
		}
		return p.conn, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// dialAndWatch dials p.addr (bounded by DialTimeout and Close, not by any
// one Send) and then, on success, stays with the connection until it dies
// to forget it, so that the next Send re-dials.
func (q *QUIC) dialAndWatch(p *peer) {
	defer q.wg.Done()
	conn, err := q.dial(p.addr)
	if err == nil {
		q.mu.Lock()
		if q.aborted { // Close ran while we dialled
			q.mu.Unlock()
			_ = conn.CloseWithError(codeShutdown, "shutting down")
			conn, err = nil, ErrClosed
		} else {
			p.conn = conn
			q.mu.Unlock()
		}
	}
	if err != nil {
		q.m.dials.WithLabelValues("error").Inc()
		p.err = fmt.Errorf("transport: dial %s: %w", p.addr, err)
		p.failedAt = time.Now()
		close(p.ready)
		if lvl := q.dialFailLevel(p.addr, p.failedAt, err); lvl == zerolog.WarnLevel && isTLSError(err) {
			q.log.Warn().Str("peer", p.addr).Err(err).
				Msg("transport: cannot connect to a peer: the TLS handshake failed (is its certificate signed by this node's CA, tls_ca?); nothing is replicated with it until it succeeds")
		} else {
			q.log.WithLevel(lvl).Str("peer", p.addr).Err(err).Msg("transport: cannot connect to a peer; retrying")
		}
		return
	}
	q.mu.Lock()
	delete(q.dialWarned, p.addr) // the next failure is news again
	q.mu.Unlock()
	// Counted before Send is released (close(p.ready)), so a caller whose
	// message got through also sees the dial and the connection counted.
	q.m.dials.WithLabelValues("ok").Inc()
	gauge := q.m.conns.WithLabelValues("outbound")
	gauge.Inc()
	defer gauge.Dec()
	close(p.ready)
	if e := q.log.Debug(); e.Enabled() {
		name, _ := peerName(conn)
		e.Str("peer", p.addr).Str("peer_name", name).Msg("transport: connected")
	}

	<-conn.Context().Done()
	q.mu.Lock()
	if q.peers[p.addr] == p {
		delete(q.peers, p.addr)
	}
	q.mu.Unlock()
	q.log.Debug().Str("peer", p.addr).Err(context.Cause(conn.Context())).Msg("transport: connection closed")
}

// dialWarnEvery is how often failed dials to one address are logged at
// warn level while they go on (debug in between): a peer that cannot be
// reached (another cluster's CA, a firewall) is one line every few
// minutes, not one per dial.
const dialWarnEvery = 5 * time.Minute

// dialFailLevel is the level a failed dial to addr at now is logged at:
// warn for the first of a run of failures and every dialWarnEvery after,
// debug otherwise; a dial cancelled by Close is debug.
func (q *QUIC) dialFailLevel(addr string, now time.Time, err error) zerolog.Level {
	if q.ctx.Err() != nil || errors.Is(err, ErrClosed) {
		return zerolog.DebugLevel
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if last, ok := q.dialWarned[addr]; ok && now.Sub(last) < dialWarnEvery {
		return zerolog.DebugLevel
	}
	if q.dialWarned == nil || len(q.dialWarned) >= maxDialWarned {
		q.dialWarned = make(map[string]time.Time) // bounded: addresses come and go with members
	}
	q.dialWarned[addr] = now
	return zerolog.WarnLevel
}

// maxDialWarned bounds dialWarned (one entry per unreachable address).
const maxDialWarned = 1024

// isTLSError reports whether a dial failed in the TLS handshake (an
// unknown authority, a bad certificate), as opposed to the network.
func isTLSError(err error) bool {
	var ca x509.UnknownAuthorityError
	var inv x509.CertificateInvalidError
	var host x509.HostnameError
	if errors.As(err, &ca) || errors.As(err, &inv) || errors.As(err, &host) {
		return true
	}
	var te *quic.TransportError
	return errors.As(err, &te) && te.ErrorCode.IsCryptoError()
}

func (q *QUIC) dial(addr string) (*quic.Conn, error) {
	ctx, cancel := context.WithTimeout(q.ctx, q.cfg.DialTimeout)
	defer cancel()
	ua, err := resolveUDP(ctx, addr)
	if err != nil {
		return nil, err
	}
	return q.tr.Dial(ctx, ua, q.tls.client, q.dialConf)
}

// resolveUDP resolves host:port under ctx (net.ResolveUDPAddr cannot be
// cancelled). A literal IP does not touch the resolver.
func resolveUDP(ctx context.Context, addr string) (*net.UDPAddr, error) {
	if ap, err := netip.ParseAddrPort(addr); err == nil {
		return net.UDPAddrFromAddrPort(ap), nil
	}
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil {
		return nil, fmt.Errorf("bad port in %q", addr)
	}
	ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return nil, err
	}
	if len(ips) == 0 {
		return nil, fmt.Errorf("no address for %q", host)
	}
	return net.UDPAddrFromAddrPort(netip.AddrPortFrom(ips[0].Unmap(), uint16(port))), nil
}

// Close stops the transport: new Sends fail with ErrClosed, Sends in
// progress get up to DrainTimeout to finish, the connections stay open
// until closeLinger after the last Send (so the peer reads what it was
// sent), then every connection is
// closed with a CONNECTION_CLOSE (so peers drop it at once), every
// goroutine has returned, the socket is closed, and Inbound is closed.
// Calling Close again waits for the first call and returns nil.
func (q *QUIC) Close() error {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		<-q.done
		return nil
	}
	q.closed = true
	q.mu.Unlock()
	defer close(q.done)
	closing := time.Now()

	drained := make(chan struct{})
	go func() { q.sends.Wait(); close(drained) }()
	if q.cfg.DrainTimeout > 0 {
		t := time.NewTimer(q.cfg.DrainTimeout)
		select {
		case <-drained:
		case <-t.C:
			q.log.Debug().Msg("transport: drain timeout, aborting sends in progress")
		}
		t.Stop()
	}
	// Let the last messages sent be read before the connections close,
	// within DrainTimeout of Close.
	if last := q.lastSend.Load(); last != 0 {
		until := time.Unix(0, last).Add(closeLinger)
		if end := closing.Add(q.cfg.DrainTimeout); end.Before(until) {
			until = end
		}
		if wait := time.Until(until); wait > 0 {
			time.Sleep(wait)
		}
	}
	q.cancel() // fails dials in progress and stops accepting

	q.mu.Lock()
	q.aborted = true
	var conns []*quic.Conn
	for _, p := range q.peers {
		// p.conn is written under mu (dialAndWatch) before ready is
		// closed: a dial that completed just before aborted was set has
		// its conn here though ready may not be closed yet, and it is
		// closed with the others (the peer learns at once, not at its
		// idle timeout).
		if p.conn != nil {
			conns = append(conns, p.conn)
		}
	}
	for c := range q.inConns {
		conns = append(conns, c)
	}
	q.mu.Unlock()
	var wg sync.WaitGroup
	for _, c := range conns {
		wg.Go(func() { _ = c.CloseWithError(codeShutdown, "shutting down") })
	}
	wg.Wait()
	<-drained // closed connections have unblocked every Send

	// Errors from here on mean "already closed" at worst; the socket's is
	// the only one worth reporting.
	_ = q.ln.Close()
	_ = q.tr.Close()
	q.wg.Wait()
	err := q.udp.Close()
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	close(q.inbound)
	q.log.Info().Msg("transport: closed")
	return err
}
