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
// A subcommand is required: a bare kvmesh-bench, or flags without one,
// prints this list (exit status 2) rather than start a 20-minute run; -h
// prints it too. Every subcommand's -h lists its flags.
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

	"github.com/kvmesh/kvmesh/integration/bench"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := dispatch(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	switch {
	case errors.Is(err, flag.ErrHelp): // a help was asked for and printed
	case errors.Is(err, errUsage):
		os.Exit(2)
	case err != nil:
		fmt.Fprintln(os.Stderr, "kvmesh-bench:", err)
		os.Exit(2)
	}
}

// errUsage is returned after the usage was printed for a command line
// without a subcommand.
var errUsage = errors.New("no subcommand")

// usage lists the subcommands.
func usage(w io.Writer) {
	fmt.Fprint(w, `kvmesh-bench measures kvmesh against the alternatives on realistic traffic.

Usage:
  kvmesh-bench run [flags]            replay a workload through every arm against simulated backends
  kvmesh-bench rawproxy [flags]       kvmesh vs nginx vs Caddy as plain reverse proxies
  kvmesh-bench lb -listen ADDR -to A,B,C          a round-robin TCP front (for the demo)
  kvmesh-bench router -listen ADDR -backends URL,...  one bare kvmesh router node as a process
  kvmesh-bench probe URL              exit 0 when GET URL answers 2xx (scripts without curl)
  kvmesh-bench report -dir DIR        re-render README.md and charts from DIR's JSON
  kvmesh-bench serve-config -time-scale S   a kvmesh serve config for kvmesh-sim backends at time scale S

Run 'kvmesh-bench <command> -h' for the flags of a command.
`)
}

func dispatch(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		usage(stderr)
		return errUsage
	}
	cmd, args := args[0], args[1:]
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
	case "help", "-h", "-help", "--help":
		usage(stdout)
		return flag.ErrHelp
	}
	if strings.HasPrefix(cmd, "-") {
		fmt.Fprintf(stderr, "kvmesh-bench: %s: a subcommand comes first (kvmesh-bench run %s ... for a benchmark run)\n\n", cmd, cmd)
		usage(stderr)
		return errUsage
	}
	return fmt.Errorf("unknown command %q (want run, rawproxy, router, lb, probe, report or serve-config; kvmesh-bench -h lists them)", cmd)
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

// newLogger builds a zerolog logger writing to w at level, coloured on a
// terminal only.
func newLogger(level string, w io.Writer) (zerolog.Logger, error) {
	lvl, err := zerolog.ParseLevel(level)
	if err != nil || lvl == zerolog.NoLevel {
		return zerolog.Nop(), fmt.Errorf("bad -log-level %q (want debug, info, warn, error or disabled)", level)
	}
	cw := zerolog.ConsoleWriter{Out: w, TimeFormat: time.TimeOnly, NoColor: !bench.IsTerminal(w)} // colour codes only on a terminal
	return zerolog.New(cw).Level(lvl).With().Timestamp().Logger(), nil
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
