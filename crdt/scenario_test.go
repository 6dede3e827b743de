package crdt

import (
	"bufio"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/kvmesh/kvmesh/tree"
)

// TestScenarios runs the scripts in testdata/*.txt. Each line is a command:
//
//	replicas a b c             add replicas (each peers with every live one)
//	prompt p family=F blocks=N shared=S   define a token prompt
//	learn NODE PROMPT BACKEND ttl=MS
//	invalidate NODE BACKEND [removed]
//	net drop=P dup=P reorder=on|off
//	hold on|off                hold messages in flight / deliver them late
//	partition a b | c          only nodes in the same group talk
//	heal
//	round [N]                  N exchange rounds (10 ms each)
//	advance MS                 time passes without messages
//	digest                     every node starts anti-entropy with every peer
//	settle [MAX]               rounds (with anti-entropy) until converged
//	kill NODE / restart NODE   a node dies / comes back with empty state
//	check-converged | check-diverged
//	check-depth NODE PROMPT BACKEND BLOCKS
//	check-claims NODE N        live claims held
//	check-stored NODE N        slots occupied, dead or alive (nothing swept)
//	check-no-expired
//	check-stat NODE FIELD OP N  e.g. check-stat b FullSyncsReceived >= 1
//
// Blank lines and lines starting with # are ignored.
func TestScenarios(t *testing.T) {
	files, err := filepath.Glob("testdata/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no scenarios: %v", err)
	}
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".txt"), func(t *testing.T) { runScenario(t, f) })
	}
}

func runScenario(t *testing.T, path string) {
	fh, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	var s *simNet
	capacity := 1 << 14
	prompts := map[string][]uint32{}
	sc := bufio.NewScanner(fh)
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		f := strings.Fields(text)
		cmd, args := f[0], f[1:]
		fail := func(format string, a ...any) {
			t.Helper()
			t.Fatalf("%s:%d: %s: %s", path, line, text, sprintf(format, a...))
		}
		kv := func(key string, def int) int {
			for _, a := range args {
				if k, v, ok := strings.Cut(a, "="); ok && k == key {
					n, err := strconv.Atoi(v)
					if err != nil {
						fail("bad %s=%q", k, v)
					}
					return n
				}
			}
			return def
		}
		need := func(n int) {
			if len(args) < n {
				fail("needs %d arguments", n)
			}
		}
		if s == nil && cmd != "capacity" {
			s = newSimNet(t, 42, func(c *Config, ic *tree.Config) { ic.Capacity = capacity; c.LogCapacity = 64 })
		}
		switch cmd {
		case "capacity": // must come first
			need(1)
			capacity, _ = strconv.Atoi(args[0])
		case "replicas":
			for _, n := range args {
				s.add(n)
			}
		case "prompt":
			need(1)
			prompts[args[0]] = prompt(len(prompts), kv("family", 0), kv("blocks", 4), kv("shared", 0))
		case "learn":
			need(3)
			p, ok := prompts[args[1]]
			if !ok {
				fail("unknown prompt")
			}
			s.learn(args[0], p, args[2], int64(kv("ttl", 60_000)))
		case "invalidate":
			need(2)
			removed := len(args) > 2 && args[2] == "removed"
			if _, err := s.node(args[0]).r.Invalidate(args[1], removed, s.now); err != nil {
				fail("%v", err)
			}
		case "net":
			s.drop, s.dup = float64(kv("drop", 0))/100, float64(kv("dup", 0))/100
			s.reorder = strings.Contains(text, "reorder=on")
		case "hold":
			need(1)
			s.hold = args[0] == "on"
		case "partition":
			g := 0
			for _, a := range args {
				if a == "|" {
					g++
					continue
				}
				s.group[a] = g
			}
		case "heal":
			clear(s.group)
		case "round":
			n := 1
			if len(args) > 0 {
				n, _ = strconv.Atoi(args[0])
			}
			for i := 0; i < n; i++ {
				s.round()
			}
		case "advance":
			need(1)
			ms, _ := strconv.Atoi(args[0])
			s.now += int64(ms)
		case "digest":
			s.antiEntropy()
		case "settle":
			max := 200
			if len(args) > 0 {
				max, _ = strconv.Atoi(args[0])
			}
			s.settle(max)
		case "kill":
			need(1)
			s.kill(args[0])
		case "restart":
			need(1)
			s.add(args[0])
		case "check-converged":
			if !s.converged() {
				fail("replicas differ: %v", s.digests())
			}
		case "check-diverged":
			if s.converged() {
				fail("replicas are identical")
			}
		case "check-depth":
			need(4)
			want, _ := strconv.Atoi(args[3])
			if got := s.depth(args[0], prompts[args[1]], args[2]); int(got) != want {
				fail("depth %d", got)
			}
		case "check-claims":
			need(2)
			want, _ := strconv.Atoi(args[1])
			if got := len(sortedContents(s.node(args[0]).r.Index(), s.now)); got != want {
				fail("%d claims", got)
			}
		case "check-stored":
			need(2)
			want, _ := strconv.Atoi(args[1])
			if got := s.node(args[0]).r.Index().Len(); got != want {
				fail("%d slots occupied", got)
			}
		case "check-no-expired":
			s.noneExpired()
		case "check-stat":
			need(4)
			st := s.node(args[0]).r.Stats()
			got, ok := statField(st, args[1])
			if !ok {
				fail("unknown stat")
			}
			want, _ := strconv.ParseUint(args[3], 10, 64)
			if !compare(got, args[2], want) {
				fail("%s is %d", args[1], got)
			}
		default:
			fail("unknown command")
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
}

func compare(got uint64, op string, want uint64) bool {
	switch op {
	case "==":
		return got == want
	case ">=":
		return got >= want
	case "<=":
		return got <= want
	case ">":
		return got > want
	}
	return false
}

func statField(s Stats, name string) (uint64, bool) {
	m := map[string]uint64{
		"LocalChanges": s.LocalChanges, "MessagesSent": s.MessagesSent, "ClaimsSent": s.ClaimsSent,
		"DeltasReceived": s.DeltasReceived, "ClaimsApplied": s.ClaimsApplied, "ClaimsRejected": s.ClaimsRejected,
		"Retransmits": s.Retransmits, "FullSyncsStarted": s.FullSyncsStarted, "FullSyncsDone": s.FullSyncsDone,
		"FullSyncsReceived": s.FullSyncsReceived, "DigestMismatches": s.DigestMismatches, "BucketsRepaired": s.BucketsRepaired,
		"ClockClamps": s.ClockClamps, "Restarts": s.Restarts, "UnknownSender": s.UnknownSender,
	}
	v, ok := m[name]
	return v, ok
}

func sprintf(format string, a ...any) string {
	if len(a) == 0 {
		return format
	}
	return strings.TrimSpace(fmtSprintf(format, a...))
}
