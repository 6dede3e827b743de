package mesh

import (
	"net"
	"testing"
)

// A member whose quic tag names a wildcard host is dialled at its gossip
// address: dialling "[::]:7947" reaches the dialler's own host.
func TestDialAddrReplacesAWildcardHost(t *testing.T) {
	gossip := net.ParseIP("10.1.2.3")
	for _, c := range []struct {
		tag    string
		gossip net.IP
		want   string
	}{
		{"[::]:7947", gossip, "10.1.2.3:7947"},
		{"0.0.0.0:7947", gossip, "10.1.2.3:7947"},
		{":7947", gossip, "10.1.2.3:7947"},
		{"[::]:7947", net.ParseIP("fd00::5"), "[fd00::5]:7947"},
		{"10.9.9.9:7947", gossip, "10.9.9.9:7947"},                         // advertised: kept
		{"kvmesh-1.kvmesh-mesh:7947", gossip, "kvmesh-1.kvmesh-mesh:7947"}, // a name: kept
		{"[::]:7947", nil, "[::]:7947"},                                    // nothing better known
		{"[::]:7947", net.IPv4zero, "[::]:7947"},
		{"n00", gossip, "n00"}, // not host:port (the in-memory transport's names)
	} {
		if got := dialAddr(c.tag, c.gossip); got != c.want {
			t.Errorf("dialAddr(%q, %v) = %q, want %q", c.tag, c.gossip, got, c.want)
		}
	}
}
