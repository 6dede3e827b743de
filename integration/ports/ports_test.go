package ports

import (
	"net"
	"strconv"
	"testing"
)

func TestFreeIsBelowTheEphemeralRangeAndBindable(t *testing.T) {
	lo, hi := candidates(ephemeralLow())
	for _, p := range []Proto{TCP, UDP, Both} {
		addr, err := Free(p)
		if err != nil {
			t.Fatal(err)
		}
		host, port, err := net.SplitHostPort(addr)
		if err != nil || host != "127.0.0.1" {
			t.Fatalf("%v: %q is not a loopback address (%v)", p, addr, err)
		}
		n, _ := strconv.Atoi(port)
		if hi > lo && (n < lo || n >= hi) {
			t.Fatalf("%v: port %d outside [%d, %d)", p, n, lo, hi)
		}
		if p == TCP || p == Both {
			l, err := net.Listen("tcp", addr)
			if err != nil {
				t.Fatalf("%v: %s not free for tcp: %v", p, addr, err)
			}
			l.Close()
		}
		if p == UDP || p == Both {
			u, err := net.ListenPacket("udp", addr)
			if err != nil {
				t.Fatalf("%v: %s not free for udp: %v", p, addr, err)
			}
			u.Close()
		}
	}
}

func TestFreeSkipsATakenPort(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	if _, ok := try(port, TCP); ok {
		t.Fatalf("port %d is listened on, yet try says it is free", port)
	}
	if _, ok := try(port, Both); ok {
		t.Fatalf("port %d is listened on (tcp), yet try says it is free for both", port)
	}
}

func TestCandidates(t *testing.T) {
	for _, c := range []struct{ low, lo, hi int }{
		{32768, 20768, 32768}, // Linux's default range
		{10000, 1024, 10000},  // a low range: never privileged ports
		{1500, 0, 0},          // no room: the kernel's pick
	} {
		if lo, hi := candidates(c.low); lo != c.lo || hi != c.hi {
			t.Errorf("candidates(%d) = [%d, %d), want [%d, %d)", c.low, lo, hi, c.lo, c.hi)
		}
	}
}

// TestFreeNeverRepeats: a process is never handed the same port twice
// (500 draws at random from 12,000 ports would repeat one with
// probability 0.99997).
func TestFreeNeverRepeats(t *testing.T) {
	if lo, hi := candidates(ephemeralLow()); hi <= lo {
		t.Skip("no room below the ephemeral range: the kernel picks")
	}
	seen := map[string]bool{}
	for range 500 {
		addr, err := Free(TCP)
		if err != nil {
			t.Fatal(err)
		}
		if seen[addr] {
			t.Fatalf("%s handed out twice", addr)
		}
		seen[addr] = true
	}
}
