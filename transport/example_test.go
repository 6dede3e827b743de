package transport_test

import (
	"context"
	"fmt"
	"time"

	"github.com/kvmesh/kvmesh/transport"
)

// Two in-memory endpoints exchange a message; the network can lose, delay,
// duplicate or partition messages when a test asks it to.
func ExampleMemNetwork() {
	network := transport.NewMemNetwork(1)
	defer network.Close()

	alice, _ := network.Endpoint("alice")
	bob, _ := network.Endpoint("bob")

	if err := alice.Send(context.Background(), bob.Addr(), []byte("hello, bob")); err != nil {
		fmt.Println("send:", err)
		return
	}
	msg := <-bob.Inbound()
	fmt.Printf("%s says %q\n", msg.From, msg.Data)

	// Cut bob off: the next message is lost, silently, as on a real network.
	network.Partition([]string{"alice"}, []string{"bob"})
	_ = alice.Send(context.Background(), bob.Addr(), []byte("are you there?"))
	network.Heal()

	s := network.Stats()
	fmt.Printf("sent %d, delivered %d, dropped %d\n", s.Sent, s.Delivered, s.Dropped)
	// Output:
	// alice says "hello, bob"
	// sent 2, delivered 1, dropped 1
}

// Two QUIC nodes of a dev cluster: one CA, one certificate per node, and
// the sender's name arrives authenticated by its certificate.
func ExampleNewQUIC() {
	ca, err := transport.GenerateCA("dev-cluster", 24*time.Hour)
	if err != nil {
		fmt.Println(err)
		return
	}
	start := func(name string) *transport.QUIC {
		cert, err := ca.Issue(name, nil, 24*time.Hour)
		if err != nil {
			panic(err)
		}
		cfg := transport.DefaultConfig() // listens on 127.0.0.1, a free port
		cfg.TLS = ca.TLSConfig(cert)
		node, err := transport.NewQUIC(cfg)
		if err != nil {
			panic(err)
		}
		return node
	}
	a, b := start("router-a"), start("router-b")
	defer a.Close()
	defer b.Close()

	if err := a.Send(context.Background(), b.Addr(), []byte("delta #1")); err != nil {
		fmt.Println("send:", err)
		return
	}
	msg := <-b.Inbound()
	fmt.Printf("%s: %s\n", msg.From, msg.Data)
	// Output:
	// router-a: delta #1
}
