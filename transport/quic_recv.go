package transport

import (
	"errors"
	"os"
	"slices"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/rs/zerolog"
)

// Receive side of QUIC: accept connections, accept a unidirectional stream
// per message, read and check the frame, queue it on Inbound.

// acceptLoop accepts connections until Close.
func (q *QUIC) acceptLoop() {
	defer q.wg.Done()
	for {
		conn, err := q.ln.Accept(q.ctx)
		if err != nil {
			if q.ctx.Err() == nil {
				q.log.Error().Err(err).Msg("transport: accept failed, no longer accepting peers")
			}
			return
		}
		q.mu.Lock()
		if q.aborted {
			q.mu.Unlock()
			_ = conn.CloseWithError(codeShutdown, "shutting down")
			continue
		}
		q.inConns[conn] = struct{}{}
		q.wg.Add(1)
		q.mu.Unlock()
		go q.serveConn(conn)
	}
}

// peerName is the verified node name of the peer of conn.
func peerName(conn *quic.Conn) (string, error) {
	certs := conn.ConnectionState().TLS.PeerCertificates
	if len(certs) == 0 {
		return "", errors.New("transport: peer presented no certificate")
	}
	return NodeName(certs[0])
}

// admitConn records conn as the newest inbound connection of peer from and
// returns the peer's connections beyond MaxInboundConnsPerPeer, oldest
// first, for the caller to close. Closing the oldest rather than refusing
// the newest means a restarted peer, whose old connection lingers until the
// idle timeout, always gets through, and a peer that dials in a loop holds
// at most the cap. Check and insert happen under one hold of q.mu, so two
// connections arriving together cannot both see room. ok is false once
// Close has begun (it closes every connection in inConns itself).
func (q *QUIC) admitConn(from string, conn *quic.Conn) (evict []*quic.Conn, ok bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.aborted {
		return nil, false
	}
	conns := append(q.inByPeer[from], conn)
	if over := len(conns) - q.cfg.MaxInboundConnsPerPeer; over > 0 {
		evict = slices.Clone(conns[:over])
		conns = slices.Delete(conns, 0, over)
	}
	q.inByPeer[from] = conns
	return evict, true
}

// forgetConn removes conn from its peer's list when it ends (an evicted
// connection has already left it).
func (q *QUIC) forgetConn(from string, conn *quic.Conn) {
	q.mu.Lock()
	defer q.mu.Unlock()
	conns := q.inByPeer[from]
	if i := slices.Index(conns, conn); i >= 0 {
		conns = slices.Delete(conns, i, i+1)
	}
	if len(conns) == 0 {
		delete(q.inByPeer, from)
	} else {
		q.inByPeer[from] = conns
	}
}

// serveConn accepts the streams of one incoming connection until it ends.
func (q *QUIC) serveConn(conn *quic.Conn) {
	defer q.wg.Done()
	gauge := q.m.conns.WithLabelValues("inbound")
	gauge.Inc()
	defer func() {
		gauge.Dec()
		q.mu.Lock()
		delete(q.inConns, conn)
		q.mu.Unlock()
	}()
	// The handshake verified the chain; the name was checked there too, so
	// this only fails if that invariant breaks.
	from, err := peerName(conn)
	if err != nil {
		q.log.Error().Err(err).Str("remote", conn.RemoteAddr().String()).Msg("transport: closing connection")
		_ = conn.CloseWithError(codeNoName, "certificate carries no node name")
		return
	}
	evict, ok := q.admitConn(from, conn)
	if !ok {
		return // Close has begun and closes conn itself
	}
	defer q.forgetConn(from, conn)
	q.log.Debug().Str("peer_name", from).Str("remote", conn.RemoteAddr().String()).Msg("transport: accepted connection")
	for _, old := range evict {
		// Counted and logged before the close, so that a peer which sees
		// its connection closed also finds it counted.
		q.m.evicted.Inc()
		q.log.Warn().Str("peer_name", from).Str("remote", old.RemoteAddr().String()).
			Int("limit", q.cfg.MaxInboundConnsPerPeer).
			Msg("transport: too many connections from peer, closing its oldest")
		_ = old.CloseWithError(codeTooMany, "too many connections from this peer")
	}
	// slots bounds the messages of this peer that are being read or are
	// waiting for room on Inbound. Without it a slow consumer would let
	// goroutines and buffers pile up (a fully read stream returns its QUIC
	// credit to the sender at once). With it, unaccepted streams keep their
	// credit, so a sender outrunning the consumer blocks in Send.
	slots := make(chan struct{}, q.cfg.MaxIncomingStreams)
	for {
		select {
		case slots <- struct{}{}:
		case <-q.ctx.Done():
			return
		case <-conn.Context().Done():
			return
		}
		str, err := conn.AcceptUniStream(q.ctx)
		if err != nil {
			q.log.Debug().Str("peer_name", from).Err(err).Msg("transport: inbound connection ended")
			return
		}
		q.wg.Add(1)
		go q.readMessage(from, str, slots)
	}
}

// readMessage reads one message from its stream and queues it. A bad or
// oversized message costs only its stream: the stream is cancelled (which
// tells the sender to stop and returns flow-control credit), the connection
// and the other messages on it carry on.
func (q *QUIC) readMessage(from string, str *quic.ReceiveStream, slots <-chan struct{}) {
	defer q.wg.Done()
	defer func() { <-slots }()
	_ = str.SetReadDeadline(time.Now().Add(q.cfg.ReadTimeout))
	data, err := readFrame(str, q.cfg.MaxMessageBytes)
	if err != nil {
		str.CancelRead(streamRejected)
		if q.ctx.Err() != nil {
			return // shutting down: not the peer's fault
		}
		reason, lvl := classifyReadError(err)
		q.m.recvErrors.WithLabelValues(reason).Inc()
		q.log.WithLevel(lvl).Str("peer_name", from).Str("reason", reason).Err(err).Msg("transport: message dropped")
		return
	}
	// Counted before it is queued, so a consumer that has taken the message
	// off Inbound also sees it in the counters (counting after the send let a
	// reader observe the message and not yet the count). A message read in
	// full but dropped because the node is closing is still counted: it did
	// arrive.
	q.m.msgsRecv.Inc()
	q.m.bytesRecv.Add(float64(len(data)))
	select {
	case q.inbound <- Message{From: from, Data: data}:
	case <-q.ctx.Done():
	}
}

// classifyReadError maps a readFrame error to a metric reason and a log
// level: protocol problems are the peer's bug or misconfiguration and are
// logged loudly; a connection going away mid-message is routine.
func classifyReadError(err error) (string, zerolog.Level) {
	switch {
	case errors.Is(err, ErrMessageTooLarge):
		return reasonTooLarge, zerolog.ErrorLevel
	case errors.Is(err, errMalformed):
		return reasonMalformed, zerolog.WarnLevel
	case errors.Is(err, os.ErrDeadlineExceeded):
		return reasonTimeout, zerolog.WarnLevel
	default:
		return reasonRead, zerolog.DebugLevel
	}
}
