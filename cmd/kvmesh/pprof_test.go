package main

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// Profiles are served on the admin listener only with --admin-pprof; off,
// the path says how to turn them on; the command line (which may hold the
// gossip key) is never served.
func TestAdminPprof(t *testing.T) {
	be := fakeBackend(t, 0)
	off, cancelOff, doneOff := startServe(t, "--backends", "b1="+be.URL)
	defer func() { cancelOff(); <-doneOff }()
	code, body := getStatus(t, "http://"+off.Admin+"/debug/pprof/goroutine?debug=1")
	var e struct {
		Error struct{ Code, Message string }
	}
	if err := json.Unmarshal([]byte(body), &e); code != http.StatusNotFound || err != nil || e.Error.Code != "pprof_off" || !strings.Contains(e.Error.Message, "--admin-pprof") {
		t.Errorf("profiling off: %d %s, want a JSON 404 pprof_off naming --admin-pprof", code, body)
	}

	on, cancelOn, doneOn := startServe(t, "--backends", "b1="+be.URL, "--admin-pprof")
	defer func() { cancelOn(); <-doneOn }()
	if code, body := getStatus(t, "http://"+on.Admin+"/debug/pprof/goroutine?debug=1"); code != http.StatusOK || !strings.Contains(body, "goroutine profile:") {
		t.Errorf("goroutine dump: %d %.200s", code, body)
	}
	if code, body := getStatus(t, "http://"+on.Admin+"/debug/pprof/"); code != http.StatusOK || !strings.Contains(body, "heap") {
		t.Errorf("pprof index: %d %.200s", code, body)
	}
	if code, body := getStatus(t, "http://"+on.Admin+"/debug/pprof/cmdline"); code != http.StatusNotFound || !strings.Contains(body, "not_served") {
		t.Errorf("cmdline served: %d %.200s", code, body)
	}
	for _, q := range []string{"profile?seconds=86400", "trace?seconds=0", "profile?seconds=x"} {
		if code, body := getStatus(t, "http://"+on.Admin+"/debug/pprof/"+q); code != http.StatusBadRequest || !strings.Contains(body, "seconds must be") {
			t.Errorf("%s: %d %.200s, want a 400 naming the bound", q, code, body)
		}
	}
	if code, _ := getStatus(t, "http://"+on.API+"/debug/pprof/"); code == http.StatusOK {
		t.Error("the API listener serves profiles")
	}
}
