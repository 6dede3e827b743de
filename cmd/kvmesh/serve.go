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
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"
	"golang.org/x/net/netutil"

	"github.com/kvmesh/kvmesh/cmd/kvmesh/ui"
	"github.com/kvmesh/kvmesh/mesh"
	"github.com/kvmesh/kvmesh/router"
	"github.com/kvmesh/kvmesh/tree"
)

func serveCommand(args []string, stdout, stderr io.Writer) int {
	// SIGHUP for the whole life of serve, from before the configuration is
	// read: it reloads the backends while the node serves and is ignored
	// while it starts or stops (not subscribed, it would kill the process).
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	cfg, err := loadServeConfig(args, os.Getenv, stdout)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		printConfigError(stderr, "kvmesh serve", err, "kvmesh serve -h")
		return 2
	}
	log := newLogger(cfg.Log, stderr)
	// The first SIGTERM or interrupt starts the graceful shutdown; a second
	// one skips what is left of the drain delay.
	signals := make(chan os.Signal, 2)
	signal.Notify(signals, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(signals)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	ready := make(chan serving, 1)
	go func() {
		<-signals
		stop()
		s := <-ready
		<-signals
		s.hurry()
		// A third signal is Go's default again: it ends the process (an
		// operator's third Ctrl-C during a long shutdown is not swallowed).
		signal.Stop(signals)
	}()
	if err := serveSignals(ctx, cfg, log, ready, hup); err != nil {
		log.Error().Str("node", cfg.Node.Name).Err(err).Msg("kvmesh serve failed")
		return 1
	}
	return 0
}

// printConfigError reports a configuration error, one problem per line.
func printConfigError(w io.Writer, cmd string, err error, help string) {
	lines := strings.Split(err.Error(), "\n")
	if len(lines) == 1 {
		fmt.Fprintf(w, "%s: %s\n", cmd, lines[0])
	} else {
		fmt.Fprintf(w, "%s: %d problems:\n", cmd, len(lines))
		for _, l := range lines {
			fmt.Fprintf(w, "  %s\n", l)
		}
	}
	fmt.Fprintf(w, "Run '%s' for the flags.\n", help)
}

// serving reports the addresses a running node listens on (tests use it to
// find ports chosen by the kernel) and ends the drain delay early.
type serving struct {
	API, Admin string
	hurry      func() // ends the drain delay at once (a second signal)
}

// Limits of the admin listener, which serves operators and Prometheus,
// not clients: 30 s reads a /debug/route body of max_body_bytes over any
// network; idle connections (a scraper's keep-alive) close after 2 min; 256
// connections is far more than its few users open.
const (
	adminReadTimeout    = 30 * time.Second
	adminIdleTimeout    = 2 * time.Minute
	adminMaxConnections = 256
)

// adminWriteTimeout bounds the time from a request's headers to the end of
// its answer on the admin listener: the largest answers (/metrics,
// /admin/mesh of a big mesh, a goroutine dump) take well under a second
// on any network, and a client that reads slower is cut off, so a few
// hundred stalled readers cannot hold every connection the listener
// allows, and with them /readyz and the scrapes. A CPU profile or a trace
// gets its ?seconds= on top (net/http/pprof extends the deadline). A
// variable for the tests.
var adminWriteTimeout = time.Minute

// newAdminServer is the admin listener's server, with the limits above.
func newAdminServer(h http.Handler, log zerolog.Logger) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: adminReadTimeout,
		WriteTimeout: adminWriteTimeout, IdleTimeout: adminIdleTimeout, ErrorLog: httpErrorLog(log, "admin")}
}

// serve runs a node until ctx is done, then shuts down gracefully: the
// node stops being ready, the API listener keeps accepting for DrainDelay
// (so balancers see it leave first), then stops accepting and in-flight
// requests get ShutdownTimeout to finish, the node leaves the mesh, and
// everything closes. ready, if not nil, receives the listen addresses once
// the node serves. A SIGHUP reloads the backend list while the node serves
// and is ignored while it starts or stops.
func serve(ctx context.Context, cfg *ServeConfig, log zerolog.Logger, ready chan<- serving) error {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	return serveSignals(ctx, cfg, log, ready, hup)
}

