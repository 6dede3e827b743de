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
// serve reads them) as YAML with every key, the ones the example file
// leaves out too: a config file can start from it. The gossip key is not
// printed. Problems serve would refuse to start with are reported after it
// (exit status 1); bad flags or a config file that does not load, before
// it (exit status 2).
func configCommand(args []string, stdout, stderr io.Writer) int {
	cfg, from, err := buildServeConfig(args, os.Getenv, stdout)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(stdout, "\nkvmesh config takes the flags of kvmesh serve and prints the configuration it would run with.")
			return 0
		}
		printConfigError(stderr, "kvmesh config", err, "kvmesh serve -h")
		return 2
	}
	out := *cfg
	out.Mesh.GossipKey = "" // never printed; marked below when set
	b, err := yaml.Marshal(&out)
	if err != nil {
		fmt.Fprintf(stderr, "kvmesh config: %v\n", err)
		return 2
	}
	if cfg.Mesh.GossipKey != "" {
		b = bytes.Replace(b, []byte(`gossip_key: ""`), []byte(`gossip_key: "" # `+redactedKey), 1)
	}
	fmt.Fprintln(stdout, "# The configuration kvmesh serve would run with: defaults, the config file, KVMESH_* variables, flags.")
	_, _ = stdout.Write(b)
	if err := cfg.Validate(); err != nil {
		printConfigError(stderr, "kvmesh config", annotate(err, from), "kvmesh serve -h")
		return 1
	}
	return 0
}

// redactedKey marks a gossip key left out of a printed configuration: the
// file loads as it is, and serve then wants the key from KVMESH_GOSSIP_KEY
// or --gossip-key.
const redactedKey = "set, not printed: give it with KVMESH_GOSSIP_KEY or --gossip-key"
