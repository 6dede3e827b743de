// Package meshtest has helpers for running many mesh nodes in one process:
// an in-memory network for serf's gossip (memberlist) that, unlike
// memberlist.MockNetwork, is safe to grow while nodes run, never blocks a
// sender on a node that is gone, and can partition.
//
// It may import memberlist and the standard library only; it must not
// import mesh (mesh's tests import it).
package meshtest

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
)

// MemberNetwork is an in-memory network for memberlist transports. Each
// node name gets its own loopback IP (127.0.0.1, 127.0.0.2, ... in order of
// first use, kept across restarts) and every node the same port, as pods
// behind a Kubernetes headless Service. Packets behave like UDP: a packet
// to a node that is gone, partitioned away or not reading is dropped; a
// stream dial to one fails.
type MemberNetwork struct {
	port int

	mu     sync.Mutex
	ips    map[string]net.IP           // name -> IP, sticky
	byAddr map[string]*MemberTransport // "ip:port" -> live transport
	groups map[string]int              // name -> partition group; nil: none
	names  map[string]string           // "ip:port" -> name
	stats  MemberStats
}

// MemberStats counts what a MemberNetwork did.
type MemberStats struct {
	Packets, PacketsDropped uint64
	// Compressed counts the packets and streams sent LZW-compressed
	// (memberlist's EnableCompression): a message of memberlist's
	// compressMsg type, behind the checksum header memberlist puts on a
	// packet to a member that reads it (a stream's first message only).
	// Encrypted ones are not counted: they cannot be read here.
	// memberlist compresses a packet only when that makes it smaller, and
	// a stream (a state exchange) always.
	Compressed         uint64
	Dials, DialsFailed uint64
}

// compressMsg and hasCrcMsg are memberlist's message types of a compressed
// message and of a packet with a checksum (its net.go numbers the types
// from pingMsg = 0); a checksum header is the type and 4 bytes of CRC.
const (
	compressMsg = 9
	hasCrcMsg   = 12
	crcHeader   = 5
)

// compressed says whether a message memberlist sends is compressed.
func compressed(b []byte) bool {
	if len(b) > crcHeader && b[0] == hasCrcMsg {
		b = b[crcHeader:]
	}
	return len(b) > 0 && b[0] == compressMsg
}

// NewMemberNetwork returns an empty network whose nodes listen on port.
func NewMemberNetwork(port int) *MemberNetwork {
	return &MemberNetwork{
		port:   port,
		ips:    make(map[string]net.IP),
		byAddr: make(map[string]*MemberTransport),
		names:  make(map[string]string),
	}
}

// Addr returns the gossip address ("ip:port") of a node name, allocating
// its IP on first use.
func (n *MemberNetwork) Addr(name string) string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.addrLocked(name)
}

func (n *MemberNetwork) addrLocked(name string) string {
	ip, ok := n.ips[name]
	if !ok {
		k := len(n.ips) + 1
		ip = net.IPv4(127, byte(k>>16), byte(k>>8), byte(k)).To4()
		n.ips[name] = ip
	}
	a := net.JoinHostPort(ip.String(), strconv.Itoa(n.port))
	n.names[a] = name
	return a
}

// Transport attaches a node. The name must not have a live transport; a
// shut-down one can be replaced (a restarted node keeps its address).
func (n *MemberNetwork) Transport(name string) (*MemberTransport, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	addr := n.addrLocked(name)
	if _, ok := n.byAddr[addr]; ok {
		return nil, fmt.Errorf("meshtest: %s already has a live transport", name)
	}
	t := &MemberTransport{
		net:      n,
		name:     name,
		addr:     &net.UDPAddr{IP: n.ips[name], Port: n.port},
		key:      addr,
		packetCh: make(chan *memberlist.Packet, 1024),
		streamCh: make(chan net.Conn, 64),
		done:     make(chan struct{}),
	}
	n.byAddr[addr] = t
	return t, nil
}

// Partition splits the network: only nodes named in the same group reach
// each other; nodes in no group reach nobody. It replaces any earlier
// partition.
func (n *MemberNetwork) Partition(groups ...[]string) {
	g := make(map[string]int)
	for i, group := range groups {
		for _, name := range group {
			g[name] = i
		}
	}
	n.mu.Lock()
	n.groups = g
	n.mu.Unlock()
}

// Heal removes the partition.
func (n *MemberNetwork) Heal() {
	n.mu.Lock()
	n.groups = nil
	n.mu.Unlock()
}

// Stats returns a snapshot of the counters.
func (n *MemberNetwork) Stats() MemberStats {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.stats
}

