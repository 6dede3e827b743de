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
	name := fmt.Sprintf("longdocument(documents=%d tokens=%d questions=%d seed=%d)",
		o.Documents, o.DocumentTokens, o.QuestionsPerDocument, o.Seed)
	return grouped(groupedSpec{
		gen: "LongDocument", groupsName: "Documents", perGroupName: "QuestionsPerDocument", prefixName: "DocumentTokens",
		groups: o.Documents, perGroup: o.QuestionsPerDocument, prefixTokens: o.DocumentTokens, questionTokens: o.QuestionTokens,
		outputTokens: o.OutputTokens, rate: o.Rate, seed: o.Seed, ordered: o.Ordered, body: o.Body,
		messages: func(d, q int) []message {
			doc := span{block: textID(nsLongDocDocument, o.Seed, d, 0), words: int32(o.DocumentTokens)}
			question := span{block: textID(nsLongDocQuestion, o.Seed, d, q), words: int32(o.QuestionTokens)}
			return []message{{role: roleUser, spans: []span{doc, question}}}
		},
	}, name)
}
