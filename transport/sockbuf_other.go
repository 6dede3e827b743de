//go:build !linux

package transport

import "net"

// raiseSocketBuffers asks for want bytes of receive and send buffer. Outside
// Linux there is no portable way to read the result back, so it reports
// success when the requests were accepted.
func raiseSocketBuffers(c *net.UDPConn, want int) (rcv, snd int, err error) {
	if err := c.SetReadBuffer(want); err != nil {
		return 0, 0, err
	}
	if err := c.SetWriteBuffer(want); err != nil {
		return want, 0, err
	}
	return want, want, nil
}
