package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/rs/zerolog"

	"github.com/kvmesh/kvmesh/cmd/kvmesh/ui"
	"github.com/kvmesh/kvmesh/integration/sim"
	"github.com/kvmesh/kvmesh/integration/workload"
)

// go test ./cmd/kvmesh -run TestStatusPageInBrowser -ui.screenshot ../../docs/ui.png
// refreshes the README's picture (after -ui.settle of traffic, so the
// charts have a history).
var (
	uiScreenshot = flag.String("ui.screenshot", "", "TestStatusPageInBrowser: write a screenshot of the status page to this PNG file")
	uiSettle     = flag.Duration("ui.settle", 25*time.Second, "TestStatusPageInBrowser: traffic to let flow before the screenshot")
)

// uiFreeAddr is a loopback address whose port is free for TCP and UDP.
func uiFreeAddr(t *testing.T) string {
	t.Helper()
	for i := 0; i < 50; i++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		pc, err := net.ListenPacket("udp", addr)
		ln.Close()
		if err == nil {
			pc.Close()
			return addr
		}
	}
	t.Fatal("no free port for TCP and UDP")
	return ""
}

// uiStartNode runs serve in process with args and returns its addresses.
func uiStartNode(t *testing.T, args ...string) serving {
	t.Helper()
	cfg, err := loadServeConfig(append([]string{"--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--drain-delay", "0s",
		"--shutdown-timeout", "5s"}, args...), env(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready, done := make(chan serving, 1), make(chan error, 1)
	go func() { done <- serve(ctx, cfg, zerolog.Nop(), ready) }()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case s := <-ready:
		return s
	case err := <-done:
		t.Fatalf("serve: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not start")
	}
	return serving{}
}

// uiTraffic sends a multi-turn chat workload, over and over, to the nodes'
// API listeners in turn from 16 goroutines pausing 30 ms between requests,
// until ctx ends (at most 100,000 requests). It returns the workload and the
// number of answers received.
func uiTraffic(ctx context.Context, t *testing.T, apis []string) (*workload.Workload, *atomic.Int64) {
	t.Helper()
	o := workload.DefaultMultiTurnOptions()
	o.Conversations = 64
	w, err := workload.MultiTurn(o)
	if err != nil {
		t.Fatal(err)
	}
	w.Materialize()
	var next, ok atomic.Int64
	client := &http.Client{Timeout: 30 * time.Second}
	for g := 0; g < 16; g++ {
		go func() {
			for ctx.Err() == nil {
				i := next.Add(1)
				if i > 100_000 {
					return
				}
				time.Sleep(30 * time.Millisecond)
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+apis[int(i)%len(apis)]+"/v1/chat/completions",
					bytes.NewReader(w.Requests[int(i)%len(w.Requests)].Body))
				req.Header.Set("Content-Type", "application/json")
				resp, err := client.Do(req)
				if err != nil {
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode == 200 {
					ok.Add(1)
				}
			}
		}()
	}
	return w, &ok
}

// TestStatusPageInBrowser drives headless Chromium against a node of a
// two-node mesh in front of four simulated backends, under traffic: the
// page loads without a console error, its hit-rate and decision figures
// change as traffic flows, the mesh shows both members and the explainer
// returns a decision.
func TestStatusPageInBrowser(t *testing.T) {
	bin := ui.ChromiumPath()
	if bin == "" {
		t.Skip("no Chromium found (chromium, chromium-browser, google-chrome or $KVMESH_CHROMIUM): the status page's browser test is skipped; apt-get install -y chromium runs it")
	}
	simCfg := sim.DefaultConfig()
	simCfg.TimeScale = 20     // requests take milliseconds, and queues still form
	simCfg.CacheBlocks = 6000 // smaller than the working set: evictions, misses
	fleet, err := sim.StartFleet(4, simCfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fleet.Close() })
	var backends []string
	for i, u := range fleet.URLs() {
		backends = append(backends, fmt.Sprintf("vllm-%d=%s", i, u))
	}
	dir := t.TempDir()
	if code := run([]string{"certs", "--dir", dir, "--nodes", "r1,r2"}, io.Discard, io.Discard); code != 0 {
		t.Fatal("kvmesh certs failed")
	}
	bind1, bind2 := uiFreeAddr(t), uiFreeAddr(t)
	node := func(name, bind string, join ...string) serving {
		args := []string{"--node-name", name, "--backends", strings.Join(backends, ","), "--mesh", "--dev",
			"--bind", bind, "--quic-listen", uiFreeAddr(t), "--tls-ca", filepath.Join(dir, "ca.pem"),
			"--tls-cert", filepath.Join(dir, name+".pem"), "--tls-key", filepath.Join(dir, name+"-key.pem")}
		if len(join) > 0 {
			args = append(args, "--join", join[0])
		}
		return uiStartNode(t, args...)
	}
	r1 := node("r1", bind1)
	r2 := node("r2", bind2, bind1)

	ctx, stop := context.WithCancel(context.Background())
	t.Cleanup(stop)
	w, answered := uiTraffic(ctx, t, []string{r1.API, r2.API})

	alloc, cancelAlloc := chromedp.NewExecAllocator(ctx, chromedp.ExecPath(bin), chromedp.Headless, chromedp.NoSandbox,
		chromedp.DisableGPU, chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.NoFirstRun, chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1440, 1320),
		chromedp.Env("TMPDIR="+t.TempDir())) // its singleton socket's directory, which it leaves behind
	defer cancelAlloc()
	browser, cancelBrowser := chromedp.NewContext(alloc)
	defer cancelBrowser()
	browser, cancelTimeout := context.WithTimeout(browser, 2*time.Minute+*uiSettle)
	defer cancelTimeout()

	var mu sync.Mutex
	var problems []string
	err = chromedp.Listen(browser, func(ev any) { // must not block: collects under a lock
		mu.Lock()
		defer mu.Unlock()
		switch e := ev.(type) {
		case *runtime.EventConsoleAPICalled:
			if e.Type == runtime.ConsoleAPICalledTypeError || e.Type == runtime.ConsoleAPICalledTypeWarning || e.Type == runtime.ConsoleAPICalledTypeAssert {
				var args []string
				for _, a := range e.Args {
					args = append(args, string(a.Value)+a.Description)
				}
				problems = append(problems, fmt.Sprintf("console.%s: %s", e.Type, strings.Join(args, " ")))
			}
		case *runtime.EventExceptionThrown:
			d := e.ExceptionDetails
			msg := d.Text
			if d.Exception != nil {
				msg += " " + d.Exception.Description
			}
			problems = append(problems, fmt.Sprintf("exception at %s:%d: %s", d.URL, d.LineNumber, msg))
		case *log.EventEntryAdded: // network failures, CSP violations, ...
			if e.Entry.Level == log.EntryLevelError || e.Entry.Level == log.EntryLevelWarning {
				problems = append(problems, fmt.Sprintf("log %s (%s): %s %s", e.Entry.Level, e.Entry.Source, e.Entry.Text, e.Entry.URL))
			}
		}
	})
	if err != nil {
		t.Fatalf("starting Chromium (%s): %v", bin, err)
	}
	eval := func(expr string) string {
		v, err := chromedp.Run(browser, chromedp.Evaluate[string](expr))
		if err != nil {
			t.Fatalf("evaluating %s: %v", expr, err)
		}
		return v
	}
	text := func(id string) string {
		return eval(`(document.getElementById(` + fmt.Sprintf("%q", id) + `)||{}).textContent||""`)
	}
	// waitFor polls the page until cond holds (generous: nothing here
	// measures time).
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(60 * time.Second); !cond(); time.Sleep(100 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s (answers so far: %d)", what, answered.Load())
			}
		}
	}

	if _, err := chromedp.Call(browser, log.Enable, cdp.Empty{}); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Call(browser, runtime.Enable, cdp.Empty{}); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(browser, chromedp.Navigate("http://"+r1.Admin+"/ui")); err != nil {
		t.Fatal(err)
	}
	waitFor("the page to show decisions", func() bool { d := text("kpi-decisions"); return d != "" && d != "0" })
	waitFor("a hit rate since start", func() bool { return strings.HasSuffix(text("kpi-hit"), "%") })
	dec1, tok1 := text("kpi-decisions"), text("kpi-tokens")
	waitFor("the decision count to move", func() bool { return text("kpi-decisions") != dec1 })
	waitFor("the hit-rate figures to move", func() bool { return text("kpi-tokens") != tok1 })
	waitFor("both members in the mesh table", func() bool {
		return eval(`String(document.querySelectorAll("#members tbody tr").length)`) == "2"
	})
	if legend := text("legend-decisions"); !strings.Contains(legend, "prefix") {
		t.Errorf("the decisions legend shows no prefix route: %q", legend)
	}

	// The explainer: a body the traffic sent (first turns go first), POST
	// /debug/route, a decision with candidates and the prefix matched.
	waitFor("the traffic to pass the explained request", func() bool { return answered.Load() > 8 })
	err = chromedp.Do(browser,
		chromedp.SetValue(chromedp.ID("explain-body"), string(w.Requests[1].Body)),
		chromedp.Click(chromedp.ID("explain-go")))
	if err != nil {
		t.Fatalf("explainer: %v", err)
	}
	chosen, err := chromedp.Run(browser, chromedp.Poll[string](`document.getElementById("explain-result").dataset.chosen`,
		chromedp.WithPollingTimeout(30*time.Second)))
	if err != nil {
		t.Fatalf("explainer: %v (result: %q)", err, text("explain-result"))
	}
	if !strings.HasPrefix(chosen, "vllm-") || !strings.Contains(text("explain-result"), "reason") {
		t.Errorf("explainer chose %q: %q", chosen, text("explain-result"))
	}
	if d := eval(`document.getElementById("explain-result").dataset.deepest`); d == "" || d == "0" {
		t.Errorf("the explainer found no claim for a body the traffic sent (deepest %q): %q", d, text("explain-result"))
	}
	if rows := eval(`String(document.querySelectorAll("#explain-candidates tbody tr").length)`); rows != "4" {
		t.Errorf("explainer candidates: %s rows", rows)
	}

	if *uiScreenshot != "" {
		time.Sleep(*uiSettle)
		png, err := chromedp.Run(browser, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(*uiScreenshot, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot: %s (%d bytes, %d answers)", *uiScreenshot, len(png), answered.Load())
	}
	mu.Lock()
	defer mu.Unlock()
	for _, p := range problems {
		t.Errorf("browser: %s", p)
	}
}

// The page is served on the admin listener only, its state counts the
// traffic and holds no prompt text.
func TestStatusPageOnAdminListenerOnly(t *testing.T) {
	be := fakeBackend(t, 0)
	s, cancel, done := startServe(t, "--backends", "b1="+be.URL)
	defer func() { cancel(); <-done }()
	resp, err := http.Post("http://"+s.API+"/v1/chat/completions", "application/json", strings.NewReader(chatBody))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	state := get(t, "http://"+s.Admin+"/ui/state")
	if !strings.Contains(state, `"reason":"miss"`) || !strings.Contains(state, `"name":"b1"`) || strings.Contains(state, "terse") {
		t.Errorf("/ui/state: %s", state)
	}
	var doc any
	if err := json.Unmarshal([]byte(state), &doc); err != nil {
		t.Fatal(err)
	}
	checkSnakeKeys(t, "/ui/state", doc)
	page, err := http.Get("http://" + s.Admin + "/ui")
	if err != nil {
		t.Fatal(err)
	}
	page.Body.Close()
	if page.StatusCode != 200 || !strings.Contains(page.Header.Get("Content-Security-Policy"), "script-src 'self'") {
		t.Errorf("/ui: %d %v", page.StatusCode, page.Header)
	}
	for _, p := range []string{"/ui", "/ui/state", "/ui/app.js"} {
		if code := status("http://" + s.API + p); code != 404 {
			t.Errorf("the API listener answers %s with %d", p, code)
		}
	}
}
