package mesh

import (
	"encoding/base64"
	"testing"
	"time"
)

// Gossip goes uncompressed by default (Config.GossipCompression), and a
// node that compresses (as releases before it did) still gossips with
// nodes that do not: memberlist decodes both forms whatever its own
// setting. The join (a state exchange) and the probes cross between the
// two kinds, in the clear and encrypted with a gossip key (memberlist
// decrypts before it looks for compression).
func TestGossipCompressionMixes(t *testing.T) {
	for _, keyed := range []bool{false, true} {
		name := "clear"
		if keyed {
			name = "gossip key"
		}
		t.Run(name, func(t *testing.T) {
			c := newTestCluster(t, func(cfg *Config) {
				cfg.GossipCompression = cfg.Name == "n00"
				if keyed {
					cfg.GossipKey = base64.StdEncoding.EncodeToString([]byte("0123456789abcdef0123456789abcdef"))
				}
			})
			c.startN(3)
			c.waitMesh(time.Minute)
			c.kill("n02")
			n0, n1 := c.node("n00"), c.node("n01")
			waitFor(t, time.Minute, "n02 to be seen failed", func() bool {
				return statusOf(n0, "n02") == "failed" && statusOf(n1, "n02") == "failed"
			})
			if st := c.mnet.Stats(); !keyed && st.Compressed == 0 {
				t.Fatalf("no compressed packet or stream crossed the network (%d packets, %d streams): n00 compresses", st.Packets, st.Dials)
			}
		})
	}
}

func TestGossipUncompressedByDefault(t *testing.T) {
	if DefaultConfig().GossipCompression {
		t.Fatal("DefaultConfig compresses gossip")
	}
	c := newTestCluster(t, nil)
	c.startN(2)
	c.waitMesh(time.Minute)
	waitFor(t, time.Minute, "a probe", func() bool { return c.mnet.Stats().Packets > 0 })
	if st := c.mnet.Stats(); st.Compressed != 0 || st.Dials == 0 {
		t.Fatalf("%d packets or streams compressed (%d packets, %d streams), want none of some", st.Compressed, st.Packets, st.Dials)
	}
}
