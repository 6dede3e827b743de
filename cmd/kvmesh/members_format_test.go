package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/kvmesh/kvmesh/mesh"
)

// The members table explains its marks and its header lines up with the
// names, past the mark column.
func TestFormatMembersLegendAndAlignment(t *testing.T) {
	var buf bytes.Buffer
	err := mesh.FormatMembers(&buf, []mesh.Member{
		{Name: "a", Addr: "10.0.0.1:7946", QUICAddr: "10.0.0.1:7947", Status: "alive", Protocol: 1, Self: true},
		{Name: "router-b", Addr: "10.0.0.2:7946", Status: "alive", Protocol: 1, Peer: true, Tags: map[string]string{"zone": "b", mesh.TagQUIC: "x"}},
		{Name: "c", Addr: "10.0.0.3:7946", Status: "failed"},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := "" +
		"  NAME      ADDRESS        QUIC           STATUS  PROTOCOL  TAGS\n" +
		"* a         10.0.0.1:7946  10.0.0.1:7947  alive   1         -\n" +
		"+ router-b  10.0.0.2:7946  -              alive   1         zone=b\n" +
		"  c         10.0.0.3:7946  -              failed  0         -\n" +
		"(* this node, + a member it replicates claims with)\n"
	if buf.String() != want {
		t.Errorf("got:\n%s\nwant:\n%s", buf.String(), want)
	}
	lines := strings.Split(buf.String(), "\n")
	if strings.Index(lines[0], "NAME") != strings.Index(lines[2], "router-b") {
		t.Errorf("header misaligned:\n%s", buf.String())
	}
}
