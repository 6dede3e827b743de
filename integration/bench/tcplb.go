package bench

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// TCPBalancer is a tiny layer-4 round-robin front: every accepted
// connection is piped, byte for byte, to the next target in turn. It stands
// for the L4 load balancer in front of several kvmesh nodes in the demo; it
// does no health checking (a target that refuses is skipped for that
// connection).
type TCPBalancer struct {
	targets []string
	next    atomic.Uint64
	dialer  net.Dialer

	mu    sync.Mutex
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

// NewTCPBalancer spreads connections over targets (host:port).
func NewTCPBalancer(targets []string) (*TCPBalancer, error) {
	if len(targets) == 0 {
		return nil, errors.New("bench: the TCP balancer needs at least one target")
	}
	return &TCPBalancer{
		targets: append([]string(nil), targets...),
		dialer:  net.Dialer{Timeout: 2 * time.Second},
		conns:   make(map[net.Conn]struct{}),
	}, nil
}

// Serve accepts on ln until ctx ends or ln fails, then closes every open
// connection and waits for their pipes.
func (b *TCPBalancer) Serve(ctx context.Context, ln net.Listener) error {
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	var err error
	for {
		var c net.Conn
		if c, err = ln.Accept(); err != nil {
			break
		}
		b.wg.Add(1)
		go func() {
			defer b.wg.Done()
			b.pipe(ctx, c)
		}()
	}
	b.mu.Lock()
	for c := range b.conns {
		c.Close()
	}
	b.mu.Unlock()
	b.wg.Wait()
	if ctx.Err() != nil {
		return nil
	}
	return err
}

func (b *TCPBalancer) track(c net.Conn, add bool) {
	b.mu.Lock()
	if add {
		b.conns[c] = struct{}{}
	} else {
		delete(b.conns, c)
	}
	b.mu.Unlock()
}

// pipe connects client to the next target that accepts.
func (b *TCPBalancer) pipe(ctx context.Context, client net.Conn) {
	b.track(client, true)
	defer func() { b.track(client, false); client.Close() }()
	var up net.Conn
	for range b.targets {
		t := b.targets[(b.next.Add(1)-1)%uint64(len(b.targets))]
		var err error
		if up, err = b.dialer.DialContext(ctx, "tcp", t); err == nil {
			break
		}
	}
	if up == nil {
		return
	}
	b.track(up, true)
	defer func() { b.track(up, false); up.Close() }()
	done := make(chan struct{}, 2)
	cp := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		if tc, ok := dst.(*net.TCPConn); ok {
			_ = tc.CloseWrite() // pass the half-close on
		}
		done <- struct{}{}
	}
	go cp(up, client)
	go cp(client, up)
	<-done
	<-done
}
