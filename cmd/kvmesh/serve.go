package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"

	"github.com/kvmesh/kvmesh/mesh"
	"github.com/kvmesh/kvmesh/router"
	"github.com/kvmesh/kvmesh/tree"
)

func serveCommand(args []string, stdout, stderr io.Writer) int {
	cfg, err := loadServeConfig(args, os.Getenv, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(stderr, "kvmesh serve: %v\n", err)
		return 2
	}
	log := newLogger(cfg.Log, stderr, cfg.Node.Name)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := serve(ctx, cfg, log, nil); err != nil {
		log.Error().Err(err).Msg("kvmesh serve failed")
		return 1
	}
	return 0
}

// serving reports the addresses a running node listens on (tests use it to
// find ports chosen by the kernel).
type serving struct {
	API, Admin string
}

// serve runs a node until ctx is done, then shuts down gracefully: the
// node stops being ready, the API listener stops accepting and in-flight
// requests get ShutdownTimeout to finish, the node leaves the mesh, and
// everything closes. ready, if not nil, receives the listen addresses once
// the node serves.
func serve(ctx context.Context, cfg *ServeConfig, log zerolog.Logger, ready chan<- serving) error {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	ix, err := tree.New(cfg.treeConfig())
	if err != nil {
		return err
	}
	var learner router.Learner
	var node meshNode
	if cfg.Mesh.Enabled {
		node, err = newMeshNode(cfg, ix, log, reg)
		if err != nil {
			return fmt.Errorf("mesh: %w", err)
		}
		defer node.Close()
		learner = node // the mesh registers the kvmesh_index_* metrics too
	} else {
		reg.MustRegister(mesh.NewIndexCollector(ix))
	}
	rt, err := router.New(cfg.Router, router.Deps{Index: ix, Learner: learner, Logger: log, Registerer: reg})
	if err != nil {
		return err
	}
	defer rt.Close()

	apiLn, err := net.Listen("tcp", cfg.Listen.API)
	if err != nil {
		return fmt.Errorf("API listener: %w", err)
	}
	adminLn, err := net.Listen("tcp", cfg.Listen.Admin)
	if err != nil {
		apiLn.Close()
		return fmt.Errorf("admin listener: %w", err)
	}

	var draining atomic.Bool
	admin := http.NewServeMux()
	admin.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	routerAdmin := rt.AdminHandler()
	admin.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if draining.Load() {
			http.Error(w, "shutting down", http.StatusServiceUnavailable)
			return
		}
		routerAdmin.ServeHTTP(w, r)
	})
	if node != nil {
		admin.Handle("/admin/mesh", node.AdminHandler())
	}
	admin.Handle("/", routerAdmin)

	apiSrv := &http.Server{Handler: rt, ReadHeaderTimeout: cfg.Router.ReadHeaderTimeout, IdleTimeout: cfg.Router.IdleTimeout,
		ErrorLog: httpErrorLog(log, "api")}
	adminSrv := &http.Server{Handler: admin, ReadHeaderTimeout: 10 * time.Second, ErrorLog: httpErrorLog(log, "admin")}

	runCtx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := rt.Start(runCtx); err != nil {
		return err
	}
	if node != nil {
		if err := node.Start(runCtx); err != nil {
			return fmt.Errorf("mesh: %w", err)
		}
	}
	errc := make(chan error, 2)
	go func() { errc <- apiSrv.Serve(apiLn) }()
	go func() { errc <- adminSrv.Serve(adminLn) }()
	log.Info().Str("api", apiLn.Addr().String()).Str("admin", adminLn.Addr().String()).
		Int("backends", len(cfg.Router.Backends)).Str("policy", cfg.Router.Policy).Bool("mesh", node != nil).
		Str("version", version).Msg("kvmesh serving")
	if ready != nil {
		ready <- serving{API: apiLn.Addr().String(), Admin: adminLn.Addr().String()}
	}

	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-errc:
	}
	log.Info().Dur("timeout", cfg.ShutdownTimeout).Msg("shutting down: draining in-flight requests")
	draining.Store(true)
	shutCtx, shutCancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer shutCancel()
	if err := apiSrv.Shutdown(shutCtx); err != nil {
		log.Warn().Err(err).Msg("in-flight requests did not finish in time")
		apiSrv.Close()
	}
	if node != nil {
		if err := node.Leave(); err != nil {
			log.Warn().Err(err).Msg("leaving the mesh")
		}
	}
	adminSrv.Shutdown(shutCtx)
	cancel()
	log.Info().Msg("kvmesh stopped")
	if serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) {
		return serveErr
	}
	return nil
}
