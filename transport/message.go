package transport

import "errors"

// Message is one whole message received from a peer.
type Message struct {
	// From is the sender's node name. On QUIC it is taken from the peer's
	// certificate (see NodeName), so it is authenticated by the cluster CA;
	// on MemNetwork it is the sending endpoint's name.
	From string
	// Data is the message body. The receiver owns it.
	Data []byte
}

// ALPN is the TLS application protocol every kvmesh QUIC connection
// negotiates. Bump it when the wire format changes incompatibly.
const ALPN = "kvmesh/1"

// DefaultMaxMessageBytes is the default largest message: a full-state CRDT
// chunk is about 1 MiB, so 16 MiB leaves ample headroom while still bounding
// what a peer can make us allocate.
const DefaultMaxMessageBytes = 16 << 20

var (
	// ErrClosed is returned by Send after Close.
	ErrClosed = errors.New("transport: closed")
	// ErrMessageTooLarge is returned by Send for a message over the
	// configured maximum, and is the receive-side reason for rejecting one.
	ErrMessageTooLarge = errors.New("transport: message too large")
	// ErrUnreachable is returned by MemEndpoint.Send when no endpoint has
	// the address (the in-memory counterpart of a failed dial).
	ErrUnreachable = errors.New("transport: address unreachable")
)
