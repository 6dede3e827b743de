package workload

import "fmt"

// LongDocumentOptions shape a long-document question-answering workload, as
// in vLLM's benchmarks/benchmark_long_document_qa_throughput.py and LMCache's
// benchmarks/long_doc_qa: a few long documents, each asked many questions, so
// the document is a long prefix reused by every question about it.
type LongDocumentOptions struct {
	// Documents is the number of distinct documents. Default 8 (vLLM's
	// --num-documents).
	Documents int
	// DocumentTokens is each document's length. Default 8000: between the
	// ~8k-token prompts typical of the Mooncake trace (p50 6.9k) and the
	// benchmarks' defaults (LMCache 10,000, vLLM 20,000), and small enough
	// for 16k-context backends.
	DocumentTokens int
	// QuestionsPerDocument is the number of requests per document. Default
	// 16: "many questions each" (vLLM repeats each prompt --repeat-count 2
	// times; distinct questions make the suffixes differ).
	QuestionsPerDocument int
	// QuestionTokens is each question's length. Default 64: a typical user
	// question about a document.
	QuestionTokens int
	// OutputTokens is max_tokens. Default 100 (vLLM's and LMCache's
	// --output-len).
	OutputTokens int
	// Ordered sends each document's questions back to back (vLLM's
	// --repeat-mode interleave, the cache-friendliest order). Default false:
	// random order (vLLM's default --repeat-mode random).
	Ordered bool
	// Rate is the Poisson arrival rate in requests per second; 0 puts every
	// arrival at 0. Default 1: an 8k-token prefill per second is a moderate
	// load for a small simulated fleet.
	Rate float64
	// Seed selects order, arrivals and text. Default 1.
	Seed uint64
	// Body sets model, streaming and ignore_eos.
	Body BodyOptions
}

// DefaultLongDocumentOptions returns the defaults documented on
// LongDocumentOptions.
func DefaultLongDocumentOptions() LongDocumentOptions {
	return LongDocumentOptions{
		Documents:            8,
		DocumentTokens:       8000,
		QuestionsPerDocument: 16,
		QuestionTokens:       64,
		OutputTokens:         100,
		Rate:                 1,
		Seed:                 1,
		Body:                 DefaultBodyOptions(),
	}
}

// LongDocument generates Documents x QuestionsPerDocument requests, each one
// user message holding a document followed by a question about it. Group is
// the document; Conversation is unique per request; Turn is 0.
func LongDocument(o LongDocumentOptions) (*Workload, error) {
	c := optionChecker{gen: "LongDocument"}
	c.positive("Documents", o.Documents)
	c.positive("QuestionsPerDocument", o.QuestionsPerDocument)
	c.ordered("Documents", "1<<20", o.Documents, maxRequests)
	c.ordered("QuestionsPerDocument", "1<<20", o.QuestionsPerDocument, maxRequests)
	c.ordered("Documents x QuestionsPerDocument", "1<<20", o.Documents*o.QuestionsPerDocument, maxRequests)
	c.tokens("DocumentTokens", o.DocumentTokens)
	c.tokens("QuestionTokens", o.QuestionTokens)
	c.positive("OutputTokens", o.OutputTokens)
	c.tokens("OutputTokens", o.OutputTokens)
	c.rate(o.Rate)
	c.body(o.Body)
	if c.err != nil {
		return nil, c.err
	}
	r := newRNG(o.Seed)
	enc := newEncoding(o.Body)
	reqs := make([]Request, 0, o.Documents*o.QuestionsPerDocument)
	for d := range o.Documents {
		doc := span{block: textID(nsLongDocDocument, o.Seed, d, 0), words: int32(o.DocumentTokens)}
		for q := range o.QuestionsPerDocument {
			question := span{block: textID(nsLongDocQuestion, o.Seed, d, q), words: int32(o.QuestionTokens)}
			req := newRequest(enc, []message{{role: roleUser, spans: []span{doc, question}}}, o.OutputTokens)
			req.Group, req.Conversation = d, d*o.QuestionsPerDocument+q
			reqs = append(reqs, req)
		}
	}
	if !o.Ordered {
		r.Shuffle(len(reqs), func(i, j int) { reqs[i], reqs[j] = reqs[j], reqs[i] })
	}
	name := fmt.Sprintf("longdocument(documents=%d tokens=%d questions=%d seed=%d)",
		o.Documents, o.DocumentTokens, o.QuestionsPerDocument, o.Seed)
	return finishSynthetic(name, reqs, o.Rate, r), nil
}
