package transport

import (
	"net"
	"os"
	"strconv"
	"sync"

	"github.com/rs/zerolog"
)

// UDP socket buffers.
//
// quic-go wants 7 MiB receive and send buffers (so that bursts of packets are
// not dropped by the kernel) and, when it cannot get them, prints a warning
// through the standard library's global logger, unstructured, once per
// process, unless QUIC_GO_DISABLE_RECEIVE_BUFFER_WARNING is set. We handle it
// ourselves before handing the socket to quic-go:
//
//  1. ask for 7 MiB (SO_RCVBUF/SO_SNDBUF, then the *FORCE variants, which
//     work when the process has CAP_NET_ADMIN) and read back what we got;
//  2. if it is not enough, log one warning line through the configured
//     zerolog.Logger, once per process, saying which sysctls to raise;
//  3. set QUIC_GO_DISABLE_RECEIVE_BUFFER_WARNING=true (unless the operator
//     set it already) so that quic-go does not print the same thing again.
//
// If the operator set QUIC_GO_DISABLE_RECEIVE_BUFFER_WARNING to true, our
// line drops to debug level too. Small buffers are not an error: the node
// works, it may just lose packets (and retransmit) under bursts.

const (
	// wantSocketBuffer mirrors quic-go's desiredBufferSize on Linux.
	wantSocketBuffer  = 7 << 20
	quicBufferWarnEnv = "QUIC_GO_DISABLE_RECEIVE_BUFFER_WARNING"
)

var bufferWarnOnce sync.Once

// tuneSocketBuffers raises c's buffers as far as the system allows and
// reports the outcome (see above).
func tuneSocketBuffers(c *net.UDPConn, log zerolog.Logger) {
	rcv, snd, err := raiseSocketBuffers(c, wantSocketBuffer)
	reportSocketBuffers(&bufferWarnOnce, log, rcv, snd, err)
}

func reportSocketBuffers(once *sync.Once, log zerolog.Logger, rcv, snd int, err error) {
	if err == nil && rcv >= wantSocketBuffer && snd >= wantSocketBuffer {
		log.Debug().Int("rcvbuf", rcv).Int("sndbuf", snd).Msg("transport: UDP socket buffers ok")
		return
	}
	once.Do(func() {
		lvl := zerolog.WarnLevel
		if v, ok := os.LookupEnv(quicBufferWarnEnv); ok {
			if off, _ := strconv.ParseBool(v); off {
				lvl = zerolog.DebugLevel
			}
		} else {
			// We have just said it in our words; keep quic-go from repeating
			// it on the standard logger.
			_ = os.Setenv(quicBufferWarnEnv, "true")
		}
		ev := log.WithLevel(lvl).Int("rcvbuf", rcv).Int("sndbuf", snd).Int("want", wantSocketBuffer)
		if err != nil {
			ev = ev.Err(err)
		}
		ev.Msg("transport: UDP socket buffers smaller than QUIC wants; bursts may be dropped " +
			"and retransmitted. Raise net.core.rmem_max and net.core.wmem_max to at least 7340032 (Linux)")
	})
}
