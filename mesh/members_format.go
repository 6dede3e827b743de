package mesh

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
)

// FormatMembers prints members as a table in the manner of `serf members`:
// name, gossip address, replication address, status, when a peer's last
// replication message arrived (HEARD: "never" for a link that does not
// work), protocol and the other tags. The node the list came from is
// marked with '*', members it replicates with with '+' (the legend under
// the table says so); the header lines up with the names, past the mark
// column. An alive member this node cannot replicate claims with gets a
// line under the table saying why (Member.NotPeer), and one whose
// settings degrade the mesh a line saying which (Member.Warning).
func FormatMembers(w io.Writer, members []Member) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  NAME\tADDRESS\tQUIC\tSTATUS\tHEARD\tPROTOCOL\tTAGS")
	for _, m := range members {
		mark := " "
		switch {
		case m.Self:
			mark = "*"
		case m.Peer:
			mark = "+"
		}
		fmt.Fprintf(tw, "%s %s\t%s\t%s\t%s\t%s\t%d\t%s\n", mark, m.Name, m.Addr, orDash(m.QUICAddr), m.Status, heardAgo(m.HeardAgoMs), m.Protocol, otherTags(m.Tags))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, m := range members {
		if m.NotPeer != "" && m.Status == "alive" {
			if _, err := fmt.Fprintf(w, "%s is not a peer: it %s\n", m.Name, m.NotPeer); err != nil {
				return err
			}
		}
		if m.Warning != "" && m.Status == "alive" {
			if _, err := fmt.Fprintf(w, "%s %s\n", m.Name, m.Warning); err != nil {
				return err
			}
		}
	}
	_, err := fmt.Fprintln(w, MembersLegend)
	return err
}

// MembersLegend is the line under FormatMembers' table.
const MembersLegend = "(* this node, + a member it replicates claims with; HEARD: its last replication message)"

// heardAgo renders Member.HeardAgoMs.
func heardAgo(ms *int64) string {
	switch {
	case ms == nil:
		return "-"
	case *ms < 0:
		return "never"
	}
	return fmt.Sprintf("%.1fs ago", float64(*ms)/1000)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// otherTags renders the tags FormatMembers has no column for, sorted.
func otherTags(tags map[string]string) string {
	keys := make([]string, 0, len(tags))
	for k := range tags {
		if k != TagQUIC && k != TagProtocol {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return "-"
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + tags[k]
	}
	return strings.Join(parts, ",")
}
