package transport

import (
	"context"
	"testing"
	"time"
)

// A peer whose certificate another CA signed (a node given the wrong
// --tls-ca) is never reached: the dialler says so once at warn level,
// naming the TLS handshake, and not again for each retry (debug); it was a
// debug line only, so a node that replicated with nobody logged nothing.
func TestDialFailuresWarnOnceAndNameTLS(t *testing.T) {
	defer checkGoroutines(t)()
	cfgA, _, logs := observedConfig(t, testCA(t), "a")
	cfgA.DialBackoff = time.Millisecond
	a := startQUIC(t, cfgA)
	other, err := GenerateCA("another-cluster-ca", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	b := startQUIC(t, testConfig(t, other, "b"))
	for range 3 {
		if err := a.Send(context.Background(), b.Addr(), []byte("x")); err == nil {
			t.Fatal("a send to a peer of another CA succeeded")
		}
		time.Sleep(5 * time.Millisecond) // past DialBackoff: the next Send dials again
	}
	warns := logs.lines(`"level":"warn"`, "TLS handshake failed", b.Addr())
	if len(warns) != 1 {
		t.Fatalf("%d warn lines for three failed dials, want 1:\n%s", len(warns), logs.String())
	}
	if n := len(logs.lines(`"level":"debug"`, "cannot connect to a peer", b.Addr())); n != 2 {
		t.Fatalf("%d debug lines for the repeats, want 2:\n%s", n, logs.String())
	}
	_ = a.Close()
	_ = b.Close()
}
