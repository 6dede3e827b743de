package transport

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"
)

// Messages whose Send returned reach the peer although the sender closes
// right after: Close lingers after the last Send (closing a connection
// discards the streams the peer has not read yet; 7-11 of 200 were lost).
func TestQUICCloseRightAfterSendsLosesNothing(t *testing.T) {
	ca := testCA(t)
	cfg := testConfig(t, ca, "a")
	cfg.DrainTimeout = 2 * time.Second
	a, err := NewQUIC(cfg)
	if err != nil {
		t.Fatal(err)
	}
	b := startQUIC(t, testConfig(t, ca, "b"))
	const n = 200
	for i := range n {
		if err := a.Send(context.Background(), b.Addr(), bytes.Repeat([]byte{byte(i)}, 200)); err != nil {
			t.Fatal(err)
		}
	}
	sent := time.Now()
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	// A lower bound on a sleep is no race with the clock: Close waited.
	if took := time.Since(sent); took < closeLinger/2 {
		t.Errorf("Close returned %v after the last Send, want it to linger about %v", took, closeLinger)
	}
	got := make(map[byte]bool)
	for len(got) < n {
		m := recv(t, b.Inbound(), wait)
		if len(m.Data) != 200 {
			t.Fatalf("message of %d bytes", len(m.Data))
		}
		got[m.Data[0]] = true
	}
	if len(got) != n {
		t.Fatal(fmt.Sprint(len(got), " distinct messages"))
	}
}
