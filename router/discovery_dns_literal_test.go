package router

import (
	"context"
	"net"
	"testing"
)

// TestDNSSRVLiteralTargetChecked: an SRV record whose target is an address
// literal ("0.0.0.0.", a valid domain name to Go's resolver) is checked as
// an A record's address is: an unspecified, multicast or broadcast
// address is skipped, not made a backend at http://0.0.0.0:port (which
// dials this host) or at a multicast group; a unicast literal is kept.
func TestDNSSRVLiteralTargetChecked(t *testing.T) {
	const name = "_http._tcp.vllm.llm.test."
	r := newDNSRounds(t, DNSDiscoveryConfig{Name: name, Family: familyAny})
	r.res.srvs[name] = []*net.SRV{
		{Target: "0.0.0.0.", Port: 8000},
		{Target: "224.0.0.1.", Port: 8000},
		{Target: "255.255.255.255.", Port: 8000},
		{Target: "::.", Port: 8000},
		{Target: "ff02::1.", Port: 8000},
		{Target: "10.0.0.5.", Port: 8000},
	}
	list, err := r.d.Lookup(context.Background(), r.sink)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := names(list), "10.0.0.5:8000=http://10.0.0.5:8000"; got != want {
		t.Fatalf("backends %q, want only %q", got, want)
	}
}
