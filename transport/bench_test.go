package transport

import (
	"bufio"
	"context"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
)

// benchPair starts two QUIC nodes on loopback.
func benchPair(b *testing.B) (*QUIC, *QUIC) {
	ca := testCA(b)
	a := startQUIC(b, testConfig(b, ca, "bench-a"))
	c := startQUIC(b, testConfig(b, ca, "bench-b"))
	return a, c
}

// BenchmarkQUICRoundTrip: a sends to b, b sends the same bytes back, a
// receives. One op = one round trip (two messages, two streams).
func BenchmarkQUICRoundTrip(b *testing.B) {
	for _, size := range []struct {
		name string
		n    int
	}{{"200B", 200}, {"64KiB", 64 << 10}} {
		b.Run(size.name, func(b *testing.B) {
			a, e := benchPair(b)
			go func() { // echo
				for m := range e.Inbound() {
					_ = e.Send(context.Background(), a.Addr(), m.Data)
				}
			}()
			msg := make([]byte, size.n)
			ctx := context.Background()
			// Warm up: dial both directions.
			if err := a.Send(ctx, e.Addr(), msg); err != nil {
				b.Fatal(err)
			}
			<-a.Inbound()
			b.SetBytes(int64(2 * size.n))
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if err := a.Send(ctx, e.Addr(), msg); err != nil {
					b.Fatal(err)
				}
				<-a.Inbound()
			}
			b.StopTimer()
		})
	}
}

// BenchmarkQUICOneWay: pipelined Sends of 200 B from one goroutine; one op
// = one message received.
func BenchmarkQUICOneWay(b *testing.B) {
	a, e := benchPair(b)
	msg := make([]byte, 200)
	ctx := context.Background()
	if err := a.Send(ctx, e.Addr(), msg); err != nil {
		b.Fatal(err)
	}
	<-e.Inbound()
	b.SetBytes(200)
	b.ReportAllocs()
	b.ResetTimer()
	done := make(chan struct{})
	go func() {
		for i := 0; i < b.N; i++ {
			<-e.Inbound()
		}
		close(done)
	}()
	for i := 0; i < b.N; i++ {
		if err := a.Send(ctx, e.Addr(), msg); err != nil {
			b.Fatal(err)
		}
	}
	<-done
}

// BenchmarkMemNetwork: send and receive one 200 B message in memory.
func BenchmarkMemNetwork(b *testing.B) {
	n := NewMemNetwork(1)
	defer n.Close()
	x, _ := n.Endpoint("x")
	y, _ := n.Endpoint("y")
	msg := make([]byte, 200)
	ctx := context.Background()
	b.SetBytes(200)
	b.ReportAllocs()
	for b.Loop() {
		if err := x.Send(ctx, "y", msg); err != nil {
			b.Fatal(err)
		}
		<-y.Inbound()
	}
}

// BenchmarkFraming compares the two wire layouts considered for QUIC, on
// raw quic-go connections (no transport code in the way), one-way, 200 B
// messages sent as fast as possible:
//
//   - stream-per-message: what QUIC uses; a uni stream per message, read by
//     its own goroutine with readFrame;
//   - single-stream: one long uni stream per connection, length-prefixed
//     frames read in a loop.
func BenchmarkFraming(b *testing.B) {
	ca := testCA(b)
	nc, err := ca.Issue("framing", nil, time.Hour)
	if err != nil {
		b.Fatal(err)
	}
	pair, err := buildTLS(ca.TLSConfig(nc), func(string, error) {})
	if err != nil {
		b.Fatal(err)
	}
	payload := make([]byte, 200)
	wire := frame(payload)

	setup := func(b *testing.B) (client, server *quic.Conn) {
		ln, err := quic.ListenAddr("127.0.0.1:0", pair.server, &quic.Config{MaxIncomingUniStreams: 100})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = ln.Close() })
		ctx := context.Background()
		accepted := make(chan *quic.Conn, 1)
		go func() {
			c, err := ln.Accept(ctx)
			if err == nil {
				accepted <- c
			}
		}()
		client, err = quic.DialAddr(ctx, ln.Addr().String(), pair.client, &quic.Config{})
		if err != nil {
			b.Fatal(err)
		}
		server = <-accepted
		b.Cleanup(func() {
			_ = client.CloseWithError(0, "")
			_ = server.CloseWithError(0, "")
		})
		return client, server
	}

	b.Run("stream-per-message", func(b *testing.B) {
		client, server := setup(b)
		b.SetBytes(int64(len(payload)))
		b.ReportAllocs()
		b.ResetTimer()
		done := make(chan struct{})
		go func() {
			var wg sync.WaitGroup
			msgs := make(chan struct{}, 128)
			go func() {
				for i := 0; i < b.N; i++ {
					<-msgs
				}
				close(done)
			}()
			for i := 0; i < b.N; i++ {
				str, err := server.AcceptUniStream(context.Background())
				if err != nil {
					return
				}
				wg.Go(func() {
					if _, err := readFrame(str, 1<<20); err == nil {
						msgs <- struct{}{}
					}
				})
			}
			wg.Wait()
		}()
		for i := 0; i < b.N; i++ {
			str, err := client.OpenUniStreamSync(context.Background())
			if err != nil {
				b.Fatal(err)
			}
			if _, err := str.Write(wire); err != nil {
				b.Fatal(err)
			}
			_ = str.Close()
		}
		<-done
	})

	b.Run("single-stream", func(b *testing.B) {
		client, server := setup(b)
		b.SetBytes(int64(len(payload)))
		b.ReportAllocs()
		b.ResetTimer()
		done := make(chan struct{})
		go func() {
			defer close(done)
			str, err := server.AcceptUniStream(context.Background())
			if err != nil {
				return
			}
			r := bufio.NewReader(str)
			var h [frameHeaderLen]byte
			for i := 0; i < b.N; i++ {
				if _, err := io.ReadFull(r, h[:]); err != nil {
					return
				}
				n, err := parseFrameHeader(h[:], 1<<20)
				if err != nil {
					return
				}
				if _, err := io.ReadFull(r, make([]byte, n)); err != nil {
					return
				}
			}
		}()
		str, err := client.OpenUniStream()
		if err != nil {
			b.Fatal(err)
		}
		w := bufio.NewWriter(str)
		for i := 0; i < b.N; i++ {
			if _, err := w.Write(wire); err != nil {
				b.Fatal(err)
			}
			// A real sender flushes each message: it cannot know whether
			// another follows.
			if err := w.Flush(); err != nil {
				b.Fatal(err)
			}
		}
		<-done
	})
}
