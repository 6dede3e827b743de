package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"go.yaml.in/yaml/v3"
)

// configCommand prints the configuration kvmesh serve would run with
// (defaults, then the config file, the environment and the flags, read as
// serve reads them, the defaults of the backends spelt out) as YAML with
// every key, the ones the example file leaves out too: a config file can
// start from it, and loads back to the same configuration. The gossip key
// is not printed. A configuration serve would refuse is reported as serve
// reports it, every problem at once, with serve's exit status 2 (the
// command line's convention, parseFlags': what was given is wrong), and
// nothing is printed on stdout.
func configCommand(args []string, stdout, stderr io.Writer) int {
	cfg, err := loadConfigWith(args, os.Getenv, stdout, configUsage)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		printConfigError(stderr, "kvmesh config", err, "kvmesh config -h")
		return 2
	}
	out := *cfg
	out.Mesh.GossipKey = "" // never printed; marked below when set
	b, err := yaml.Marshal(&out)
	if err != nil {
		fmt.Fprintf(stderr, "kvmesh config: %v\n", err)
		return 1
	}
	if cfg.Mesh.GossipKey != "" {
		b = bytes.Replace(b, []byte(`gossip_key: ""`), []byte(`gossip_key: "" # `+redactedKey), 1)
	}
	fmt.Fprintln(stdout, "# The configuration kvmesh serve would run with: defaults, the config file, KVMESH_* variables, flags.")
	_, _ = stdout.Write(b)
	return 0
}

// configUsage is config's help: what it does, then serve's flags, which it
// takes.
func configUsage(w io.Writer) {
	fmt.Fprint(w, `Usage: kvmesh config [flags]

Prints the configuration kvmesh serve would run with, as YAML with every key:
the defaults, then the config file, KVMESH_<FLAG> variables and flags, read as
serve reads them. A config file can start from it; it loads back to the same
configuration. The gossip key is not printed. A configuration serve would
refuse is reported on stderr, every problem at once, and nothing is printed
(exit status 2).

It takes the flags of kvmesh serve:

`)
	serveFlagsUsage(w)
}

// redactedKey marks a gossip key left out of a printed configuration: the
// file loads as it is, and serve then wants the key from KVMESH_GOSSIP_KEY
// or --gossip-key.
const redactedKey = "set, not printed: give it with KVMESH_GOSSIP_KEY or --gossip-key"
