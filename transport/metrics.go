package transport

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the QUIC transport's Prometheus collectors. Without a
// Registerer they are still created (and counted into) but not exported,
// which keeps the hot path free of nil checks.
type metrics struct {
	msgsSent, msgsRecv   prometheus.Counter
	bytesSent, bytesRecv prometheus.Counter
	sendErrors           *prometheus.CounterVec // reason
	recvErrors           *prometheus.CounterVec // reason
	rejected             *prometheus.CounterVec // side
	conns                *prometheus.GaugeVec   // direction
	dials                *prometheus.CounterVec // result
	evicted              prometheus.Counter     // inbound connections closed by MaxInboundConnsPerPeer
}

// Label values, fixed so that dashboards can rely on them.
const (
	// send error reasons
	reasonTooLarge  = "too_large" // message over MaxMessageBytes (also a receive reason)
	reasonClosed    = "closed"    // Send after Close
	reasonDial      = "dial"      // dialling the peer failed (or is in backoff)
	reasonStream    = "stream"    // opening a stream failed (connection gone, no credit in time)
	reasonWrite     = "write"     // writing the message failed
	reasonCancelled = "cancelled" // the caller's ctx ended or SendTimeout passed
	// receive error reasons
	reasonMalformed = "malformed" // frame breaks the wire format
	reasonTimeout   = "timeout"   // ReadTimeout passed mid-message
	reasonRead      = "read"      // stream reset by the peer or connection lost mid-message
)

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		msgsSent: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kvmesh_transport_messages_sent_total",
			Help: "Messages handed to QUIC by Send without error.",
		}),
		msgsRecv: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kvmesh_transport_messages_received_total",
			Help: "Whole messages read from peers, counted as they are queued on Inbound.",
		}),
		bytesSent: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kvmesh_transport_bytes_sent_total",
			Help: "Payload bytes of the messages counted in messages_sent_total.",
		}),
		bytesRecv: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kvmesh_transport_bytes_received_total",
			Help: "Payload bytes of the messages counted in messages_received_total.",
		}),
		sendErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvmesh_transport_send_errors_total",
			Help: "Sends that returned an error, by reason.",
		}, []string{"reason"}),
		recvErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvmesh_transport_receive_errors_total",
			Help: "Incoming messages dropped, by reason.",
		}, []string{"reason"}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvmesh_transport_peer_rejections_total",
			Help: "Handshakes refused because the peer certificate did not verify against the cluster CA, by our side (client or server).",
		}, []string{"side"}),
		conns: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "kvmesh_transport_connections",
			Help: "Open QUIC connections, by direction (outbound: dialled by us for Send; inbound: accepted, for receiving).",
		}, []string{"direction"}),
		dials: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvmesh_transport_dials_total",
			Help: "Outbound connection attempts, by result (ok or error).",
		}, []string{"result"}),
		evicted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kvmesh_transport_inbound_conns_evicted_total",
			Help: "Inbound connections closed because their peer opened more than MaxInboundConnsPerPeer (the oldest is closed).",
		}),
	}
	if reg == nil {
		return m, nil
	}
	var err error
	m.msgsSent = register(reg, m.msgsSent, &err)
	m.msgsRecv = register(reg, m.msgsRecv, &err)
	m.bytesSent = register(reg, m.bytesSent, &err)
	m.bytesRecv = register(reg, m.bytesRecv, &err)
	m.sendErrors = register(reg, m.sendErrors, &err)
	m.recvErrors = register(reg, m.recvErrors, &err)
	m.rejected = register(reg, m.rejected, &err)
	m.conns = register(reg, m.conns, &err)
	m.dials = register(reg, m.dials, &err)
	m.evicted = register(reg, m.evicted, &err)
	return m, err
}

// register registers c, or returns the identical collector already there
// (a node restarted in the same process, or several nodes sharing one
// registry). Other registration errors are recorded in *errp.
func register[C prometheus.Collector](reg prometheus.Registerer, c C, errp *error) C {
	err := reg.Register(c)
	if err == nil {
		return c
	}
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing
		}
	}
	if *errp == nil {
		*errp = err
	}
	return c
}
