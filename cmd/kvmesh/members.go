package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/kvmesh/kvmesh/mesh"
)

// membersCommand prints a running node's view of the mesh, like `serf
// members`, from its admin listener's /admin/mesh.
func membersCommand(args []string, stdout, stderr io.Writer) int {
	flags := flag.NewFlagSet("kvmesh members", flag.ContinueOnError)
	admin := flags.String("admin", envOr("KVMESH_ADMIN", "http://127.0.0.1:9090"), "the node's admin listener (env KVMESH_ADMIN)")
	asJSON := flags.Bool("json", false, "print the whole /admin/mesh document as JSON")
	timeout := flags.Duration("timeout", 5*time.Second, "request timeout")
	forceLeave := flags.String("force-leave", "", "remove the failed member NAME from the mesh at once (instead of a day later), then print the members")
	flags.Usage = func() {
		fmt.Fprint(flags.Output(), "Usage: kvmesh members [--admin URL] [--json] [--force-leave NAME]\n\nPrints a running node's view of the mesh, like `serf members`.\nWith --force-leave, first removes a failed member (one that crashed and will not\ncome back under its name) from every node's member list.\n\n")
		printFlags(flags.Output(), flags)
	}
	if code, ok := parseFlags(flags, args, stdout, stderr); !ok {
		return code
	}
	base := strings.TrimSuffix(*admin, "/")
	if !strings.Contains(base, "://") {
		base = "http://" + base
	}
	client := &http.Client{Timeout: *timeout}
	if *forceLeave != "" {
		if code := forceLeaveMember(client, base, *forceLeave, stdout, stderr); code != 0 {
			return code
		}
	}
	resp, err := client.Get(base + mesh.AdminPath)
	if err != nil {
		fmt.Fprintf(stderr, "kvmesh members: %v\n", err)
		return 1
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		fmt.Fprintf(stderr, "kvmesh members: reading %s: %v\n", base+mesh.AdminPath, err)
		return 1
	}
	if resp.StatusCode == http.StatusNotFound {
		fmt.Fprintf(stderr, "kvmesh members: %s has no mesh (is it running with --mesh?)\n", base)
		return 1
	}
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintf(stderr, "kvmesh members: %s answered %s\n", base+mesh.AdminPath, resp.Status)
		return 1
	}
	if *asJSON {
		stdout.Write(body)
		return 0
	}
	var view mesh.AdminView
	if err := json.Unmarshal(body, &view); err != nil {
		fmt.Fprintf(stderr, "kvmesh members: %s did not answer a mesh view: %v\n", base+mesh.AdminPath, err)
		return 1
	}
	if err := mesh.FormatMembers(stdout, view.Members); err != nil {
		fmt.Fprintf(stderr, "kvmesh members: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "\ntopology %s, state digest %s\n", view.Topology, view.StateDigest)
	return 0
}

// forceLeaveMember asks the node at base to force the failed member name
// out of the mesh (mesh.ForceLeavePath).
func forceLeaveMember(client *http.Client, base, name string, stdout, stderr io.Writer) int {
	u := base + "/admin/mesh/members/" + url.PathEscape(name) + "/force-leave"
	resp, err := client.Post(u, "", nil)
	if err != nil {
		fmt.Fprintf(stderr, "kvmesh members: %v\n", err)
		return 1
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode == http.StatusOK {
		fmt.Fprintf(stdout, "%s forced out of the mesh\n\n", name)
		return 0
	}
	var e struct {
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	msg := strings.TrimSpace(string(body))
	if json.Unmarshal(body, &e) == nil && e.Error.Message != "" {
		msg = e.Error.Message
	}
	if resp.StatusCode == http.StatusNotFound && e.Error.Message == "" {
		msg = "the node has no mesh (is it running with --mesh?)"
	}
	fmt.Fprintf(stderr, "kvmesh members: force-leave %s: %s (%s)\n", name, msg, resp.Status)
	return 1
}

func envOr(key, def string) string {
	if v := getenv(key); v != "" {
		return v
	}
	return def
}
