package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvmesh/kvmesh/integration/bench"
	"github.com/kvmesh/kvmesh/router"
	"github.com/kvmesh/kvmesh/tree"
)

// routerCmd runs one bare kvmesh router node (no mesh) as its own process:
// the raw-proxy comparison's kvmesh, and a stand-in until `kvmesh serve`
// exists. API, admin endpoints and /metrics share one listener.
func routerCmd(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("kvmesh-bench router", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "127.0.0.1:9000", "address to serve on")
	backends := fs.String("backends", "", "comma-separated backend base URLs (named b0, b1, ... in order)")
	policy := fs.String("policy", router.PolicyKVMesh, "policy: "+strings.Join(router.PolicyNames(), ", "))
	models := fs.String("models", "kvmesh-sim", "comma-separated model names the backends serve")
	timeScale := fs.Float64("time-scale", 1, "divide the router's backend-related durations by this (match kvmesh-sim -time-scale)")
	logLevel := fs.String("log-level", "info", "log level")
	if err := fs.Parse(args); err != nil {
		return err
	}
	log, err := newLogger(*logLevel, stderr)
	if err != nil {
		return err
	}
	cfg := bench.DefaultConfig()
	cfg.Models = strings.Split(*models, ",")
	cfg.TimeScale = *timeScale
	var urls []string
	for _, u := range strings.Split(*backends, ",") {
		if u = strings.TrimSpace(u); u != "" {
			urls = append(urls, u)
		}
	}
	if len(urls) == 0 {
		return errors.New("-backends is required")
	}
	rc, tc := nodeConfig(&cfg, *policy, urls)
	ix, err := tree.New(tc)
	if err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	rt, err := router.New(rc, router.Deps{Index: ix, Logger: log, Registerer: reg})
	if err != nil {
		return err
	}
	defer rt.Close()
	if err := rt.Start(ctx); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: bench.NodeMux(rt, rt.AdminHandler(), reg), ReadHeaderTimeout: rc.ReadHeaderTimeout, IdleTimeout: rc.IdleTimeout}
	log.Info().Str("listen", ln.Addr().String()).Str("policy", *policy).Int("backends", len(urls)).Msg("kvmesh-bench router serving")
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serving: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return srv.Shutdown(sctx)
}

// nodeConfig is the router and index configuration of a node of cfg's
// in-process arms for policy over urls, durations on cfg's clock: the
// index's from bench.TreeConfig, not cfg.Tree, whose claim refresh slack
// would stay on the wall clock.
func nodeConfig(cfg *bench.Config, policy string, urls []string) (router.Config, tree.Config) {
	return bench.RouterConfig(cfg, policy, urls), bench.TreeConfig(cfg)
}
