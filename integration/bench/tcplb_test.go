package bench

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestTCPBalancerRoundRobin(t *testing.T) {
	var targets []string
	for _, name := range []string{"a", "b", "c"} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			io.WriteString(w, name+":"+string(body))
		}))
		defer srv.Close()
		targets = append(targets, strings.TrimPrefix(srv.URL, "http://"))
	}
	lb, err := NewTCPBalancer(targets)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- lb.Serve(ctx, ln) }()

	// A new connection per request: the balancer spreads connections.
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	var got []string
	for i := range 6 {
		resp, err := c.Post("http://"+ln.Addr().String()+"/", "text/plain", strings.NewReader(string(rune('0'+i))))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		got = append(got, string(b))
	}
	if want := "a:0 b:1 c:2 a:3 b:4 c:5"; strings.Join(got, " ") != want {
		t.Errorf("answers %q, want %q", strings.Join(got, " "), want)
	}

	// A held-open connection does not keep Serve from returning.
	idle, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	time.Sleep(10 * time.Millisecond)
	cancel()
	select {
	case err := <-served:
		if err != nil {
			t.Errorf("Serve: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Serve did not return after cancel with a connection open")
	}
	if _, err := NewTCPBalancer(nil); err == nil {
		t.Error("a balancer without targets was built")
	}
}

func TestTCPBalancerSkipsRefusingTarget(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "up") }))
	defer srv.Close()
	dead, _ := net.Listen("tcp", "127.0.0.1:0")
	deadAddr := dead.Addr().String()
	dead.Close()
	lb, _ := NewTCPBalancer([]string{deadAddr, strings.TrimPrefix(srv.URL, "http://")})
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go lb.Serve(ctx, ln)
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 5 * time.Second}
	for range 3 {
		resp, err := c.Get("http://" + ln.Addr().String() + "/")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(b) != "up" {
			t.Errorf("answer %q", b)
		}
	}
}