// route returns the live transport at addr if from may reach it.
func (n *MemberNetwork) route(from *MemberTransport, addr string) (*MemberTransport, error) {
	dst := n.byAddr[addr]
	if dst == nil {
		return nil, fmt.Errorf("meshtest: no route to %s", addr)
	}
	if n.groups != nil {
		gf, okf := n.groups[from.name]
		gt, okt := n.groups[dst.name]
		if !okf || !okt || gf != gt {
			return nil, fmt.Errorf("meshtest: %s is partitioned away", addr)
		}
	}
	return dst, nil
}

// MemberTransport is one node's memberlist.Transport on a MemberNetwork.
type MemberTransport struct {
	net      *MemberNetwork
	name     string
	addr     *net.UDPAddr
	key      string
	packetCh chan *memberlist.Packet
	streamCh chan net.Conn
	done     chan struct{}
	once     sync.Once
}

var _ memberlist.Transport = (*MemberTransport)(nil)

// FinalAdvertiseAddr implements memberlist.Transport: the node's own
// address, whatever was configured.
func (t *MemberTransport) FinalAdvertiseAddr(string, int) (net.IP, int, error) {
	return t.addr.IP, t.addr.Port, nil
}

// WriteTo implements memberlist.Transport. Like UDP it never blocks and
// reports no error for a packet that is lost.
func (t *MemberTransport) WriteTo(b []byte, addr string) (time.Time, error) {
	now := time.Now()
	n := t.net
	n.mu.Lock()
	defer n.mu.Unlock()
	n.stats.Packets++
	if compressed(b) {
		n.stats.Compressed++
	}
	dst, err := n.route(t, addr)
	if err != nil {
		n.stats.PacketsDropped++
		return now, nil
	}
	select {
	case <-dst.done:
		n.stats.PacketsDropped++
	case dst.packetCh <- &memberlist.Packet{Buf: append([]byte(nil), b...), From: t.addr, Timestamp: now}:
	default:
		n.stats.PacketsDropped++
	}
	return now, nil
}

// PacketCh implements memberlist.Transport.
func (t *MemberTransport) PacketCh() <-chan *memberlist.Packet { return t.packetCh }

// DialTimeout implements memberlist.Transport with an in-memory pipe.
func (t *MemberTransport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	n := t.net
	n.mu.Lock()
	n.stats.Dials++
	dst, err := n.route(t, addr)
	if err != nil {
		n.stats.DialsFailed++
		n.mu.Unlock()
		return nil, err
	}
	n.mu.Unlock()
	local, remote := net.Pipe()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case dst.streamCh <- &pipeConn{Conn: remote, local: dst.addr, remote: t.addr, net: n}:
		select {
		case <-dst.done:
			// Shut down meanwhile: nobody will accept it (Shutdown closes
			// what was queued before it; this closes what came after).
		default:
			return &pipeConn{Conn: local, local: t.addr, remote: dst.addr, net: n}, nil
		}
	case <-dst.done:
	case <-t.done:
	case <-timer.C:
	}
	_ = local.Close()
	_ = remote.Close()
	n.mu.Lock()
	n.stats.DialsFailed++
	n.mu.Unlock()
	return nil, errors.New("meshtest: dial " + addr + ": connection refused")
}

// StreamCh implements memberlist.Transport.
func (t *MemberTransport) StreamCh() <-chan net.Conn { return t.streamCh }

// Shutdown implements memberlist.Transport: the node is gone; its address
// can be attached again.
func (t *MemberTransport) Shutdown() error {
	t.once.Do(func() {
		n := t.net
		n.mu.Lock()
		if n.byAddr[t.key] == t {
			delete(n.byAddr, t.key)
		}
		n.mu.Unlock()
		close(t.done)
		// Streams nobody will accept: close them so their dialers see EOF.
		for {
			select {
			case c := <-t.streamCh:
				_ = c.Close()
			default:
				return
			}
		}
	})
	return nil
}

// pipeConn is a net.Pipe end with the nodes' addresses. It counts a
// stream whose first message is compressed in its network's stats.
type pipeConn struct {
	net.Conn
	local, remote net.Addr
	net           *MemberNetwork
	wrote         atomic.Bool
}

func (c *pipeConn) Write(b []byte) (int, error) {
	if len(b) > 0 && !c.wrote.Swap(true) && compressed(b) {
		c.net.mu.Lock()
		c.net.stats.Compressed++
		c.net.mu.Unlock()
	}
	return c.Conn.Write(b)
}

func (c *pipeConn) LocalAddr() net.Addr  { return c.local }
func (c *pipeConn) RemoteAddr() net.Addr { return c.remote }
