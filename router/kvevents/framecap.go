package kvevents

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/go-zeromq/zmq4/transport"
)

// The ZMQ library allocates each frame at the size its header declares,
// before reading it: one 9-byte header from anyone who can reach a socket
// (the Listen socket above all, which engines reach without
// authentication) declaring 2^50 bytes crashed the process, and smaller
// sizes made it allocate gigabytes. Every socket of this package therefore
// runs over a TCP transport whose connections parse ZMTP's framing as the
// bytes arrive and fail the connection at the first header that would take
// a message past Config.MaxMessageBytes or MaxMessageFrames: the library
// sees a read error, which ends that connection only.

// ErrFrameTooLarge is the read error of a connection whose peer sent a
// frame header over the limits.
var ErrFrameTooLarge = errors.New("kvevents: ZMQ message over the size or frame limit (Config.MaxMessageBytes, MaxMessageFrames)")

// zmtpGreeting is ZMTP 3's greeting: signature (10), version (2),
// mechanism (20), as-server (1), filler (31).
const zmtpGreeting = 64

// ZMTP frame flags.
const (
	zmtpMore = 0x01
	zmtpLong = 0x02
)

// frameLimits are the limits one connection enforces.
type frameLimits struct {
	maxBytes  uint64        // a message's frames' bodies together
	maxFrames int           // frames of one message
	handshake time.Duration // a connection's greeting and handshake command, accepted or dialed (Config.HandshakeTimeout)
}

// frameGuard follows the framing of the bytes a connection reads.
type frameGuard struct {
	lim      frameLimits
	skip     uint64 // bytes of the greeting or of a frame body still to pass
	hdr      [9]byte
	hdrN     int // header bytes collected
	inFrame  bool
	done     int // frames read whole (the first is the handshake's command)
	msgBytes uint64
	frames   int
	err      error
}

func newFrameGuard(lim frameLimits) frameGuard {
	return frameGuard{lim: lim, skip: zmtpGreeting}
}

// feed follows p, the next bytes read; it returns ErrFrameTooLarge once a
// header declares more than the limits allow (and every call after).
func (g *frameGuard) feed(p []byte) error {
	_, err := g.feedValid(p)
	return err
}

// feedValid is feed, also saying how many of p's bytes come before the
// header that failed (all of them when none did): a reader may pass those
// on, never the header, whose size the library would allocate.
func (g *frameGuard) feedValid(p []byte) (int, error) {
	if g.err != nil {
		return 0, g.err
	}
	total, hdrAt := len(p), 0
	for len(p) > 0 && g.err == nil {
		if g.skip > 0 {
			n := min(g.skip, uint64(len(p)))
			g.skip -= n
			p = p[n:]
			if g.skip == 0 && g.inFrame {
				g.inFrame = false
				g.done++
			}
			continue
		}
		if g.hdrN == 0 {
			hdrAt = total - len(p)
		}
		g.hdr[g.hdrN] = p[0]
		g.hdrN++
		p = p[1:]
		need := 2
		if g.hdr[0]&zmtpLong != 0 {
			need = 9
		}
		if g.hdrN < need {
			continue
		}
		var size uint64
		if need == 2 {
			size = uint64(g.hdr[1])
		} else {
			for _, b := range g.hdr[1:9] {
				size = size<<8 | uint64(b)
			}
		}
		g.hdrN = 0
		g.frames++
		if size > g.lim.maxBytes || g.msgBytes+size > g.lim.maxBytes || g.frames > g.lim.maxFrames {
			g.err = fmt.Errorf("%w: frame %d of %d bytes, %d in the message before it", ErrFrameTooLarge, g.frames, size, g.msgBytes)
			break
		}
		g.msgBytes += size
		if g.hdr[0]&zmtpMore == 0 { // the message's last frame (a command is always one)
			g.msgBytes, g.frames = 0, 0
		}
		g.skip = size
		if size == 0 {
			g.done++
		} else {
			g.inFrame = true
		}
	}
	if g.err != nil {
		return hdrAt, g.err
	}
	return total, nil
}

// guardedConn is a net.Conn whose reads go through a frameGuard.
//
// Once the handshake is through it also reads ahead: the library reads
// each frame's header and then its body with a read of its own, so an
// event batch (topic, sequence and payload frames) took six or more read
// system calls. A read shorter than readAhead is served from a buffer
// filled by one read of the connection, which takes in whatever the peer
// has sent, usually the whole message.
type guardedConn struct {
	net.Conn
	g         frameGuard
	handshake bool // a read deadline is set until the peer's handshake command is in
	// unwatch, for a dialed connection, stops closing it when the dial's
	// context ends (guardedTCP.Dial); called once the handshake is through.
	unwatch func() bool

	ahead    []byte // read from the connection (and guarded), not yet returned
	aheadBuf []byte // ahead's storage, readAhead bytes, made at the first buffered read
	aheadErr error  // the read that filled ahead failed after its bytes: returned once they are
}

// readAhead is the size of a connection's read-ahead buffer: a few event
// batches of a busy engine; a read as long as it bypasses it. Each
// connection keeps one from its first read after the handshake on (a
// thousand engines on a Listen socket: 32 MB).
const readAhead = 32 << 10

// newGuardedConn guards c's reads with lim from its handshake on.
func newGuardedConn(c net.Conn, lim frameLimits) *guardedConn {
	return &guardedConn{Conn: c, g: newFrameGuard(lim), handshake: true}
}