// serveSignals is serve with the SIGHUP subscription of its caller, who
// keeps it for at least as long.
func serveSignals(ctx context.Context, cfg *ServeConfig, log zerolog.Logger, ready chan<- serving, hup <-chan os.Signal) error {
	meshLog := log // the mesh and its transport name the node themselves
	log = log.With().Str("node", cfg.Node.Name).Logger()
	reloads, stopReloads := handleReloads(hup, cfg, log)
	defer stopReloads() // last: a SIGHUP is handled until serve returns
	for _, w := range cfg.warnings() {
		log.Warn().Msg(w)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	reg.MustRegister(reloads.collectors()...)

	ix, err := tree.New(cfg.treeConfig())
	if err != nil {
		return err
	}
	var state *stateStore
	if cfg.StateDir != "" {
		// Loaded before the router registers its backends and before the
		// mesh joins: peers then get the restored claims in the full-state
		// exchange a new incarnation starts.
		maxTTL := cfg.maxClaimTTL()
		if state, err = newStateStore(cfg.StateDir, cfg.StateInterval, maxTTL, ix, log, reg); err != nil {
			return err
		}
		defer state.close() // after the final save below
		state.restore()
	}
	var learner router.Learner
	var peers router.PeerLoad
	var node meshNode
	if cfg.Mesh.Enabled {
		node, err = newMeshNode(cfg, ix, meshLog, reg)
		if err != nil {
			return fmt.Errorf("mesh: %w", err)
		}
		defer node.Close()
		learner, peers = node, node // the mesh registers the kvmesh_index_* metrics too
	} else {
		reg.MustRegister(mesh.NewIndexCollector(ix))
		forgetCtx, stopForget := context.WithCancel(context.Background())
		defer stopForget()
		go forgetRemovedLoop(forgetCtx, ix, log) // a mesh node does it with its sweep
	}
	var local *router.LocalLearner
	if node == nil && cfg.Precise.enabled() {
		local = router.NewLocalLearner(ix, "local") // the router's and the events' (what New would make)
		learner = local
	}
	tp, stopTracing, err := startTracing(cfg, log)
	if err != nil {
		return err
	}
	defer stopTracing() // last: flushes the spans of the requests drained below
	disc, err := discoverer(cfg, log)
	if err != nil {
		return fmt.Errorf("discovery: %w", err)
	}
	rt, err := router.New(cfg.Router, router.Deps{Discoverer: disc, Index: ix, Learner: learner, Peers: peers, Logger: log, Registerer: reg,
		Precise: cfg.Precise.routerConfig(), TracerProvider: tp})
	if err != nil {
		return err
	}
	if node != nil {
		node.SetLoadSource(rt) // the load channel tells the peers what this node booked
	}
	defer rt.Close()

	apiLn, err := net.Listen("tcp", cfg.Listen.API)
	if err != nil {
		return fmt.Errorf("API listener: %w", err)
	}
	defer apiLn.Close() // on an error return; a no-op after the server's Shutdown
	adminLn, err := net.Listen("tcp", cfg.Listen.Admin)
	if err != nil {
		return fmt.Errorf("admin listener: %w", err)
	}
	defer adminLn.Close()
	apiAddr, adminAddr := apiLn.Addr().String(), adminLn.Addr().String()
	if n := cfg.Router.MaxConnections; n > 0 {
		apiLn = netutil.LimitListener(apiLn, n) // past n, connections wait in the accept queue
	}
	adminLn = netutil.LimitListener(adminLn, adminMaxConnections)

	var draining atomic.Bool
	admin := http.NewServeMux()
	admin.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	routerAdmin := rt.AdminHandler()
	admin.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if draining.Load() { // JSON, as the router's own answers are
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`{"status":"shutting down"}` + "\n"))
			return
		}
		routerAdmin.ServeHTTP(w, r)
	})
	if node != nil {
		admin.Handle("/admin/mesh", node.AdminHandler())
		admin.Handle(mesh.ForceLeavePath, node.ForceLeaveHandler())
	} else {
		admin.HandleFunc("/admin/mesh", func(w http.ResponseWriter, r *http.Request) {
			e := router.NewAPIError(http.StatusNotFound, "", "this node runs alone, without a mesh (start it with --mesh to join one)")
			e.Code = "no_mesh"
			e.WriteTo(w)
		})
	}
	statusPage := ui.Deps{Node: cfg.Node.Name, Version: version, TenantHeader: cfg.Router.TenantHeader, SignalMaxAge: cfg.Router.SignalMaxAge, Router: rt, Index: ix, Logger: log}
	if m, ok := node.(ui.MeshStatus); ok {
		statusPage.Mesh = m
	}
	ui.New(statusPage).Mount(admin) // GET /ui: the live status page
	mountPprof(admin, cfg.Listen.AdminPprof)
	admin.Handle("/", routerAdmin)

	apiSrv := &http.Server{Handler: rt, ReadHeaderTimeout: cfg.Router.ReadHeaderTimeout, IdleTimeout: cfg.Router.IdleTimeout,
		ErrorLog: httpErrorLog(log, "api")}
	adminSrv := newAdminServer(admin, log)

	runCtx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := rt.Start(runCtx); err != nil {
		return err
	}
	reloads.open(rt) // SIGHUP: the config file's backend list again
	defer reloads.close()
	leave := func() {} // leaves the mesh gracefully, once
	if node != nil {
		if err := node.Start(runCtx); err != nil {
			return fmt.Errorf("mesh: %w", err)
		}
		leave = sync.OnceFunc(func() {
			if err := node.Leave(); err != nil {
				log.Warn().Err(err).Msg("leaving the mesh")
			}
		})
		defer leave() // on an error return: members see the node leave, not fail
	}
	if cfg.Precise.enabled() {
		sink, members := preciseSink(node, local)
		if cfg.Precise.evictions() {
			if sink, err = evictionSink(rt, node); err != nil {
				return err
			}
			if node != nil {
				log.Info().Msg("precise: mode evictions on a mesh: each node replicates about twice approximate mode's claims (the links' own claims and their ends); give the nodes the CPU for it (docs/precise.md, \"On a mesh\")")
			}
		}
		stopPrecise, err := startPrecise(runCtx, cfg, ix, sink, members, log, reg)
		if err != nil {
			return fmt.Errorf("precise: %w", err)
		}
		defer stopPrecise()
	}
	stopSnapshots := func() {}
	if state != nil {
		stopSnapshots = state.start(runCtx)
		defer stopSnapshots()
	}
	errc := make(chan error, 2)
	go func() { errc <- apiSrv.Serve(apiLn) }()
	go func() { errc <- adminSrv.Serve(adminLn) }()
	log.Info().Str("api", apiAddr).Str("admin", adminAddr).
		Int("backends", len(cfg.Router.Backends)).Str("discovery", cfg.Router.Discovery.Mode).Str("policy", cfg.Router.Policy).Bool("mesh", node != nil).
		Str("version", version).Msg("kvmesh serving")
	hurry := make(chan struct{})
	var hurryOnce sync.Once
	if ready != nil {
		ready <- serving{API: apiAddr, Admin: adminAddr, hurry: func() { hurryOnce.Do(func() { close(hurry) }) }}
	}

	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-errc:
	}
	draining.Store(true)
	reloads.close() // stopping: a SIGHUP from here on is ignored
	if serveErr == nil && cfg.DrainDelay > 0 {
		log.Info().Stringer("drain_delay", cfg.DrainDelay).Msg("shutting down: /readyz fails; the API listener closes after the drain delay (a second signal skips it)")
		delay := time.NewTimer(cfg.DrainDelay)
		select {
		case <-delay.C:
		case <-hurry:
			delay.Stop()
		case serveErr = <-errc:
			delay.Stop()
		}
	}
	log.Info().Stringer("timeout", cfg.ShutdownTimeout).Msg("shutting down: the API listener is closed; draining in-flight requests")
	shutCtx, shutCancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer shutCancel()
	if err := apiSrv.Shutdown(shutCtx); err != nil {
		log.Warn().Err(err).Msg("in-flight requests did not finish in time")
		apiSrv.Close()
	}
	if state != nil {
		stopSnapshots()  // the periodic writes end before the final one
		_ = state.save() // after the last requests confirmed their claims
	}
	leave()
	// Its own short bound: the API drain may have used up shutCtx, and the
	// admin handlers must be done before the router and the node close.
	adminCtx, adminDone := context.WithTimeout(context.Background(), 5*time.Second)
	if err := adminSrv.Shutdown(adminCtx); err != nil {
		adminSrv.Close()
	}
	adminDone()
	cancel()
	log.Info().Msg("kvmesh stopped")
	if serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) {
		return serveErr
	}
	return nil
}

// forgetRemovedInterval is how often a node without a mesh frees the
// registry ids of backends removed before the forget horizon (a mesh node
// does it with its sweep, mesh.Config.SweepInterval).
const forgetRemovedInterval = 30 * time.Second

// forgetRemovedLoop runs tree.Index.ForgetRemoved every
// forgetRemovedInterval until ctx ends.
func forgetRemovedLoop(ctx context.Context, ix *tree.Index, log zerolog.Logger) {
	t := time.NewTicker(forgetRemovedInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			if freed := ix.ForgetRemoved(now.UnixMilli(), nil); len(freed) > 0 {
				log.Info().Int("forgotten", len(freed)).Msg("freed the registry ids of backends removed before index.forget_removed")
			}
		}
	}
}
