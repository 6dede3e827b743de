package transport

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

func memEndpoints(t *testing.T, n *MemNetwork, names ...string) []*MemEndpoint {
	t.Helper()
	eps := make([]*MemEndpoint, len(names))
	for i, name := range names {
		ep, err := n.Endpoint(name)
		if err != nil {
			t.Fatal(err)
		}
		eps[i] = ep
	}
	return eps
}

// checkInvariant asserts Sent + Duplicated == Delivered + Dropped + InFlight
// and that the per-reason drop counts add up.
func checkInvariant(t *testing.T, n *MemNetwork) MemStats {
	t.Helper()
	s := n.Stats()
	inflight := uint64(n.InFlight())
	if s.Sent+s.Duplicated != s.Delivered+s.Dropped+inflight {
		t.Fatalf("stats do not add up: %+v, in flight %d", s, inflight)
	}
	if s.Dropped != s.DroppedRandom+s.DroppedPartition+s.DroppedClosed+s.DroppedOverflow {
		t.Fatalf("drop reasons do not add up: %+v", s)
	}
	return s
}

func drain(ch <-chan Message) []Message {
	var out []Message
	for {
		select {
		case m := <-ch:
			out = append(out, m)
		default:
			return out
		}
	}
}

func TestMemNetworkDeliversCopies(t *testing.T) {
	n := NewMemNetwork(1)
	defer n.Close()
	eps := memEndpoints(t, n, "a", "b")
	buf := []byte("hello")
	if err := eps[0].Send(context.Background(), "b", buf); err != nil {
		t.Fatal(err)
	}
	copy(buf, "XXXXX") // the sender reuses its buffer
	m := recv(t, eps[1].Inbound(), wait)
	if m.From != "a" || string(m.Data) != "hello" {
		t.Fatalf("got %q from %q", m.Data, m.From)
	}
	if eps[1].Addr() != "b" {
		t.Fatalf("Addr = %q", eps[1].Addr())
	}
	s := checkInvariant(t, n)
	if s.Sent != 1 || s.Delivered != 1 || s.DeliveredBytes != 5 || s.SentBytes != 5 {
		t.Fatalf("stats %+v", s)
	}
	// Errors a caller can act on.
	if err := eps[0].Send(context.Background(), "nobody", buf); !errors.Is(err, ErrUnreachable) {
		t.Errorf("send to unknown address: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := eps[0].Send(ctx, "b", buf); !errors.Is(err, context.Canceled) {
		t.Errorf("send with cancelled ctx: %v", err)
	}
	n.SetMaxMessageBytes(4)
	if err := eps[0].Send(context.Background(), "b", buf); !errors.Is(err, ErrMessageTooLarge) {
		t.Errorf("oversized send: %v", err)
	}
	if _, err := n.Endpoint("a"); err == nil {
		t.Error("a second open endpoint with the same name was allowed")
	}
	if _, err := n.Endpoint(""); err == nil {
		t.Error("empty endpoint name allowed")
	}
	if s := checkInvariant(t, n); s.Sent != 1 {
		t.Fatalf("failed Sends were counted: %+v", s)
	}
}

func TestMemNetworkDropAndDuplicate(t *testing.T) {
	n := NewMemNetwork(42)
	defer n.Close()
	eps := memEndpoints(t, n, "a", "b")
	n.SetInboundQueueLen(0) // irrelevant for existing endpoints: b keeps 1024
	n.SetDropProbability(0.3)
	n.SetDuplicateProbability(0.2)
	const total = 1000
	for i := range total {
		if err := eps[0].Send(context.Background(), "b", []byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
		drain(eps[1].Inbound()) // keep the queue from overflowing
	}
	s := checkInvariant(t, n)
	// Binomial(1000, 0.3): mean 300, sd ~14.5; duplicates of ~700 kept at
	// 0.2: mean 140, sd ~10.6. Five standard deviations either way.
	if s.DroppedRandom < 228 || s.DroppedRandom > 372 {
		t.Errorf("dropped %d of %d at p=0.3", s.DroppedRandom, total)
	}
	if s.Duplicated < 87 || s.Duplicated > 193 {
		t.Errorf("duplicated %d of %d kept at p=0.2", s.Duplicated, total-s.DroppedRandom)
	}
	if s.Delivered != total-s.DroppedRandom+s.Duplicated || s.DroppedOverflow != 0 {
		t.Errorf("delivered %d, want %d: %+v", s.Delivered, total-s.DroppedRandom+s.Duplicated, s)
	}
	// Back to perfect.
	n.SetDropProbability(0)
	n.SetDuplicateProbability(0)
	before := n.Stats()
	for range 100 {
		_ = eps[0].Send(context.Background(), "b", []byte("x"))
	}
	after := checkInvariant(t, n)
	if after.Delivered-before.Delivered != 100 || after.Dropped != before.Dropped {
		t.Errorf("faults persisted after reset: %+v -> %+v", before, after)
	}
}

// The same seed and the same sends give the same fate to every message.
func TestMemNetworkDeterministic(t *testing.T) {
	run := func(seed int64) []string {
		n := NewMemNetwork(seed)
		defer n.Close()
		eps := memEndpoints(t, n, "a", "b")
		n.SetDropProbability(0.5)
		n.SetDuplicateProbability(0.5)
		var fates []string
		for i := range 200 {
			_ = eps[0].Send(context.Background(), "b", []byte(fmt.Sprint(i)))
			fates = append(fates, fmt.Sprint(len(drain(eps[1].Inbound()))))
		}
		return fates
	}
	a, b, c := run(7), run(7), run(8)
	if fmt.Sprint(a) != fmt.Sprint(b) {
		t.Fatal("same seed, different outcomes")
	}
	if fmt.Sprint(a) == fmt.Sprint(c) {
		t.Fatal("different seeds, identical outcomes for 200 coin flips")
	}
}

func TestMemNetworkDelayReorders(t *testing.T) {
	defer checkGoroutines(t)()
	n := NewMemNetwork(3)
	eps := memEndpoints(t, n, "a", "b")
	n.SetDelay(time.Millisecond, 30*time.Millisecond)
	const total = 200
	start := time.Now()
	for i := range total {
		if err := eps[0].Send(context.Background(), "b", []byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	var order []byte
	for range total {
		order = append(order, recv(t, eps[1].Inbound(), wait).Data[0])
	}
	if time.Since(start) < time.Millisecond {
		t.Error("delivered faster than the minimum delay")
	}
	inversions := 0
	for i := 1; i < len(order); i++ {
		if order[i] < order[i-1] {
			inversions++
		}
	}
	if inversions == 0 {
		t.Error("random delays did not reorder any of 200 messages")
	}
	waitFor(t, wait, "nothing in flight", func() bool { return n.InFlight() == 0 })
	if s := checkInvariant(t, n); s.Delivered != total {
		t.Errorf("delivered %d, want %d", s.Delivered, total)
	}
	// Close with copies in flight: they are dropped, no timer survives.
	n.SetDelay(time.Hour, time.Hour)
	for range 10 {
		_ = eps[0].Send(context.Background(), "b", []byte("late"))
	}
	if f, q := n.InFlight(), len(eps[1].Inbound()); f != 10 || q != 0 {
		t.Fatalf("%d in flight and %d delivered of 10 messages delayed by an hour: delayed messages were delivered synchronously", f, q)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	s := checkInvariant(t, n)
	if s.DroppedClosed != 10 || s.DroppedBytes != 40 {
		t.Errorf("in-flight copies at Close: %+v", s)
	}
	if _, err := n.Endpoint("c"); !errors.Is(err, ErrClosed) {
		t.Errorf("Endpoint after Close: %v", err)
	}
}

func TestMemNetworkPartitionAndHeal(t *testing.T) {
	n := NewMemNetwork(5)
	defer n.Close()
	eps := memEndpoints(t, n, "a", "b", "c", "d")
	n.Partition([]string{"a", "b"}, []string{"c"}) // d is in no group
	can := func(from, to int) bool {
		before := n.Stats().Delivered
		if err := eps[from].Send(context.Background(), eps[to].Addr(), []byte("p")); err != nil {
			t.Fatal(err)
		}
		drain(eps[to].Inbound())
		return n.Stats().Delivered > before
	}
	want := map[[2]int]bool{{0, 1}: true, {1, 0}: true, {0, 2}: false, {2, 0}: false, {2, 1}: false, {3, 0}: false, {0, 3}: false, {3, 3}: true, {2, 2}: true}
	for pair, ok := range want {
		if got := can(pair[0], pair[1]); got != ok {
			t.Errorf("%s -> %s delivered = %v, want %v", eps[pair[0]].Addr(), eps[pair[1]].Addr(), got, ok)
		}
	}
	s := checkInvariant(t, n)
	if s.DroppedPartition != 5 {
		t.Errorf("DroppedPartition = %d, want 5", s.DroppedPartition)
	}
	n.Heal()
	for from := range eps {
		for to := range eps {
			if !can(from, to) {
				t.Errorf("after Heal %d -> %d not delivered", from, to)
			}
		}
	}
}

func TestMemNetworkKilledNodeAndOverflow(t *testing.T) {
	defer checkGoroutines(t)()
	n := NewMemNetwork(9)
	defer n.Close()
	eps := memEndpoints(t, n, "a", "b")
	n.SetDelay(time.Hour, time.Hour)
	_ = eps[0].Send(context.Background(), "b", []byte("in flight to the old b"))
	n.SetDelay(0, 0)
	if err := eps[1].Close(); err != nil {
		t.Fatal(err)
	}
	if _, open := <-eps[1].Inbound(); open {
		t.Fatal("Inbound open after Close")
	}
	if err := eps[1].Close(); err != nil {
		t.Fatal("second Close:", err)
	}
	if err := eps[0].Send(context.Background(), "b", []byte("x")); !errors.Is(err, ErrUnreachable) {
		t.Fatalf("send to killed node: %v", err)
	}
	if err := eps[1].Send(context.Background(), "a", []byte("x")); !errors.Is(err, ErrClosed) {
		t.Fatalf("send from killed node: %v", err)
	}
	// Restart b with a small queue.
	n.SetInboundQueueLen(2)
	b2, err := n.Endpoint("b")
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		if err := eps[0].Send(context.Background(), "b", []byte("new")); err != nil {
			t.Fatal(err)
		}
	}
	if got := len(drain(b2.Inbound())); got != 2 {
		t.Fatalf("restarted b got %d messages, want 2 (queue length)", got)
	}
	s := checkInvariant(t, n)
	if s.DroppedClosed != 1 || s.DroppedOverflow != 3 || s.Delivered != 2 {
		t.Fatalf("stats %+v", s)
	}
}

// Fault settings change while many goroutines send; run with -race.
func TestMemNetworkConcurrentUse(t *testing.T) {
	defer checkGoroutines(t)()
	n := NewMemNetwork(11)
	names := []string{"a", "b", "c", "d"}
	eps := memEndpoints(t, n, names...)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for _, ep := range eps {
		wg.Go(func() { // consumer
			for range ep.Inbound() {
			}
		})
	}
	var senders sync.WaitGroup
	for i, ep := range eps {
		senders.Go(func() {
			for k := range 300 {
				_ = ep.Send(context.Background(), names[(i+k)%len(names)], []byte("m"))
			}
		})
	}
	wg.Go(func() { // chaos
		for k := 0; ; k++ {
			select {
			case <-stop:
				return
			default:
			}
			n.SetDropProbability(float64(k%3) / 10)
			n.SetDuplicateProbability(float64(k%2) / 10)
			n.SetDelay(0, time.Duration(k%3)*time.Millisecond)
			if k%2 == 0 {
				n.Partition([]string{"a", "b"}, []string{"c", "d"})
			} else {
				n.Heal()
			}
			time.Sleep(time.Millisecond)
		}
	})
	senders.Wait()
	close(stop)
	_ = n.Close() // closes every Inbound, ending the consumers
	wg.Wait()
	s := checkInvariant(t, n)
	if s.Sent != 4*300 {
		t.Fatalf("Sent = %d, want 1200", s.Sent)
	}
	if n.InFlight() != 0 {
		t.Fatal("copies in flight after Close")
	}
}
