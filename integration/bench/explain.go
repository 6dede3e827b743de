package bench

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/kvmesh/kvmesh/router"
)

// HolderView is what a router node thought, just before a request was
// sent, of the backend that really held the most of its prompt
// (Sample.AvailableAt), from its POST /debug/route explanation. Where a
// request recomputed what that backend held, it says why: no claim there
// (Matched and Doubted 0), a claim past the edge of what the router
// believes the cache keeps (Doubted), one an answer showed lost (Lost), or
// a claim outweighed by load (Cost above ChosenCost).
type HolderView struct {
	// Chosen is the backend the explanation chose; the request itself may
	// go elsewhere (the router's state moves between the two).
	Chosen string `json:"chosen"`
	// Deepest is the deepest trusted match among all candidates, in blocks.
	Deepest int `json:"deepest_blocks"`
	// Matched is the holder's trusted match in blocks, Doubted the depth
	// of a deeper claim past its cache's edge (0: none), Discount the share
	// of the match doubted, Lost whether an answer showed it gone.
	Matched int `json:"matched_blocks"`
	Doubted int `json:"doubted_blocks,omitempty"`
	// DoubtedBeyond is how many capacities were written to the holder
	// since its doubted claim was last used; ChosenDoubted and
	// ChosenDoubtedBeyond the same of Chosen's doubted claim (0: none).
	DoubtedBeyond       float64 `json:"doubted_beyond,omitempty"`
	Near                int     `json:"near_blocks,omitempty"` // the deepest doubted claim near the edge (belief.doubt_near)
	ChosenDoubted       int     `json:"chosen_doubted_blocks,omitempty"`
	ChosenDoubtedBeyond float64 `json:"chosen_doubted_beyond,omitempty"`
	// ChosenMatched is Chosen's trusted match in blocks and ChosenBeyond
	// how many capacities were written there since its claim was last
	// used: with the answer's cached tokens, what a trusted claim at that
	// distance held.
	ChosenMatched int     `json:"chosen_matched_blocks,omitempty"`
	ChosenBeyond  float64 `json:"chosen_beyond,omitempty"`
	Discount      float64 `json:"discount,omitempty"`
	Lost          bool    `json:"lost,omitempty"`
	// Cost and ChosenCost are the policy's scores of the holder and of
	// Chosen (kvmesh: cost, lower is better).
	Cost       float64 `json:"cost"`
	ChosenCost float64 `json:"chosen_cost"`
	// Units is the prompt's length in the router's units (bytes in byte
	// mode): Units over the answer's prompt tokens converts the units below
	// to tokens.
	Units int `json:"units"`
	// FleetLoad is the fleet's load over time as the policy's gates read
	// it (fleet_load_prompts in /debug/route; 0 when no gate reads it).
	FleetLoad float64 `json:"fleet_load_prompts,omitempty"`
	// Candidates is the same explanation's view of every candidate, beside
	// what the simulator says each held of the prompt as it was sent:
	// where the router's knowledge of the fleet and the truth part, and
	// what else (load, a doubted claim's worth) made the choice.
	Candidates []CandidateView `json:"candidates,omitempty"`
}

// CandidateView is one candidate in a HolderView.
type CandidateView struct {
	Backend string `json:"backend"`
	// HeldTokens is what the backend held of the prompt (the simulator's
	// CachedPrefix), -1 when it could not say.
	HeldTokens int `json:"held_tokens"`
	// MatchedUnits is the router's trusted match there, DoubtedBlocks the
	// depth of a deeper claim past its cache's edge (0: none).
	MatchedUnits  int `json:"matched_units"`
	DoubtedBlocks int `json:"doubted_blocks,omitempty"`
	// DoubtWorth and NearWorth are what the router priced a block of the
	// doubted claim and of the near claim at (0: none).
	DoubtWorth float64 `json:"doubt_worth,omitempty"`
	NearWorth  float64 `json:"near_worth,omitempty"`
	// Score is the policy's score, PendingUnits the prefill this router had
	// queued there.
	Score        float64 `json:"score"`
	PendingUnits float64 `json:"pending_units"`
}

// explainAt returns a ReplayConfig.Explain that asks the router node a
// request is sent to (its URL ends in path) for its decision on the body,
// and keeps its view of holder, and of every candidate with what fleet
// (nil: not asked) says each holds. It returns nil when the node cannot
// explain (not a kvmesh router node, or an error): the sample just lacks
// the view. It costs the node one routing decision per request.
func explainAt(c *http.Client, path string, fleet *OracleView) func(url string, body []byte, holder string) *HolderView {
	query := "/debug/route?endpoint=" + url.QueryEscape(path)
	return func(u string, body []byte, holder string) *HolderView {
		resp, err := c.Post(strings.TrimSuffix(u, path)+query, "application/json", bytes.NewReader(body))
		if err != nil {
			return nil
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return nil
		}
		v, err := decodeHolderView(resp.Body, holder)
		if err != nil {
			return nil
		}
		if v != nil && fleet != nil {
			heldBy(fleet, path, body, v.Candidates)
		}
		return v
	}
}

// decodeHolderView reads a /debug/route explanation from r and returns
// holder's view of it (see holderView; nil without an error when holder
// is not a candidate).
func decodeHolderView(r io.Reader, holder string) (*HolderView, error) {
	var ex router.RouteExplanation
	if err := json.NewDecoder(r).Decode(&ex); err != nil {
		return nil, err
	}
	return holderView(&ex, holder), nil
}

// heldBy fills each candidate's HeldTokens from fleet, whose backends are
// named BackendName(i).
func heldBy(fleet *OracleView, path string, body []byte, cands []CandidateView) {
	m := newPromptMatch(body, path)
	defer m.release()
	for i := range cands {
		cands[i].HeldTokens = -1
		for j, b := range fleet.Backends {
			if BackendName(j) == cands[i].Backend {
				if held, _, err := m.at(b); err == nil {
					cands[i].HeldTokens = held
				}
				break // names are unique
			}
		}
	}
}

// holderView extracts holder's view from an explanation (nil when holder
// is not among its candidates; with holder "", no backend held any of the
// prompt, the view of Chosen and the candidates alone).
func holderView(ex *router.RouteExplanation, holder string) *HolderView {
	v := &HolderView{Chosen: ex.Chosen, Deepest: ex.Deepest, Units: ex.Units, Candidates: make([]CandidateView, len(ex.Candidates))}
	if ex.FleetLoad != nil {
		v.FleetLoad = *ex.FleetLoad
	}
	found := false
	for i := range ex.Candidates {
		c := &ex.Candidates[i]
		v.Candidates[i] = CandidateView{Backend: c.Backend, HeldTokens: -1, MatchedUnits: c.MatchedUnits,
			DoubtedBlocks: c.DoubtedBlocks, DoubtWorth: c.DoubtWorth, NearWorth: c.NearWorth, Score: c.Score, PendingUnits: c.Load.PendingPrefillUnits}
		if c.Chosen {
			v.ChosenCost, v.ChosenDoubted, v.ChosenDoubtedBeyond = c.Score, c.DoubtedBlocks, c.DoubtedBeyond
			v.ChosenMatched, v.ChosenBeyond = c.MatchedBlocks, c.Beyond
		}
		if c.Backend == holder {
			found = true
			v.Matched, v.Doubted, v.Discount, v.Lost, v.Cost = c.MatchedBlocks, c.DoubtedBlocks, c.Discount, c.Lost, c.Score
			v.DoubtedBeyond, v.Near = c.DoubtedBeyond, c.NearBlocks
		}
	}
	if !found && holder != "" {
		return nil
	}
	return v
}
