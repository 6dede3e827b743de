package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/kvmesh/kvmesh/integration/workload"
)

// workloadFlags select and shape the replayed workload.
type workloadFlags struct {
	kind        string
	trace       string
	start       time.Duration
	duration    time.Duration
	requests    int
	compression float64
	spread      bool
	maxInput    int
	maxOutput   int
	rate        float64
	seed        uint64
}

// traceCandidates are where the Mooncake conversation trace is looked for,
// relative to the repository root: the shared copy next to the checkout,
// then the gzipped copy in the repository's test data.
var traceCandidates = []string{
	"../shared/traces/mooncake/conversation_trace.jsonl",
	"integration/workload/testdata/mooncake_conversation_trace.jsonl.gz",
}

// repoRoot walks up from the working directory to the directory holding
// go.mod ("" if none).
func repoRoot() string {
	dir, err := os.Getwd()
	if err != nil {
		return ""
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return ""
		}
		dir = parent
	}
}

// findTrace returns the trace path to use.
func (f *workloadFlags) findTrace() (string, error) {
	if f.trace != "" {
		return f.trace, nil
	}
	root := repoRoot()
	for _, c := range traceCandidates {
		p := filepath.Join(root, c)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", errors.New("no Mooncake trace found (looked for " + fmt.Sprint(traceCandidates) + " under the repository root); pass -trace")
}

// build returns the workload. maxInput bounds prompts to what the backends
// accept (truncating, which keeps prefixes shared).
func (f *workloadFlags) build() (*workload.Workload, error) {
	body := workload.DefaultBodyOptions()
	switch f.kind {
	case "mooncake":
		path, err := f.findTrace()
		if err != nil {
			return nil, err
		}
		o := workload.DefaultMooncakeOptions()
		o.Start, o.Duration, o.MaxRequests = f.start, f.duration, f.requests
		o.Compression = f.compression
		o.SpreadTies = f.spread
		o.MaxInputTokens, o.MaxOutputTokens = f.maxInput, f.maxOutput
		o.Seed = f.seed
		o.Body = body
		return workload.LoadMooncake(path, o)
	case "multiturn":
		o := workload.DefaultMultiTurnOptions()
		o.Seed, o.Body = f.seed, body
		override(&o.Rate, f.rate)
		return limit(workload.MultiTurn(o))(f.requests)
	case "sharedprefix":
		o := workload.DefaultSharedPrefixOptions()
		o.Seed, o.Body = f.seed, body
		override(&o.Rate, f.rate)
		return limit(workload.SharedPrefix(o))(f.requests)
	case "longdoc":
		o := workload.DefaultLongDocumentOptions()
		o.Seed, o.Body = f.seed, body
		override(&o.Rate, f.rate)
		return limit(workload.LongDocument(o))(f.requests)
	case "hotprefix":
		o := workload.DefaultHotPrefixOptions()
		o.Seed, o.Body = f.seed, body
		override(&o.Rate, f.rate)
		override(&o.Requests, f.requests)
		return workload.HotPrefix(o)
	case "customers":
		o := workload.DefaultCustomersOptions()
		o.Seed, o.Body = f.seed, body
		override(&o.Rate, f.rate)
		override(&o.Requests, f.requests)
		return workload.Customers(o)
	case "agent":
		o := workload.DefaultAgentOptions()
		o.Seed, o.Body = f.seed, body
		override(&o.Rate, f.rate)
		override(&o.Requests, f.requests)
		return workload.Agent(o)
	}
	return nil, fmt.Errorf("unknown -workload %q (want %s)", f.kind, workloadNames)
}

// override sets *dst to v when the flag was given (v > 0).
func override[T int | float64](dst *T, v T) {
	if v > 0 {
		*dst = v
	}
}

// workloadNames lists the -workload values.
const workloadNames = "mooncake, multiturn, sharedprefix, longdoc, hotprefix, customers or agent"

// limit keeps the first n requests of a synthetic workload (0 = all).
func limit(w *workload.Workload, err error) func(n int) (*workload.Workload, error) {
	return func(n int) (*workload.Workload, error) {
		if err != nil || n <= 0 || n >= len(w.Requests) {
			return w, err
		}
		reqs := w.Requests[:n]
		trimmed := &workload.Workload{Name: fmt.Sprintf("%s[:%d]", w.Name, n), Requests: reqs}
		convs, groups := map[int]bool{}, map[int]bool{}
		for i := range reqs {
			convs[reqs[i].Conversation], groups[reqs[i].Group] = true, true
			trimmed.PromptTokens += int64(reqs[i].PromptTokens)
			trimmed.OutputTokens += int64(reqs[i].OutputTokens)
			trimmed.MaxPromptTokens = max(trimmed.MaxPromptTokens, reqs[i].PromptTokens)
			trimmed.Span = max(trimmed.Span, reqs[i].At)
		}
		trimmed.Conversations, trimmed.Groups = len(convs), len(groups)
		return trimmed, nil
	}
}

// maxOutputOf returns the longest output of w.
func maxOutputOf(w *workload.Workload) int {
	m := 0
	for i := range w.Requests {
		m = max(m, w.Requests[i].OutputTokens)
	}
	return m
}