func (c *guardedConn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if len(c.ahead) > 0 {
		n := copy(p, c.ahead)
		c.ahead = c.ahead[n:]
		return n, nil
	}
	if err := c.aheadErr; err != nil {
		c.aheadErr = nil
		return 0, err
	}
	if c.handshake || len(p) >= readAhead {
		return c.read(p)
	}
	if c.aheadBuf == nil {
		c.aheadBuf = make([]byte, readAhead)
	}
	n, err := c.read(c.aheadBuf)
	k := copy(p, c.aheadBuf[:n])
	if k < n {
		c.ahead, c.aheadErr = c.aheadBuf[k:n], err
		return k, nil
	}
	return k, err
}

// read reads the connection through the frame guard.
func (c *guardedConn) read(p []byte) (int, error) {
	if c.g.err != nil {
		return 0, c.g.err
	}
	n, err := c.Conn.Read(p)
	if valid, gerr := c.g.feedValid(p[:n]); gerr != nil {
		c.Conn.Close()
		c.handshakeOver()
		return valid, gerr
	}
	if c.handshake {
		switch {
		case c.g.done > 0:
			_ = c.Conn.SetReadDeadline(time.Time{})
			c.handshakeOver()
		case err != nil:
			c.Conn.Close() // the library keeps a connection whose handshake failed
			c.handshakeOver()
		}
	}
	return n, err
}

func (c *guardedConn) handshakeOver() {
	c.handshake = false
	if c.unwatch != nil {
		c.unwatch()
		c.unwatch = nil
	}
}

type guardedListener struct {
	net.Listener
	lim frameLimits
}

func (l guardedListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if err := c.SetReadDeadline(time.Now().Add(l.lim.handshake)); err != nil {
			c.Close() // gone already; an error here would end the library's accept loop
			continue
		}
		return newGuardedConn(c, l.lim), nil
	}
}

// guardedTCP is zmq4's TCP transport with every connection guarded.
type guardedTCP struct {
	tcp transport.Transport
	lim frameLimits
}

// Dial connects and bounds the handshake that the library runs next, as
// the listener does for accepted connections: the library reads the peer's
// greeting and handshake command with no deadline and does not close the
// connection when its context ends, so a peer that accepted the TCP
// connection and never answered (a hung engine, a wrong port) held the
// socket's Dial forever, and with it a replay under the consumer's lock, a
// handover (SetOwned) and Manager.Close. The connection gets a read
// deadline of HandshakeTimeout, cleared once the peer's handshake command
// is in (guardedConn.Read), and is closed if ctx (the socket's: a replay's
// timeout, a handover, Close) ends before then.
func (t guardedTCP) Dial(ctx context.Context, d transport.Dialer, addr string) (net.Conn, error) {
	c, err := t.tcp.Dial(ctx, d, addr)
	if err != nil {
		return nil, err
	}
	if err := c.SetReadDeadline(time.Now().Add(t.lim.handshake)); err != nil {
		c.Close()
		return nil, err
	}
	gc := newGuardedConn(c, t.lim)
	gc.unwatch = context.AfterFunc(ctx, func() { c.Close() })
	return gc, nil
}

func (t guardedTCP) Listen(ctx context.Context, addr string) (net.Listener, error) {
	l, err := t.tcp.Listen(ctx, addr)
	if err != nil {
		return nil, err
	}
	return guardedListener{Listener: l, lim: t.lim}, nil
}

func (t guardedTCP) Addr(ep string) (string, error) { return t.tcp.Addr(ep) }

// guardedSchemes are the transports registered so far, one per set of
// limits (the library's registry is process-wide and never forgets one).
var guardedSchemes struct {
	sync.Mutex
	byLimits map[frameLimits]string
}

// guarded returns endpoint (tcp://host:port) on the guarded transport for
// lim; other schemes are returned as they are (ipc and inproc peers are
// local processes).
func guarded(endpoint string, lim frameLimits) (string, error) {
	rest, ok := strings.CutPrefix(endpoint, "tcp://")
	if !ok {
		return endpoint, nil
	}
	guardedSchemes.Lock()
	defer guardedSchemes.Unlock()
	name, ok := guardedSchemes.byLimits[lim]
	if !ok {
		name = fmt.Sprintf("kvmesh-tcp-%d-%d-%d", lim.maxBytes, lim.maxFrames, lim.handshake.Milliseconds())
		if err := zmq4.RegisterTransport(name, guardedTCP{tcp: transport.New("tcp"), lim: lim}); err != nil {
			return "", err
		}
		if guardedSchemes.byLimits == nil {
			guardedSchemes.byLimits = map[frameLimits]string{}
		}
		guardedSchemes.byLimits[lim] = name
	}
	return name + "://" + rest, nil
}

// dialGuarded connects sock to endpoint over the guarded transport.
func dialGuarded(sock zmq4.Socket, endpoint string, lim frameLimits) error {
	ep, err := guarded(endpoint, lim)
	if err != nil {
		return err
	}
	return sock.Dial(ep)
}

// listenGuarded binds sock to endpoint over the guarded transport.
func listenGuarded(sock zmq4.Socket, endpoint string, lim frameLimits) error {
	ep, err := guarded(endpoint, lim)
	if err != nil {
		return err
	}
	return sock.Listen(ep)
}
