package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// eventually polls cond for up to 30 s (a generous bound for a busy
// machine; nothing here measures time).
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func status(url string) int {
	resp, err := http.Get(url)
	if err != nil {
		return -1
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// On SIGTERM /readyz fails first; the API listener keeps serving through
// the drain delay and closes only after it (here: when a second signal
// ends it).
func TestDrainDelayReadinessFailsFirst(t *testing.T) {
	be := fakeBackend(t, 0)
	s, cancel, done := startServe(t, "--backends", "b1="+be.URL, "--drain-delay", "1h")
	eventually(t, "ready", func() bool { return status("http://"+s.Admin+"/readyz") == 200 })
	cancel()
	eventually(t, "/readyz to fail", func() bool { return status("http://"+s.Admin+"/readyz") == 503 })
	for i := 0; i < 3; i++ { // new connections, still accepted
		client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
		resp, err := client.Post("http://"+s.API+"/v1/chat/completions", "application/json", strings.NewReader(chatBody))
		if err != nil {
			t.Fatalf("the API listener closed during the drain delay: %v", err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("status %d during the drain delay", resp.StatusCode)
		}
	}
	select {
	case err := <-done:
		t.Fatalf("serve returned during the drain delay: %v", err)
	default:
	}
	s.hurry()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the second signal did not end the drain delay")
	}
	if _, err := net.Dial("tcp", s.API); err == nil {
		t.Error("the API listener still accepts after shutdown")
	}
}

// A single node's /admin/mesh answers JSON, not a text 404.
func TestAdminMeshWithoutMesh(t *testing.T) {
	be := fakeBackend(t, 0)
	s, cancel, done := startServe(t, "--backends", "b1="+be.URL)
	defer func() { cancel(); <-done }()
	resp, err := http.Get("http://" + s.Admin + "/admin/mesh")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		Error struct{ Message, Code string }
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || resp.StatusCode != 404 ||
		resp.Header.Get("Content-Type") != "application/json" || body.Error.Code != "no_mesh" {
		t.Fatalf("status %d, %s: %+v %v", resp.StatusCode, resp.Header.Get("Content-Type"), body, err)
	}
	var out, errb strings.Builder
	if code := run([]string{"members", "--admin", s.Admin}, &out, &errb); code != 1 || !strings.Contains(errb.String(), "has no mesh") {
		t.Errorf("members on a single node: %d %q", code, errb.String())
	}
}

// --max-connections bounds the API listener's open connections: one more
// waits, unanswered, until one closes.
func TestMaxConnections(t *testing.T) {
	be := fakeBackend(t, 0)
	s, cancel, done := startServe(t, "--backends", "b1="+be.URL, "--max-connections", "1")
	defer func() { cancel(); <-done }()
	ask := func(c net.Conn) {
		fmt.Fprint(c, "GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n")
	}
	first, err := net.Dial("tcp", s.API)
	if err != nil {
		t.Fatal(err)
	}
	ask(first)
	r1 := bufio.NewReader(first)
	if resp, err := http.ReadResponse(r1, nil); err != nil || resp.StatusCode != 200 {
		t.Fatalf("first connection: %v", err)
	} else {
		io.Copy(io.Discard, resp.Body)
	}
	second, err := net.Dial("tcp", s.API) // the kernel queues it
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	ask(second)
	second.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if _, err := second.Read(make([]byte, 1)); err == nil {
		t.Fatal("a connection over the limit was served")
	}
	first.Close()
	second.SetReadDeadline(time.Now().Add(30 * time.Second))
	if resp, err := http.ReadResponse(bufio.NewReader(second), nil); err != nil || resp.StatusCode != 200 {
		t.Fatalf("the queued connection was not served once a slot freed: %v", err)
	}
}

// syncBuffer is a log sink for concurrent writers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A mesh node's JSON log lines name every key once ("node" was written
// by serve, the mesh and the transport alike), and every line names the
// node; its admin documents have snake_case keys (the replica and index
// stats were CamelCase).
func TestJSONLogKeysOnce(t *testing.T) {
	dir := t.TempDir()
	if code := run([]string{"certs", "--dir", dir, "--nodes", "t1"}, io.Discard, io.Discard); code != 0 {
		t.Fatal("certs failed")
	}
	be := fakeBackend(t, 0)
	cfg, err := loadServeConfig([]string{"--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--node-name", "t1",
		"--drain-delay", "0s", "--backends", "b1=" + be.URL, "--mesh", "--dev", "--bind", "127.0.0.1:0", "--quic-listen", "127.0.0.1:0",
		"--tls-ca", filepath.Join(dir, "ca.pem"), "--tls-cert", filepath.Join(dir, "t1.pem"), "--tls-key", filepath.Join(dir, "t1-key.pem"),
		"--log-level", "debug"}, env(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan serving, 1)
	done := make(chan error, 1)
	go func() { done <- serve(ctx, cfg, newLogger(cfg.Log, &logs), ready) }()
	select {
	case s := <-ready:
		resp, err := http.Post("http://"+s.API+"/v1/chat/completions", "application/json", strings.NewReader(chatBody))
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		// The admin documents spell their keys as the rest of the API does.
		for _, path := range []string{"/admin/mesh", "/admin/backends"} {
			var doc any
			if err := json.Unmarshal([]byte(get(t, "http://"+s.Admin+path)), &doc); err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			checkSnakeKeys(t, path, doc)
		}
	case err := <-done:
		t.Fatalf("serve: %v", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	if len(lines) < 3 {
		t.Fatalf("only %d log lines", len(lines))
	}
	for _, line := range lines {
		keys, err := topLevelKeys(line)
		if err != nil {
			t.Fatalf("not JSON: %q", line)
		}
		seen := map[string]bool{}
		for _, k := range keys {
			if seen[k] {
				t.Errorf("key %q twice in %s", k, line)
			}
			seen[k] = true
		}
		if !seen["node"] {
			t.Errorf("no node in %s", line)
		}
	}
}

// topLevelKeys lists a JSON object's keys in order, repeats included.
func topLevelKeys(line string) ([]string, error) {
	dec := json.NewDecoder(strings.NewReader(line))
	if _, err := dec.Token(); err != nil {
		return nil, err
	}
	var keys []string
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			return nil, err
		}
		keys = append(keys, k.(string))
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
	}
	return keys, nil
}

// checkSnakeKeys fails on any object key with an upper-case letter.
func checkSnakeKeys(t *testing.T, where string, v any) {
	t.Helper()
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			if strings.ToLower(k) != k {
				t.Errorf("%s: key %q is not snake_case", where, k)
			}
			checkSnakeKeys(t, where+"."+k, e)
		}
	case []any:
		for _, e := range v {
			checkSnakeKeys(t, where, e)
		}
	}
}
