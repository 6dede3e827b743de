package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"

	"go.yaml.in/yaml/v3"

	"github.com/kvmesh/kvmesh/router"
)

// loadRouterConfig reads router settings from a YAML file over base (the
// bench's defaults): the arms then run with them. Unknown fields are an
// error, so a misspelt weight does not silently measure the defaults.
func loadRouterConfig(path string, base router.Config) (router.Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return base, fmt.Errorf("-router-config: %w", err)
	}
	return decodeRouterConfig(b, path, base)
}

// decodeRouterConfig is loadRouterConfig on the file's bytes b (path only
// names it in errors).
func decodeRouterConfig(b []byte, path string, base router.Config) (router.Config, error) {
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	cfg := base
	if err := dec.Decode(&cfg); err != nil && !errors.Is(err, io.EOF) {
		return base, fmt.Errorf("-router-config %s: %w", path, err)
	}
	if len(cfg.Backends) > 0 {
		return base, fmt.Errorf("-router-config %s: backends are the bench's simulated fleet; remove them", path)
	}
	return cfg, nil
}
