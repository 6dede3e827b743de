package meshtest

import (
	"bytes"
	"io"
	"testing"
	"time"
)

func TestPacketsAndStreams(t *testing.T) {
	n := NewMemberNetwork(7946)
	a, err := n.Transport("a")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := n.Transport("b")
	if _, err := n.Transport("a"); err == nil {
		t.Fatal("a second live transport for a name was accepted")
	}
	if n.Addr("a") != "127.0.0.1:7946" || n.Addr("b") != "127.0.0.2:7946" {
		t.Fatalf("addresses %s %s", n.Addr("a"), n.Addr("b"))
	}
	ip, port, _ := b.FinalAdvertiseAddr("", 0)
	if ip.String() != "127.0.0.2" || port != 7946 {
		t.Fatalf("b advertises %v:%d", ip, port)
	}

	if _, err := a.WriteTo([]byte("ping"), n.Addr("b")); err != nil {
		t.Fatal(err)
	}
	select {
	case p := <-b.PacketCh():
		if string(p.Buf) != "ping" || p.From.String() != n.Addr("a") {
			t.Fatalf("packet %q from %v", p.Buf, p.From)
		}
	case <-time.After(20 * time.Second): // a liveness bound, not a deadline
		t.Fatal("no packet")
	}

	c, err := a.DialTimeout(n.Addr("b"), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var srv io.ReadWriteCloser
	select {
	case srv = <-b.StreamCh():
	case <-time.After(20 * time.Second): // a liveness bound, not a deadline
		t.Fatal("no stream")
	}
	go func() { _, _ = c.Write([]byte("push-pull")); _ = c.Close() }()
	got, _ := io.ReadAll(srv)
	if !bytes.Equal(got, []byte("push-pull")) {
		t.Fatalf("stream carried %q", got)
	}
}

func TestPartitionAndShutdown(t *testing.T) {
	n := NewMemberNetwork(1)
	a, _ := n.Transport("a")
	b, _ := n.Transport("b")
	n.Partition([]string{"a"}, []string{"b"})
	if _, err := a.WriteTo([]byte("x"), n.Addr("b")); err != nil {
		t.Fatal("a lost packet must not be an error (UDP)")
	}
	if _, err := a.DialTimeout(n.Addr("b"), time.Second); err == nil {
		t.Fatal("dial across a partition succeeded")
	}
	select {
	case <-b.PacketCh():
		t.Fatal("a packet crossed the partition")
	default:
	}
	n.Heal()
	if _, err := a.DialTimeout(n.Addr("b"), time.Second); err != nil {
		t.Fatalf("dial after heal: %v", err)
	}

	// b goes away: sends to it never block; its name can come back at the
	// same address.
	_ = b.Shutdown()
	for i := 0; i < 5000; i++ { // more than the packet queue holds
		_, _ = a.WriteTo([]byte("x"), n.Addr("b"))
	}
	if _, err := a.DialTimeout(n.Addr("b"), time.Second); err == nil {
		t.Fatal("dial to a shut-down transport succeeded")
	}
	b2, err := n.Transport("b")
	if err != nil {
		t.Fatal(err)
	}
	if ip, _, _ := b2.FinalAdvertiseAddr("", 0); ip.String() != "127.0.0.2" {
		t.Fatalf("restarted b got %v", ip)
	}
	st := n.Stats()
	if st.PacketsDropped < 5000 || st.DialsFailed != 2 {
		t.Fatalf("stats %+v", st)
	}
}
