package ui

import (
	"os"
	"os/exec"
)

// ChromiumPath finds a Chromium for the page's browser tests (this
// package's and cmd/kvmesh's): $KVMESH_CHROMIUM, else the usual names on
// PATH ("" if none). .ci/run installs Debian's chromium.
func ChromiumPath() string {
	if p := os.Getenv("KVMESH_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}
