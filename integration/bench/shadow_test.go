package bench

import (
	"testing"
	"testing/synctest"

	"github.com/kvmesh/kvmesh/router"
	"github.com/kvmesh/kvmesh/tree"
)

// A shadow router that cannot be built leaves nothing running: synctest
// fails the test if a goroutine of the bubble is still blocked at its end.
func TestNewShadowRouterFailureLeaksNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rc := router.DefaultConfig()
		rc.Policy = "no-such-policy"
		if s, err := newShadowRouter(rc, tree.DefaultConfig(), false, "/v1/chat/completions"); err == nil {
			s.Close()
			t.Fatal("a shadow router with an unknown policy was built")
		}
	})
}
