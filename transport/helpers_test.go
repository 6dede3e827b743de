package transport

import (
	"bytes"
	"context"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/rs/zerolog"
)

// Transport is a copy of the interface package mesh defines over this
// package; both implementations must satisfy it.
type Transport interface {
	Addr() string
	Send(ctx context.Context, addr string, data []byte) error
	Inbound() <-chan Message
	Close() error
}

var (
	_ Transport = (*QUIC)(nil)
	_ Transport = (*MemEndpoint)(nil)
)

// wait bounds how long a test waits for something that should happen; it is
// only reached when the code is broken, so it can be generous.
const wait = 20 * time.Second

var (
	clusterCAOnce sync.Once
	clusterCA     *CA
)

// testCA is one cluster CA shared by the tests of this binary.
func testCA(t testing.TB) *CA {
	t.Helper()
	clusterCAOnce.Do(func() {
		ca, err := GenerateCA("kvmesh-test-ca", time.Hour)
		if err != nil {
			panic(err)
		}
		clusterCA = ca
	})
	return clusterCA
}

// testConfig returns a loopback config for node name with a certificate from
// ca and timeouts short enough for tests.
func testConfig(t testing.TB, ca *CA, name string) Config {
	t.Helper()
	nc, err := ca.Issue(name, nil, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.TLS = ca.TLSConfig(nc)
	// Timeouts stay generous: the machine is shared and tests run under
	// -race next to other packages. Tests that need a short one set it.
	cfg.DialBackoff = 50 * time.Millisecond
	cfg.SendTimeout = wait
	cfg.ReadTimeout = wait
	cfg.DrainTimeout = 200 * time.Millisecond
	return cfg
}

// startQUIC starts a node and closes it at the end of the test.
func startQUIC(t testing.TB, cfg Config) *QUIC {
	t.Helper()
	q, err := NewQUIC(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = q.Close() })
	return q
}

// recv waits for one message.
func recv(t testing.TB, ch <-chan Message, timeout time.Duration) Message {
	t.Helper()
	select {
	case m, ok := <-ch:
		if !ok {
			t.Fatal("inbound channel closed")
		}
		return m
	case <-time.After(timeout):
		t.Fatalf("no message within %s", timeout)
	}
	return Message{}
}

// expectNone asserts that nothing arrives within d.
func expectNone(t testing.TB, ch <-chan Message, d time.Duration) {
	t.Helper()
	select {
	case m := <-ch:
		t.Fatalf("unexpected message from %q (%d bytes)", m.From, len(m.Data))
	case <-time.After(d):
	}
}

// checkGoroutines returns a function that fails the test if, after a grace
// period, more goroutines run than when checkGoroutines was called.
func checkGoroutines(t testing.TB) func() {
	t.Helper()
	before := runtime.NumGoroutine()
	return func() {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			n := runtime.NumGoroutine()
			if n <= before {
				return
			}
			if time.Now().After(deadline) {
				buf := make([]byte, 1<<20)
				buf = buf[:runtime.Stack(buf, true)]
				t.Fatalf("goroutine leak: %d before, %d after\n%s", before, n, buf)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// metricValue sums the samples of a counter or gauge family in reg whose
// labels include the given name/value pairs.
func metricValue(t testing.TB, reg prometheus.Gatherer, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metric:
		for _, m := range mf.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				if !hasLabel(m, labels[i], labels[i+1]) {
					continue metric
				}
			}
			switch {
			case m.Counter != nil:
				sum += m.Counter.GetValue()
			case m.Gauge != nil:
				sum += m.Gauge.GetValue()
			}
		}
	}
	return sum
}

func hasLabel(m *dto.Metric, name, value string) bool {
	for _, lp := range m.GetLabel() {
		if lp.GetName() == name && lp.GetValue() == value {
			return true
		}
	}
	return false
}

// waitFor polls cond until it holds or the timeout passes.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// logBuffer is a goroutine-safe sink for a zerolog.Logger.
// observedConfig is testConfig for node name with its metrics in a registry
// of its own and its logs kept.
func observedConfig(t *testing.T, ca *CA, name string) (Config, *prometheus.Registry, *logBuffer) {
	t.Helper()
	reg, logs := prometheus.NewRegistry(), new(logBuffer)
	cfg := testConfig(t, ca, name)
	cfg.Registerer = reg
	cfg.Logger = logs.logger()
	return cfg, reg, logs
}

type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func (l *logBuffer) logger() zerolog.Logger { return zerolog.New(l).Level(zerolog.DebugLevel) }

// lines returns the log lines containing all of the given substrings.
func (l *logBuffer) lines(subs ...string) []string {
	var out []string
	for _, line := range strings.Split(l.String(), "\n") {
		ok := line != ""
		for _, s := range subs {
			ok = ok && strings.Contains(line, s)
		}
		if ok {
			out = append(out, line)
		}
	}
	return out
}
