//go:build linux

package transport

import (
	"net"
	"syscall"
)

// raiseSocketBuffers asks for want bytes of receive and send buffer and
// returns what the kernel reports afterwards (Linux reports twice the usable
// size, as quic-go's own check also compares).
func raiseSocketBuffers(c *net.UDPConn, want int) (rcv, snd int, err error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return 0, 0, err
	}
	_ = c.SetReadBuffer(want) // capped by net.core.rmem_max; checked below
	_ = c.SetWriteBuffer(want)
	var serr error
	cerr := raw.Control(func(fd uintptr) {
		get := func(opt int) int {
			v, e := syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, opt)
			if e != nil && serr == nil {
				serr = e
			}
			return v
		}
		if rcv = get(syscall.SO_RCVBUF); rcv < want {
			// Needs CAP_NET_ADMIN; ignores rmem_max.
			_ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUFFORCE, want)
			rcv = get(syscall.SO_RCVBUF)
		}
		if snd = get(syscall.SO_SNDBUF); snd < want {
			_ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_SNDBUFFORCE, want)
			snd = get(syscall.SO_SNDBUF)
		}
	})
	if cerr != nil {
		return 0, 0, cerr
	}
	return rcv, snd, serr
}
