package transport

import (
	"crypto/tls"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// Config configures a QUIC transport. Start from DefaultConfig and set at
// least TLS; everything else has a default chosen for a LAN cluster of a few
// to a few dozen router nodes.
type Config struct {
	// ListenAddr is the UDP host:port to listen on. Port 0 picks a free port
	// (tests); Addr reports the real one. Default "127.0.0.1:0" so that a
	// forgotten setting never exposes a node beyond loopback.
	ListenAddr string

	// AdvertiseAddr is what Addr returns, i.e. the address peers dial. Leave
	// it empty to use the bound address; set it when listening on a wildcard
	// address (":7947" binds all interfaces, but peers cannot dial "[::]").
	AdvertiseAddr string

	// NodeName is this node's name. Leave it empty to take it from the TLS
	// certificate (see NodeName); when set it must match the certificate, so
	// a node started with another node's certificate fails fast.
	NodeName string

	// TLS holds this node's certificate (Certificates[0], issued by the
	// cluster CA) and the cluster CA pool (RootCAs; ClientCAs is used if
	// RootCAs is nil). TLSConfigFromFiles and CA.TLSConfig build one. All
	// other fields are ignored: the transport always requires TLS 1.3, ALPN
	// "kvmesh/1" and a peer certificate that verifies against the CA, in
	// both directions. Required.
	TLS *tls.Config

	// MaxMessageBytes is the largest message Send accepts and the receiver
	// reads; a larger incoming message is refused before it is allocated.
	// Default 16 MiB: full-state CRDT chunks are ~1 MiB. Limit 4 GiB-1.
	MaxMessageBytes int

	// KeepAlivePeriod makes quic-go send a PING when a connection has been
	// quiet this long. quic-go's default is no keep-alive, which lets an idle
	// cached connection die (and the next Send pay a handshake); 5 s keeps it
	// up at the cost of one tiny packet per peer every 5 s. 0 disables.
	KeepAlivePeriod time.Duration

	// MaxIdleTimeout closes a connection after this long without any packet
	// from the peer. 15 s (quic-go: 30 s) is three missed keep-alives: a
	// crashed peer's connection is dropped and re-dialled quickly, in the same
	// window in which serf marks the node failed (7-10 s).
	MaxIdleTimeout time.Duration

	// HandshakeTimeout bounds the QUIC+TLS handshake. A loopback or LAN mTLS
	// handshake takes a few ms; 5 s (quic-go's default) tolerates a loaded
	// node without letting a dead address hold a dial for long.
	HandshakeTimeout time.Duration

	// DialTimeout bounds one whole dial (resolve + handshake), independent
	// of the ctx of the Send that started it, since concurrent Sends to the
	// same new peer share the dial. Equal to HandshakeTimeout by default.
	DialTimeout time.Duration

	// DialBackoff: after a failed dial, Sends to that address fail fast with
	// the dial error for this long. A dead peer then costs one dial per
	// backoff instead of one DialTimeout per message; 1 s is shorter than
	// any useful gossip interval, so a peer that comes back is reached on the
	// next round.
	DialBackoff time.Duration

	// SendTimeout bounds a Send whose ctx has no earlier deadline (opening
	// a stream can wait for the peer's stream credit, writing for flow
	// control). 10 s moves a 16 MiB message at a modest 2 MB/s; a stalled
	// peer then costs the caller 10 s, not forever.
	SendTimeout time.Duration

	// ReadTimeout bounds how long one incoming message may take from the
	// stream's first byte to its end. It stops a peer that opens a stream and
	// stalls from holding a goroutine and a buffer; 30 s is far above what a
	// 16 MiB message needs on any LAN.
	ReadTimeout time.Duration

	// DrainTimeout is how long Close waits for Sends already in progress
	// before cancelling them and closing the connections. 2 s lets a
	// handful of small messages go out on a graceful shutdown without making
	// shutdown slow. A message whose Send returned may still be lost when
	// Close follows at once: closing a connection discards the streams the
	// peer has not read yet (Close lingers closeLinger after the last Send
	// to let them be read).
	DrainTimeout time.Duration

	// MaxIncomingStreams is how many messages one peer may have in flight to
	// us at once (QUIC's unidirectional stream limit per connection). It
	// bounds goroutines and buffers per peer; beyond it the peer's Send
	// waits for credit. 32 allows plenty of concurrency for a gossip mesh.
	// Worst case, a peer (one certificate name) can make us hold
	// MaxInboundConnsPerPeer x MaxIncomingStreams x MaxMessageBytes of
	// message buffers at once (4 x 32 x 16 MiB with the defaults: buffers
	// grow only as bytes arrive, so this takes a peer actually sending
	// that much; one that announces messages and stalls pins 64 KiB a
	// stream, 8 MiB, for ReadTimeout), plus what waits in InboundQueueLen.
	MaxIncomingStreams int64

	// MaxInboundConnsPerPeer caps the incoming connections one peer (one
	// certificate node name) may hold open at once. Each costs a goroutine
	// and up to MaxIncomingStreams stream readers, so without a cap a buggy
	// or hostile peer that dials in a loop would pin memory without bound.
	// A healthy peer holds one connection to us; a restarted peer's new
	// connection may overlap its old one until MaxIdleTimeout drops it, and
	// a peer that reaches us under two addresses holds two. 4 leaves room
	// for that. A connection over the cap closes the peer's oldest one, so
	// a restarted peer always gets through and a looping one holds at most
	// the cap.
	MaxInboundConnsPerPeer int

	// InboundQueueLen is the capacity of the Inbound channel. When it is
	// full, readers stop consuming streams, which pushes back on the senders
	// through QUIC stream credit; nothing is dropped. 1024 absorbs a burst of
	// deltas from many peers while mesh's consumer catches up.
	InboundQueueLen int

	// Logger receives structured logs: quiet at info (one warning at start
	// if the UDP buffers are too small), one line per decision at debug.
	// Default: a disabled logger.
	Logger zerolog.Logger

	// Registerer, if not nil, gets the kvmesh_transport_* metrics (see
	// metrics.go). Several nodes in one process may share one: they then
	// share the counters (or wrap it with prometheus.WrapRegistererWith).
	Registerer prometheus.Registerer
}

// DefaultConfig returns a Config with every default filled in; TLS remains
// to be set.
func DefaultConfig() Config {
	return Config{
		ListenAddr:             "127.0.0.1:0",
		MaxMessageBytes:        DefaultMaxMessageBytes,
		KeepAlivePeriod:        5 * time.Second,
		MaxIdleTimeout:         15 * time.Second,
		HandshakeTimeout:       5 * time.Second,
		DialTimeout:            5 * time.Second,
		DialBackoff:            time.Second,
		SendTimeout:            10 * time.Second,
		ReadTimeout:            30 * time.Second,
		DrainTimeout:           2 * time.Second,
		MaxIncomingStreams:     32,
		MaxInboundConnsPerPeer: 4,
		InboundQueueLen:        1024,
		Logger:                 zerolog.Nop(),
	}
}

// validate checks a Config; zero durations and sizes are errors rather than
// silently defaulted, so a hand-built Config is caught early.
func (c *Config) validate() error {
	var errs []error
	if c.ListenAddr == "" {
		errs = append(errs, errors.New("ListenAddr is empty"))
	}
	if c.TLS == nil || len(c.TLS.Certificates) == 0 {
		errs = append(errs, errors.New("TLS must carry this node's certificate (TLS.Certificates[0])"))
	} else if c.TLS.RootCAs == nil && c.TLS.ClientCAs == nil {
		errs = append(errs, errors.New("TLS must carry the cluster CA pool (TLS.RootCAs)"))
	}
	if c.MaxMessageBytes <= 0 || uint64(c.MaxMessageBytes) > maxFrameLen {
		errs = append(errs, fmt.Errorf("MaxMessageBytes %d out of range (1..%d)", c.MaxMessageBytes, uint64(maxFrameLen)))
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"MaxIdleTimeout", c.MaxIdleTimeout},
		{"HandshakeTimeout", c.HandshakeTimeout}, {"DialTimeout", c.DialTimeout},
		{"SendTimeout", c.SendTimeout}, {"ReadTimeout", c.ReadTimeout},
	} {
		if d.v <= 0 {
			errs = append(errs, fmt.Errorf("%s must be > 0", d.name))
		}
	}
	if c.KeepAlivePeriod < 0 || c.DialBackoff < 0 || c.DrainTimeout < 0 {
		errs = append(errs, errors.New("KeepAlivePeriod, DialBackoff and DrainTimeout must be >= 0"))
	}
	if c.MaxIncomingStreams <= 0 {
		errs = append(errs, errors.New("MaxIncomingStreams must be > 0"))
	}
	if c.MaxInboundConnsPerPeer <= 0 {
		errs = append(errs, errors.New("MaxInboundConnsPerPeer must be > 0"))
	}
	if c.InboundQueueLen < 0 {
		errs = append(errs, errors.New("InboundQueueLen must be >= 0"))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("transport: invalid config: %w", err)
	}
	return nil
}
