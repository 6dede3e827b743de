package mesh

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"

	"github.com/hashicorp/serf/serf"
)

// ForceLeavePath is the admin route of ForceLeaveHandler; {name} is the
// member's name, percent-encoded.
const ForceLeavePath = "POST /admin/mesh/members/{name}/force-leave"

// ForceLeave errors: the member is not known, or it is not failed (a live
// member would refute the leave at once; one leaving goes by itself).
var (
	ErrUnknownMember    = errors.New("mesh: no member has that name")
	ErrMemberNotFailed  = errors.New("mesh: the member is not failed")
	ErrForceLeaveItself = errors.New("mesh: a node cannot force itself out")
)

// ForceLeave removes a failed member from the membership at once, mesh-
// wide, instead of leaving it listed as failed until serf's reconnect
// timeout (Membership.ReconnectTimeout, 24 h): a node that crashed and
// never comes back under its name (a pod deleted with its StatefulSet
// scaled down) otherwise keeps kvmesh_mesh_members{state="failed"} above
// zero, and the KVMeshMemberFailed alert firing, for a day. Only a failed
// member (or one already left) can be removed: its claims and load were
// dropped when it failed; a name that returns later joins as new.
func (n *Node) ForceLeave(name string) error {
	s := n.serf.Load()
	if s == nil {
		return errors.New("mesh: not started")
	}
	if name == n.cfg.Name {
		return ErrForceLeaveItself
	}
	for _, m := range s.Members() {
		if m.Name != name {
			continue
		}
		if m.Status != serf.StatusFailed && m.Status != serf.StatusLeft {
			return fmt.Errorf("%w (it is %s)", ErrMemberNotFailed, m.Status)
		}
		if err := s.RemoveFailedNodePrune(name); err != nil {
			return fmt.Errorf("mesh: force-leave %q: %w", name, err)
		}
		n.log.Info().Str("member", name).Str("was", m.Status.String()).Msg("mesh: member forced out")
		return nil
	}
	return ErrUnknownMember
}

// ForceLeaveHandler serves ForceLeavePath: 200 with {"removed": name}, 404
// for an unknown name, 409 for a member that is not failed. Cross-origin
// browser requests are refused (the admin listener has no authentication:
// a page an operator visits must not be able to post to it).
func (n *Node) ForceLeaveHandler() http.Handler {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := r.PathValue("name")
		err := n.ForceLeave(name)
		switch {
		case err == nil:
			writeAdminJSON(w, http.StatusOK, map[string]string{"removed": name})
		case errors.Is(err, ErrUnknownMember):
			writeAdminError(w, http.StatusNotFound, "member_not_found",
				fmt.Sprintf("no member is named %q (names with '/' are percent-encoded in the path: %s)", name, url.PathEscape(name)))
		case errors.Is(err, ErrMemberNotFailed), errors.Is(err, ErrForceLeaveItself):
			writeAdminError(w, http.StatusConflict, "member_not_failed", err.Error()+": only a failed member can be forced out")
		default:
			writeAdminError(w, http.StatusServiceUnavailable, "mesh_unavailable", err.Error())
		}
	})
	return http.NewCrossOriginProtection().Handler(h)
}

func writeAdminJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// writeAdminError answers in the OpenAI error shape the router's admin
// routes use.
func writeAdminError(w http.ResponseWriter, status int, code, msg string) {
	type body struct {
		Message string `json:"message"`
		Type    string `json:"type"`
		Code    string `json:"code"`
	}
	typ := "invalid_request_error"
	if status >= 500 {
		typ = "service_unavailable"
	}
	writeAdminJSON(w, status, map[string]body{"error": {Message: msg, Type: typ, Code: code}})
}
