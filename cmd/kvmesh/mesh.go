package main

import (
	"context"
	"errors"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/kvmesh/kvmesh/router"
	"github.com/kvmesh/kvmesh/tree"
)

// meshNode is what serve needs of a mesh node.
type meshNode interface {
	router.Learner
	Start(ctx context.Context) error
	Leave() error
	Close() error
	AdminHandler() http.Handler
}

func newMeshNode(cfg *ServeConfig, ix *tree.Index, log zerolog.Logger, reg prometheus.Registerer) (meshNode, error) {
	return nil, errors.New("not wired yet")
}
