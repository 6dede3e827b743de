package sim

import (
	"encoding/json"
	"hash/fnv"
	"math"
	"net/http"
	"slices"
)

// embeddingDims is the length of the simulated embeddings.
const embeddingDims = 8

// handleEmbeddings serves POST /v1/embeddings as a pooling vLLM does, so
// the router's embeddings endpoint can be tried against the simulator: an
// input (a string, a list of strings, token ids or lists of token ids)
// answers one vector per item, derived from its content (equal inputs,
// equal vectors), with its token count in the usage. It computes at once:
// no queue, no cache (vLLM's pooling models do not cache prefixes either).
func (in *Instance) handleEmbeddings(w http.ResponseWriter, r *http.Request) {
	body, aerr := readBody(w, r, in.cfg.MaxBodyBytes)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	var req struct {
		Model string          `json:"model"`
		Input json.RawMessage `json:"input"`
	}
	err := json.Unmarshal(body.Bytes(), &req)
	putBody(body)
	if err != nil {
		writeError(w, &apiError{status: http.StatusBadRequest, typ: "BadRequestError", msg: "invalid JSON: " + err.Error()})
		return
	}
	if req.Model != "" && !slices.Contains(in.cfg.Models, req.Model) {
		writeError(w, &apiError{status: http.StatusNotFound, typ: "NotFoundError", msg: "The model `" + req.Model + "` does not exist.", param: "model"})
		return
	}
	items, tokens, ok := embeddingItems(req.Input)
	if !ok {
		writeError(w, &apiError{status: http.StatusBadRequest, typ: "BadRequestError",
			msg: "input must be a string, a list of strings, a list of token ids or a list of lists of token ids, not empty", param: "input"})
		return
	}
	type datum struct {
		Object    string    `json:"object"`
		Index     int       `json:"index"`
		Embedding []float64 `json:"embedding"`
	}
	out := struct {
		Object string  `json:"object"`
		Model  string  `json:"model"`
		Data   []datum `json:"data"`
		Usage  struct {
			PromptTokens int `json:"prompt_tokens"`
			TotalTokens  int `json:"total_tokens"`
		} `json:"usage"`
	}{Object: "list", Model: in.cfg.Models[0]}
	if req.Model != "" {
		out.Model = req.Model
	}
	for i, it := range items {
		out.Data = append(out.Data, datum{Object: "embedding", Index: i, Embedding: embedding(it)})
	}
	out.Usage.PromptTokens, out.Usage.TotalTokens = tokens, tokens
	writeJSON(w, http.StatusOK, out)
}

// embeddingItems splits an input into its items (each as bytes to derive
// a vector from) and counts its tokens: words for text, ids for ids.
func embeddingItems(raw json.RawMessage) (items [][]byte, tokens int, ok bool) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return [][]byte{[]byte(s)}, len(appendWords(nil, []byte(s))), true
	}
	var ss []string
	if json.Unmarshal(raw, &ss) == nil && len(ss) > 0 {
		for _, s := range ss {
			items = append(items, []byte(s))
			tokens += len(appendWords(nil, []byte(s)))
		}
		return items, tokens, true
	}
	var ids []uint32
	if json.Unmarshal(raw, &ids) == nil && len(ids) > 0 {
		return [][]byte{[]byte(raw)}, len(ids), true
	}
	var lists [][]uint32
	if json.Unmarshal(raw, &lists) == nil && len(lists) > 0 {
		for _, l := range lists {
			b, _ := json.Marshal(l)
			items = append(items, b)
			tokens += len(l)
		}
		return items, tokens, true
	}
	return nil, 0, false
}

// embedding is a unit vector derived from b.
func embedding(b []byte) []float64 {
	v := make([]float64, embeddingDims)
	norm := 0.0
	for i := range v {
		h := fnv.New64a()
		h.Write([]byte{byte(i)})
		h.Write(b)
		v[i] = float64(h.Sum64()%2001)/1000 - 1
		norm += v[i] * v[i]
	}
	if norm = math.Sqrt(norm); norm > 0 {
		for i := range v {
			v[i] /= norm
		}
	}
	return v
}
