package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvmesh/kvmesh/router"
)

func TestLoadRouterConfig(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	base := router.DefaultConfig()
	cfg, err := loadRouterConfig(write("ok.yaml", "kvmesh:\n  cache_weight: 0\n  tie_band: 0.5\n"), base)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.KVMesh.CacheWeight != 0 || cfg.KVMesh.TieBand != 0.5 {
		t.Errorf("kvmesh settings not read: %+v", cfg.KVMesh)
	}
	if cfg.KVMesh.PrefillWeight != base.KVMesh.PrefillWeight || cfg.ScrapeInterval != base.ScrapeInterval {
		t.Errorf("settings absent from the file lost their defaults: %+v", cfg.KVMesh)
	}
	if _, err := loadRouterConfig(write("typo.yaml", "kvmesh:\n  cache_wieght: 0\n"), base); err == nil || !strings.Contains(err.Error(), "cache_wieght") {
		t.Errorf("a misspelt field: err %v", err)
	}
	if _, err := loadRouterConfig(write("be.yaml", "backends: [{name: a, url: 'http://127.0.0.1:1'}]\n"), base); err == nil {
		t.Error("backends in the file were accepted")
	}
	if _, err := loadRouterConfig(filepath.Join(dir, "missing.yaml"), base); err == nil {
		t.Error("a missing file was accepted")
	}
}
