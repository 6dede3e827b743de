package ports

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
)

// span is how many ports below the ephemeral range are drawn from.
const span = 12000

// drawNext is the offset into the candidate ports of the next one Free
// tries (-1 before the first draw), under drawMu.
var (
	drawMu   sync.Mutex
	drawNext = -1
)

// Proto says what must be free on a port.
type Proto int

const (
	TCP  Proto = iota // a TCP listener
	UDP               // a UDP socket (QUIC)
	Both              // TCP and UDP on the same number (serf's bind address)
)

// Free returns a 127.0.0.1 address whose port was free a moment ago for
// proto and lies below the ephemeral range (see the package doc). On a
// machine whose ephemeral range leaves no room below it, it falls back to
// a port the kernel picks.
//
// A process never gets the same port twice: a port handed out is free
// when checked but not yet listened on, and a second draw of it (a test
// starting three nodes draws a dozen) would find it free too; one of the
// two processes then failed to bind ("address already in use",
// TestProcessPreciseOwnerFailover under `make test`). Ports are handed out
// in turn from a random start, so that two test binaries running at once
// (go test runs packages in parallel) meet only if their starts fall
// within the few dozen ports each takes.
func Free(proto Proto) (string, error) {
	lo, hi := candidates(ephemeralLow())
	drawMu.Lock()
	defer drawMu.Unlock()
	if hi > lo && drawNext < 0 {
		drawNext = rand.IntN(hi - lo)
	}
	for range 200 {
		port := 0 // the kernel's choice
		if hi > lo {
			port = lo + drawNext%(hi-lo)
			drawNext++
		}
		if addr, ok := try(port, proto); ok {
			return addr, nil
		}
	}
	return "", errors.New("ports: no free loopback port after 200 tries")
}

// candidates is the range [lo, hi) below the ephemeral range's first
// port, or an empty one when there is no room (ports under 1024 are
// privileged).
func candidates(ephemeralLow int) (lo, hi int) {
	hi = ephemeralLow
	lo = max(hi-span, 1024)
	if hi-lo < 1000 {
		return 0, 0
	}
	return lo, hi
}

// ephemeralLow is the first port of Linux's ephemeral range (32768, the
// kernel's default, where /proc cannot be read).
func ephemeralLow() int {
	data, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(data))
	if len(f) < 1 {
		return 32768
	}
	n, err := strconv.Atoi(f[0])
	if err != nil {
		return 32768
	}
	return n
}

// try reports whether port is free for proto on 127.0.0.1, and its
// address (the kernel's pick when port is 0).
func try(port int, proto Proto) (string, bool) {
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	if proto == TCP || proto == Both {
		l, err := net.Listen("tcp", addr)
		if err != nil {
			return "", false
		}
		addr = l.Addr().String()
		defer l.Close()
	}
	if proto == UDP || proto == Both {
		u, err := net.ListenPacket("udp", addr)
		if err != nil {
			return "", false
		}
		addr = u.LocalAddr().String()
		u.Close()
	}
	return addr, true
}

// String names the protocol.
func (p Proto) String() string {
	switch p {
	case TCP:
		return "tcp"
	case UDP:
		return "udp"
	case Both:
		return "tcp+udp"
	}
	return fmt.Sprintf("Proto(%d)", int(p))
}
