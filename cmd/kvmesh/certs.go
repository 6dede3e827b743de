package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/kvmesh/kvmesh/transport"
)

// certsCommand creates (or extends) a dev/test cluster's CA and issues node
// certificates: kvmesh certs --dir ./certs --nodes a,b,c.
func certsCommand(args []string, stdout, stderr io.Writer) int {
	flags := flag.NewFlagSet("kvmesh certs", flag.ContinueOnError)
	flags.SetOutput(stderr)
	dir := flags.String("dir", "certs", "directory for ca.pem, ca-key.pem and <node>.pem / <node>-key.pem")
	nodes := flags.String("nodes", "", "comma-separated node names to issue certificates for (required)")
	hosts := flags.String("hosts", "", "extra DNS names or IPs for the node certificates (127.0.0.1, ::1 and localhost are always included)")
	validFor := flags.Duration("valid-for", 365*24*time.Hour, "certificate lifetime")
	caName := flags.String("ca-name", "kvmesh dev CA", "the CA's common name (only used when a new CA is created)")
	flags.Usage = func() {
		fmt.Fprint(flags.Output(), "Usage: kvmesh certs --nodes a,b,c [--dir certs]\n\nCreates a CA in --dir (or reuses the one there) and issues a certificate per node.\nFor dev and test clusters: production clusters should use their own PKI.\n\n")
		printFlags(flags.Output(), flags)
	}
	if code, ok := parseFlags(flags, args, stdout, stderr); !ok {
		return code
	}
	names := list(*nodes)
	if len(names) == 0 {
		fmt.Fprintln(stderr, "kvmesh certs: --nodes is required")
		return 2
	}
	for _, n := range names {
		if err := transport.ValidNodeName(n); err != nil {
			fmt.Fprintf(stderr, "kvmesh certs: node %q: %v\n", n, err)
			return 2
		}
	}
	// The directory holds the CA's key: its owner's only, as the transport
	// makes its key directories (an existing one keeps its mode).
	if err := os.MkdirAll(*dir, 0o700); err != nil {
		fmt.Fprintf(stderr, "kvmesh certs: %v\n", err)
		return 1
	}
	ca, err := transport.ReadCAFiles(*dir)
	switch {
	case errors.Is(err, fs.ErrNotExist) && (exists(filepath.Join(*dir, transport.CACertFile)) || exists(filepath.Join(*dir, transport.CAKeyFile))):
		// One of the pair is there: a new CA would replace a certificate
		// the cluster's nodes trust (a CA key kept offline is common).
		fmt.Fprintf(stderr, "kvmesh certs: %s holds only one of %s and %s: %v; put the other back (or move both away to create a new CA)\n",
			*dir, transport.CACertFile, transport.CAKeyFile, err)
		return 1
	case err == nil:
		fmt.Fprintf(stdout, "using the CA in %s\n", *dir)
	case errors.Is(err, fs.ErrNotExist):
		if ca, err = transport.GenerateCA(*caName, *validFor); err == nil {
			err = ca.WriteFiles(*dir)
		}
		if err != nil {
			fmt.Fprintf(stderr, "kvmesh certs: creating the CA: %v\n", err)
			return 1
		}
		fmt.Fprintf(stdout, "created a CA: %s, %s\n", filepath.Join(*dir, "ca.pem"), filepath.Join(*dir, "ca-key.pem"))
	default:
		fmt.Fprintf(stderr, "kvmesh certs: reading the CA in %s: %v\n", *dir, err)
		return 1
	}
	for _, n := range names {
		files, err := ca.WriteNodeFiles(*dir, n, list(*hosts), *validFor)
		if err != nil {
			fmt.Fprintf(stderr, "kvmesh certs: node %s: %v\n", n, err)
			return 1
		}
		fmt.Fprintf(stdout, "node %s: --tls-ca %s --tls-cert %s --tls-key %s\n", n, files.CA, files.Cert, files.Key)
	}
	return 0
}

// exists says whether a file is at path (anything but "does not exist"
// counts: a file we cannot stat must not be overwritten either).
func exists(path string) bool {
	_, err := os.Stat(path)
	return !errors.Is(err, fs.ErrNotExist)
}
