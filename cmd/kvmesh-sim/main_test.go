package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestParseFlags(t *testing.T) {
	cfg, opt, err := parseFlags([]string{"-listen", "127.0.0.1:0", "-models", "a, b", "-cache-blocks", "100",
		"-time-scale", "60", "-error-rate", "0.1", "-spike-delay", "3s", "-log-level", "debug"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Models) != 2 || cfg.Models[1] != "b" || cfg.CacheBlocks != 100 || cfg.TimeScale != 60 ||
		cfg.Faults.ErrorRate != 0.1 || cfg.Faults.SpikeDelay != 3*time.Second || opt.listen != "127.0.0.1:0" {
		t.Fatalf("cfg %+v opt %+v", cfg, opt)
	}
	for _, bad := range [][]string{
		{"-time-scale", "0"}, {"-error-rate", "2"}, {"-models", " , "}, {"-nope"}, {"extra"}, {"-shutdown-grace", "-1s"},
	} {
		if _, _, err := parseFlags(bad, io.Discard); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
	if _, err := newLogger(options{logLevel: "loud"}, io.Discard); err == nil {
		t.Error("bad log level accepted")
	}
}

func TestServeAndShutdown(t *testing.T) {
	cfg, opt, err := parseFlags([]string{"-listen", "127.0.0.1:0", "-time-scale", "1000", "-models", "m"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	cfg.Logger, _ = newLogger(options{logLevel: "info"}, &logs)
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() { done <- serve(ctx, cfg, opt, ready) }()
	addr := <-ready
	resp, err := http.Post("http://"+addr+"/v1/completions", "application/json", strings.NewReader(`{"prompt":"a b","max_tokens":3}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"completion_tokens":3`) {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "kvmesh-sim stopped") {
		t.Fatalf("logs: %s", logs.String())
	}
	if _, err := http.Get("http://" + addr + "/health"); err == nil {
		t.Fatal("still serving after shutdown")
	}
}
