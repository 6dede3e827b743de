// Command kvmesh-bench measures kvmesh against the alternatives on
// realistic traffic (package integration/bench).
//
//	kvmesh-bench run [flags]       replay a workload through every arm against simulated backends
//	kvmesh-bench rawproxy [flags]  kvmesh vs nginx vs Caddy as plain reverse proxies
//	kvmesh-bench lb -listen ADDR -to A,B,C   a round-robin TCP front (for the demo)
//	kvmesh-bench router -listen ADDR -backends URL,...   one bare kvmesh router node as a process
//	kvmesh-bench probe URL                  exit 0 when GET URL answers 2xx (scripts without curl)
//	kvmesh-bench report -dir DIR            re-render README.md and charts from DIR's JSON
//	kvmesh-bench serve-config -time-scale S a kvmesh serve config for kvmesh-sim backends at time scale S
//
// "kvmesh-bench -flags..." without a subcommand means run. Every
// subcommand's -h lists its flags.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/rs/zerolog"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := dispatch(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "kvmesh-bench:", err)
		}
		os.Exit(2)
	}
}

func dispatch(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cmd := "run"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		cmd, args = args[0], args[1:]
	}
	switch cmd {
	case "run":
		return runCmd(ctx, args, stdout, stderr)
	case "rawproxy":
		return rawProxyCmd(ctx, args, stdout, stderr)
	case "router":
		return routerCmd(ctx, args, stderr)
	case "lb":
		return lbCmd(ctx, args, stderr)
	case "probe":
		return probeCmd(ctx, args)
	case "report":
		return reportCmd(args, stdout, stderr)
	case "serve-config":
		return serveConfigCmd(args, stdout, stderr)
	case "help":
		fmt.Fprintln(stdout, "usage: kvmesh-bench [run|rawproxy|router|lb|probe|report|serve-config] [flags]; kvmesh-bench <cmd> -h lists the flags")
		return nil
	}
	return fmt.Errorf("unknown command %q (want run, rawproxy, router, lb, probe, report or serve-config)", cmd)
}

// probeCmd GETs one URL and fails unless it answers 2xx within a second.
func probeCmd(ctx context.Context, args []string) error {
	if len(args) != 1 {
		return errors.New("usage: kvmesh-bench probe URL")
	}
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, args[0], nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s answered %s", args[0], resp.Status)
	}
	return nil
}

// newLogger builds a zerolog logger writing to w at level.
func newLogger(level string, w io.Writer) (zerolog.Logger, error) {
	lvl, err := zerolog.ParseLevel(level)
	if err != nil || lvl == zerolog.NoLevel {
		return zerolog.Nop(), fmt.Errorf("bad -log-level %q (want debug, info, warn, error or disabled)", level)
	}
	return zerolog.New(zerolog.ConsoleWriter{Out: w, TimeFormat: time.TimeOnly}).Level(lvl).With().Timestamp().Logger(), nil
}

// commandLine renders the command as typed, for the results' README.
func commandLine(sub string, args []string) string {
	parts := []string{"kvmesh-bench", sub}
	for _, a := range args {
		if strings.ContainsAny(a, " \t'\"$") {
			a = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		parts = append(parts, a)
	}
	return strings.Join(parts, " ")
}
