package mesh

import (
	"testing"
	"time"
)

// A peer removed because it stopped answering gossip is named as failed, at
// warn level, on the nodes that saw it go; one that left gracefully is
// named as left, at info level. "removed" alone reads the same for a
// crash, a graceful leave and a topology change, and serf's own lines about
// a failure are at debug level: an operator reading the log at info could
// not tell that a node had crashed.
func TestPeersChangedNamesFailedAndLeftPeers(t *testing.T) {
	c := newTestCluster(t, nil)
	logs := &lockedBuffer{}
	c.logs = logs
	c.startN(4)
	c.waitMesh(time.Minute)

	if err := c.node("n03").n.Leave(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Minute, "n00 to drop n03, which left", func() bool {
		return logs.count(`"node":"n00"`, `"removed":["n03"]`, "mesh: peers changed") > 0
	})
	if k := logs.count(`"node":"n00"`, `"level":"info"`, `"removed":["n03"]`, `"left":["n03"]`, "mesh: peers changed"); k != 1 {
		t.Fatalf("n03 left: %d info lines naming it as left, want 1:\n%s", k, logs.String())
	}

	c.kill("n02")
	waitFor(t, time.Minute, "n00 to drop n02, which crashed", func() bool {
		return logs.count(`"node":"n00"`, `"removed":["n02"]`, "mesh: peers changed") > 0
	})
	if k := logs.count(`"node":"n00"`, `"level":"warn"`, `"removed":["n02"]`, `"failed":["n02"]`, "mesh: peers changed"); k != 1 {
		t.Fatalf("n02 crashed: %d warn lines naming it as failed, want 1:\n%s", k, logs.String())
	}
}
