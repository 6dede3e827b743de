package main

import (
	"crypto/rand"
	"encoding/base64"
	"flag"
	"fmt"
	"io"
)

// gossipKeyCommand prints a new serf gossip encryption key: 32 random
// bytes, base64, as --gossip-key wants it (no openssl needed).
func gossipKeyCommand(args []string, stdout, stderr io.Writer) int {
	flags := flag.NewFlagSet("kvmesh gossip-key", flag.ContinueOnError)
	flags.Usage = func() {
		fmt.Fprintln(flags.Output(), "Usage: kvmesh gossip-key\n\nPrints a new gossip encryption key (32 random bytes, base64) for --gossip-key.\nEvery node of a mesh uses the same key.")
	}
	if code, ok := parseFlags(flags, args, stdout, stderr); !ok {
		return code
	}
	var key [32]byte
	if _, err := rand.Read(key[:]); err != nil {
		fmt.Fprintf(stderr, "kvmesh gossip-key: %v\n", err)
		return 1
	}
	fmt.Fprintln(stdout, base64.StdEncoding.EncodeToString(key[:]))
	return 0
}

// parseFlags parses a subcommand's flags the same way for every
// subcommand: -h prints the usage to stdout and exits 0; a bad flag or a
// stray argument is reported once on stderr and exits 2. ok is true when
// the command should go on.
func parseFlags(flags *flag.FlagSet, args []string, stdout, stderr io.Writer) (code int, ok bool) {
	flags.SetOutput(io.Discard)
	err := flags.Parse(args)
	if err == nil && flags.NArg() > 0 {
		err = fmt.Errorf("unexpected argument %q", flags.Arg(0))
	}
	switch {
	case err == flag.ErrHelp:
		flags.SetOutput(stdout)
		flags.Usage()
		return 0, false
	case err != nil && !hasFlags(flags):
		got := args[0]
		if flags.NArg() > 0 {
			got = flags.Arg(0)
		}
		fmt.Fprintf(stderr, "%s: takes no arguments (got %q)\n", flags.Name(), got)
		return 2, false
	case err != nil:
		fmt.Fprintf(stderr, "%s: %v\nRun '%s -h' for the flags.\n", flags.Name(), err, flags.Name())
		return 2, false
	}
	flags.SetOutput(stderr)
	return 0, true
}

func hasFlags(flags *flag.FlagSet) bool {
	n := 0
	flags.VisitAll(func(*flag.Flag) { n++ })
	return n > 0
}

// printFlags lists a subcommand's flags as serve's help does: --name, its
// usage, its default.
func printFlags(w io.Writer, flags *flag.FlagSet) {
	flags.VisitAll(func(f *flag.Flag) {
		arg := " VALUE"
		if bf, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && bf.IsBoolFlag() {
			arg = ""
		}
		fmt.Fprintf(w, "  --%s%s\n        %s\n", f.Name, arg, f.Usage)
		if f.DefValue != "" && !(arg == "" && f.DefValue == "false") {
			fmt.Fprintf(w, "        default %s\n", f.DefValue)
		}
	})
}
