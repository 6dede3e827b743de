package mesh

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
)

// FormatMembers prints members as a table in the manner of `serf members`:
// name, gossip address, replication address, status, protocol and the
// other tags. The node the list came from is marked with '*', members it
// replicates with with '+'.
func FormatMembers(w io.Writer, members []Member) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tADDRESS\tQUIC\tSTATUS\tPROTOCOL\tTAGS")
	for _, m := range members {
		mark := " "
		switch {
		case m.Self:
			mark = "*"
		case m.Peer:
			mark = "+"
		}
		fmt.Fprintf(tw, "%s %s\t%s\t%s\t%s\t%d\t%s\n", mark, m.Name, m.Addr, orDash(m.QUICAddr), m.Status, m.Protocol, otherTags(m.Tags))
	}
	return tw.Flush()
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
