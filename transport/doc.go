// Package transport moves whole, opaque messages (byte slices up to a
// configurable maximum, 16 MiB by default) between kvmesh router nodes.
//
// It owns:
//
//   - QUIC, the production implementation (quic-go, TLS 1.3 with mutual TLS
//     against the cluster's CA, one unidirectional stream per message);
//   - certificate helpers for dev and test clusters (GenerateCA, CA.Issue,
//     PEM files, TLSConfigFromFiles), used by the `kvmesh certs` command;
//   - MemNetwork, an in-memory network with fault injection (drop, delay and
//     so reordering, duplicate, partition, heal, killed nodes) for in-process
//     multi-node tests.
//
// Both QUIC and MemEndpoint have exactly the methods Addr, Send, Inbound and
// Close. The interface over them is defined by the consumer (package mesh),
// not here; this package's tests assert that both satisfy a copy of it.
//
// Delivery contract shared by both implementations: best effort, at most once
// per Send on QUIC (MemNetwork may duplicate on purpose), no ordering between
// messages, Message.From is the sender's authenticated node name.
//
// transport knows nothing about claims: it must not import crdt, tree, mesh
// or router.
package transport
