package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/kvmesh/kvmesh/mesh"
	"github.com/kvmesh/kvmesh/router"
	"github.com/kvmesh/kvmesh/transport"
	"github.com/kvmesh/kvmesh/tree"
)

// meshNode is what serve needs of a mesh node (*mesh.Node).
type meshNode interface {
	router.Learner
	router.PeerLoad
	SetLoadSource(mesh.LoadSource)
	Start(ctx context.Context) error
	Leave() error
	Close() error
	AdminHandler() http.Handler
	// ForceLeaveHandler serves mesh.ForceLeavePath (`kvmesh members
	// --force-leave`).
	ForceLeaveHandler() http.Handler
	// End and AliveMembers serve precise mode: the node is the sink of
	// the KV events of the streams it owns among the alive members.
	End(keys []tree.Key, backend tree.BackendID)
	AliveMembers() []string
	// OnEnded serves evictions mode: the tombstones peers send are handed
	// to the router's EndLinked.
	OnEnded(fn mesh.EndedFunc)
}

// newMeshNode builds the QUIC transport (mutual TLS with the cluster CA)
// and the mesh node over the claim index.
func newMeshNode(cfg *ServeConfig, ix *tree.Index, log zerolog.Logger, reg prometheus.Registerer) (meshNode, error) {
	tlsCfg, err := transport.TLSConfigFromFiles(cfg.Mesh.TLSCA, cfg.Mesh.TLSCert, cfg.Mesh.TLSKey)
	if err != nil {
		return nil, fmt.Errorf("TLS: %w", err)
	}
	tc := transport.DefaultConfig()
	tc.ListenAddr = cfg.Mesh.QUIC
	tc.AdvertiseAddr = cfg.Mesh.QUICAdvertise
	tc.NodeName = cfg.Node.Name
	tc.TLS = tlsCfg
	tc.Logger = log // the transport and the mesh name their component themselves
	tc.Registerer = reg
	q, err := transport.NewQUIC(tc)
	if err != nil {
		return nil, fmt.Errorf("QUIC listener %s: %w", cfg.Mesh.QUIC, err)
	}

	mc := mesh.DefaultConfig()
	mc.Name = cfg.Node.Name
	mc.Seeds = cfg.Mesh.Join
	if mc.BindAddr, mc.BindPort, err = hostPort(cfg.Mesh.Bind, "0.0.0.0"); err != nil {
		q.Close()
		return nil, fmt.Errorf("bind: %w", err)
	}
	if cfg.Mesh.Advertise != "" {
		if mc.AdvertiseAddr, mc.AdvertisePort, err = hostPort(cfg.Mesh.Advertise, ""); err != nil {
			q.Close()
			return nil, fmt.Errorf("advertise: %w", err)
		}
	}
	mc.QUICAdvertiseAddr = cfg.Mesh.QUICAdvertise
	mc.GossipKey = cfg.Mesh.GossipKey
	mc.DevMode = cfg.Mesh.Dev
	mc.ShareLostMarks = cfg.Mesh.ShareLostMarks
	mc.GossipCompression = cfg.Mesh.GossipCompression
	mc.PreciseStreams = cfg.Precise.digest(cfg.Router.Backends)
	cfg.Mesh.applyTimes(&mc)
	// No claim lives longer than the router's longest TTL: peers cap what
	// they receive to it and ignore eviction floors beyond it.
	mc.Replica.MaxTTL = cfg.maxClaimTTL()
	node, err := mesh.New(mc, mesh.Deps{Index: ix, Transport: q, Logger: log, Registerer: reg})
	if err != nil {
		q.Close()
		return nil, err
	}
	return node, nil
}

func hostPort(addr, defaultHost string) (string, int, error) {
	h, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 0 || port > 65535 {
		return "", 0, fmt.Errorf("bad port in %q", addr)
	}
	if h == "" {
		h = defaultHost
	}
	return h, port, nil
}

// The router is everything the mesh's load channel reads and feeds: its
// bookings, its lessons, its lost marks, its answers and routed prompts.
var (
	_ mesh.LessonSource = (*router.Router)(nil)
	_ mesh.LostSource   = (*router.Router)(nil)
	_ mesh.AnswerSource = (*router.Router)(nil)
	_ mesh.PromptSource = (*router.Router)(nil)
)
