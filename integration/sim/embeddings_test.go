package sim

import (
	"encoding/json"
	"math"
	"net/http"
	"testing"
)

// The simulator answers /v1/embeddings as vLLM does: one unit vector per
// input item, equal inputs equal vectors, the token count in the usage;
// an unknown model is a 404 and a malformed input a 400.
func TestEmbeddingsEndpoint(t *testing.T) {
	in, srv := startServer(t, nil)
	type reply struct {
		Data []struct {
			Index     int       `json:"index"`
			Embedding []float64 `json:"embedding"`
		} `json:"data"`
		Usage struct {
			PromptTokens int `json:"prompt_tokens"`
		} `json:"usage"`
	}
	model := in.cfg.Models[0]
	resp, body := post(t, srv.URL, "/v1/embeddings", []byte(`{"model":"`+model+`","input":["one two three","four","one two three"]}`), nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	var r reply
	if err := json.Unmarshal(body, &r); err != nil {
		t.Fatal(err)
	}
	if len(r.Data) != 3 || r.Usage.PromptTokens != 7 {
		t.Fatalf("%d vectors, %d tokens; want 3 and 7 (3 + 1 + 3 words): %s", len(r.Data), r.Usage.PromptTokens, body)
	}
	norm := 0.0
	for _, x := range r.Data[0].Embedding {
		norm += x * x
	}
	if math.Abs(norm-1) > 1e-9 || r.Data[1].Index != 1 {
		t.Fatalf("norm %v, index %d", norm, r.Data[1].Index)
	}
	for i := range r.Data[0].Embedding {
		if r.Data[0].Embedding[i] != r.Data[2].Embedding[i] {
			t.Fatal("equal inputs, different vectors")
		}
	}
	if resp, body := post(t, srv.URL, "/v1/embeddings", []byte(`{"model":"nope","input":"x"}`), nil); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("unknown model: %d %s", resp.StatusCode, body)
	}
	if resp, body := post(t, srv.URL, "/v1/embeddings", []byte(`{"model":"`+model+`","input":[]}`), nil); resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("empty input: %d %s", resp.StatusCode, body)
	}
}
