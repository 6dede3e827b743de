package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"strings"

	"github.com/kvmesh/kvmesh/integration/bench"
)

// lbCmd runs a round-robin TCP front: kvmesh-bench lb -listen 127.0.0.1:8080 -to 127.0.0.1:9001,127.0.0.1:9002
func lbCmd(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("kvmesh-bench lb", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "127.0.0.1:8080", "address to accept connections on")
	to := fs.String("to", "", "comma-separated host:port targets, used in turn")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var targets []string
	for _, t := range strings.Split(*to, ",") {
		if t = strings.TrimSpace(t); t != "" {
			if _, _, err := net.SplitHostPort(t); err != nil {
				return fmt.Errorf("-to %q: %w", t, err)
			}
			targets = append(targets, t)
		}
	}
	lb, err := bench.NewTCPBalancer(targets)
	if err != nil {
		return fmt.Errorf("-to: %w", err)
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "kvmesh-bench lb: %s -> %s (round robin per connection)\n", ln.Addr(), strings.Join(targets, ", "))
	return lb.Serve(ctx, ln)
}
