package transport

import (
	"errors"
	"net"
	"os"
	"sync"
	"testing"
)

func TestSocketBufferReport(t *testing.T) {
	t.Setenv(quicBufferWarnEnv, "") // restored after the test
	os.Unsetenv(quicBufferWarnEnv)

	var logs logBuffer
	var once sync.Once
	// Enough buffer: a debug line, no warning, quic-go's own check untouched.
	reportSocketBuffers(&once, logs.logger(), wantSocketBuffer, wantSocketBuffer, nil)
	if len(logs.lines(`"level":"warn"`)) != 0 {
		t.Fatalf("warned with enough buffer: %s", logs.String())
	}
	if _, set := os.LookupEnv(quicBufferWarnEnv); set {
		t.Fatal("quic-go's warning disabled although we did not warn")
	}
	// Too small, many times (many nodes in one process): one warning only,
	// and quic-go is told not to repeat it.
	for range 3 {
		reportSocketBuffers(&once, logs.logger(), 212992, 212992, nil)
	}
	if l := logs.lines(`"level":"warn"`, "rmem_max", `"rcvbuf":212992`); len(l) != 1 {
		t.Fatalf("want exactly one warning, got %q", l)
	}
	if v := os.Getenv(quicBufferWarnEnv); v != "true" {
		t.Fatalf("%s = %q, want true", quicBufferWarnEnv, v)
	}

	// The operator silenced quic-go: our line drops to debug.
	var logs2 logBuffer
	reportSocketBuffers(new(sync.Once), logs2.logger(), 0, 0, errors.New("no buffers"))
	if l := logs2.lines(`"level":"debug"`, "no buffers"); len(l) != 1 {
		t.Fatalf("want one debug line, got %q", logs2.String())
	}
}

func TestRaiseSocketBuffers(t *testing.T) {
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rcv, snd, err := raiseSocketBuffers(c, wantSocketBuffer)
	if err != nil {
		t.Fatal(err)
	}
	// What the kernel grants depends on the machine; it is never nothing.
	if rcv <= 0 || snd <= 0 {
		t.Fatalf("buffers %d/%d", rcv, snd)
	}
	t.Logf("UDP buffers: rcv %d, snd %d (want %d)", rcv, snd, wantSocketBuffer)
}
