package transport

import (
	"context"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
)

// A peer with a valid certificate that speaks garbage must cost it only its
// streams: no panic, no hang, the node and that very connection keep working.
func TestQUICHostilePeer(t *testing.T) {
	defer checkGoroutines(t)()
	ca := testCA(t)
	cfg, reg, logs := observedConfig(t, ca, "victim")
	cfg.ReadTimeout = time.Second // the stalled stream below must hit it
	cfg.MaxMessageBytes = 1 << 20
	victim := startQUIC(t, cfg)

	// The hostile peer holds a real cluster certificate.
	nc, err := ca.Issue("mallory", nil, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	pair, err := buildTLS(ca.TLSConfig(nc), func(string, error) {})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	conn, err := quic.DialAddr(ctx, victim.Addr(), pair.client, &quic.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.CloseWithError(0, "")
	send := func(b []byte, fin bool) *quic.SendStream {
		t.Helper()
		str, err := conn.OpenUniStreamSync(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := str.Write(b); err != nil {
			t.Fatal(err)
		}
		if fin {
			_ = str.Close()
		}
		return str
	}
	header := func(version byte, n uint32) []byte {
		return []byte{version, byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}
	}
	send([]byte{1, 0}, true)                                    // truncated header
	send(append(header(9, 1), 'x'), true)                       // unknown version
	send(append(header(1, 10), "abc"...), true)                 // truncated payload
	send(append(frame([]byte("ok")), "trailing"...), true)      // bytes after the payload
	send(append(header(1, 1<<31), "not really 2 GiB"...), true) // over the limit
	send(append(header(1, 100), "stall"...), false)             // never finishes
	reset := send(append(header(1, 100), "then reset"...), false)
	reset.CancelWrite(42)

	waitFor(t, wait, "all bad streams accounted for", func() bool {
		return metricValue(t, reg, "kvmesh_transport_receive_errors_total", "reason", reasonMalformed) == 4 &&
			metricValue(t, reg, "kvmesh_transport_receive_errors_total", "reason", reasonTooLarge) == 1 &&
			metricValue(t, reg, "kvmesh_transport_receive_errors_total", "reason", reasonTimeout) == 1 &&
			metricValue(t, reg, "kvmesh_transport_receive_errors_total", "reason", reasonRead) == 1
	})
	expectNone(t, victim.Inbound(), 50*time.Millisecond)

	// The same connection still delivers a well-formed message.
	send(frame([]byte("honest at last")), true)
	m := recv(t, victim.Inbound(), wait)
	if string(m.Data) != "honest at last" || m.From != "mallory" {
		t.Fatalf("got %q from %q", m.Data, m.From)
	}
	// Protocol violations are logged, above debug, with the peer's name.
	if l := logs.lines(`"level":"warn"`, "malformed", "mallory"); len(l) != 4 {
		t.Errorf("want 4 warn lines for malformed frames, got %d:\n%s", len(l), logs.String())
	}
	// Opening bidirectional streams is not allowed at all.
	if _, err := conn.OpenStream(); err == nil {
		t.Error("peer could open a bidirectional stream")
	}
	_ = conn.CloseWithError(0, "")
	_ = victim.Close()
}
