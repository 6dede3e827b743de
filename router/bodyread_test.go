package router

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// rawRequest opens a connection to the rig's server and sends a chat
// request's headers announcing length bytes of body, then the first sent
// bytes of it.
func rawRequest(t *testing.T, g *testRig, length int, sent string) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(g.srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", length, sent)
	return conn
}

// A client that sends its headers and then trickles (here: stops sending)
// its body is answered 408 and disconnected once the body's deadline
// passes, instead of holding a connection and a goroutine for good.
func TestSlowBodyGets408(t *testing.T) {
	g := newRig(t, func(c *Config, _ *Deps) {
		c.BodyReadTimeout, c.BodyMinRate = 200*time.Millisecond, 1000
	}, newFakeBackend(t, "a"))
	conn := rawRequest(t, g, 1000, `{"mo`)
	conn.SetReadDeadline(time.Now().Add(time.Minute)) // a hang fails the test instead of the suite
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer to a stalled body: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusRequestTimeout || !strings.Contains(string(body), "body_too_slow") {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	if _, err := conn.Read(make([]byte, 1)); err == nil {
		t.Error("the connection stayed open after 408")
	}
	if got := g.counter("kvmesh_router_errors_total", "kind", "slow_body"); got != 1 {
		t.Errorf("errors_total{kind=slow_body} = %v", got)
	}
}

// A client that sends slowly but steadily, above the minimum rate, is
// served even though its body takes longer than BodyReadTimeout.
func TestSteadyBodyIsServed(t *testing.T) {
	a := newFakeBackend(t, "a")
	g := newRig(t, func(c *Config, _ *Deps) {
		// 100 ms plus a second per 10 bytes: the ~350-byte body sent over
		// ~200 ms takes longer than BodyReadTimeout alone, far less than
		// its whole deadline (~35 s), however slow the machine.
		c.BodyReadTimeout, c.BodyMinRate = 100*time.Millisecond, 10
	}, a)
	body := chat("m1", strings.Repeat("s", 300), "hello")
	conn := rawRequest(t, g, len(body), "")
	for i := 0; i < len(body); i += 100 {
		time.Sleep(50 * time.Millisecond) // 2,000 bytes/s
		if _, err := io.WriteString(conn, body[i:min(i+100, len(body))]); err != nil {
			t.Fatal(err)
		}
	}
	conn.SetReadDeadline(time.Now().Add(time.Minute))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := io.ReadAll(resp.Body); resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
}

// The body's deadline does not outlive the body: an answer that comes long
// after it would have passed still reaches the client (net/http clears the
// deadline when it starts watching the idle client; a deadline left on the
// connection would cancel the request when that read hit it).
func TestBodyDeadlineLifted(t *testing.T) {
	a := newFakeBackend(t, "a")
	// The answer comes a second after the body's deadline (1 s: ample for
	// a body sent with its headers, even on a loaded machine).
	a.setHook(func(w http.ResponseWriter, r *http.Request, body []byte) {
		time.Sleep(2 * time.Second)
		fmt.Fprint(w, `{"choices":[]}`)
	})
	g := newRig(t, func(c *Config, _ *Deps) {
		c.BodyReadTimeout, c.BodyMinRate = time.Second, 1<<20
	}, a)
	if status, _, body := g.call("POST", "/v1/chat/completions", chat("m1", "s", "hello")); status != 200 {
		t.Fatalf("status %d: %s", status, body)
	}
}
