// Command kvmesh is a kvmesh router node and its tools.
//
//	kvmesh serve   [flags]   run a router node (API + admin listeners, optional mesh)
//	kvmesh config  [flags]   print the configuration serve would run with, every key
//	kvmesh certs   [flags]   create a CA and node certificates for a dev or test cluster
//	kvmesh members [flags]   print a running node's mesh membership
//	kvmesh gossip-key        print a new gossip encryption key
//	kvmesh version
//
// Run `kvmesh <command> -h` for a command's flags.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
)

// getenv is os.Getenv (a variable so tests can replace the environment).
var getenv = os.Getenv

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	switch args[0] {
	case "serve":
		return serveCommand(args[1:], stdout, stderr)
	case "config":
		return configCommand(args[1:], stdout, stderr)
	case "certs":
		return certsCommand(args[1:], stdout, stderr)
	case "members":
		return membersCommand(args[1:], stdout, stderr)
	case "gossip-key":
		return gossipKeyCommand(args[1:], stdout, stderr)
	case "version", "--version", "-version":
		return versionCommand(args[1:], stdout, stderr)
	case "help", "-h", "--help":
		usage(stdout)
		return 0
	}
	fmt.Fprintf(stderr, "kvmesh: unknown command %q\n\n", args[0])
	usage(stderr)
	return 2
}

// versionCommand prints the version; it takes no flags or arguments.
func versionCommand(args []string, stdout, stderr io.Writer) int {
	flags := flag.NewFlagSet("kvmesh version", flag.ContinueOnError)
	flags.Usage = func() { fmt.Fprintln(flags.Output(), "Usage: kvmesh version\n\nPrints the version of kvmesh.") }
	if code, ok := parseFlags(flags, args, stdout, stderr); !ok {
		return code
	}
	fmt.Fprintln(stdout, "kvmesh", version)
	return 0
}

func usage(w io.Writer) {
	fmt.Fprint(w, `kvmesh — a cache-aware router mesh for LLM inference.

Usage:
  kvmesh serve   [flags]   run a router node
  kvmesh config  [flags]   print the configuration serve would run with (every key; serve's flags)
  kvmesh certs   [flags]   create a CA and node certificates for a dev or test cluster
  kvmesh members [flags]   print a running node's mesh membership
  kvmesh gossip-key        print a new gossip encryption key (for --gossip-key)
  kvmesh version           print the version

Run 'kvmesh <command> -h' for the flags of a command.
`)
}
