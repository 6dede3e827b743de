package sim

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// serveGenerate handles POST /v1/chat/completions and /v1/completions.
func (in *Instance) serveGenerate(w http.ResponseWriter, r *http.Request, ep endpoint) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		writeError(w, &apiError{status: http.StatusMethodNotAllowed, typ: "MethodNotAllowed", msg: r.Method + " is not allowed; use POST"})
		return
	}
	if in.eng.isDown() {
		writeError(w, errorFor(errRestarting))
		return
	}
	body, aerr := readBody(w, r, in.cfg.MaxBodyBytes)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	p := in.parsers.Get()
	req, aerr := in.dec.decode(p, body.Bytes(), ep, make([]uint32, 0, body.Len()/4+16))
	in.parsers.Put(p)
	putBody(body)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	maxOut, aerr := in.outputTokens(&req)
	if aerr != nil {
		writeError(w, aerr)
		return
	}

	fail, spike := in.faults.roll()
	if fail {
		in.log.Debug().Msg("injected fault: HTTP 500")
		writeError(w, &apiError{status: http.StatusInternalServerError, typ: "InternalServerError", msg: "kvmesh-sim: injected fault"})
		return
	}
	if spike > 0 {
		in.log.Debug().Dur("delay_sim", spike).Msg("injected fault: latency spike")
		t := time.NewTimer(in.cfg.realDuration(spike))
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return
		}
	}

	s := newSeq(in.nextID.Add(1), &req, maxOut, in.cfg.BlockSize)
	s.extraV = spike.Seconds()
	if err := in.eng.submit(s); err != nil {
		writeError(w, errorFor(err))
		return
	}
	id := append([]byte(nil), in.idPrefix[ep]...)
	id = strconv.AppendUint(id, s.id, 10)
	meta := replyMeta{
		ep:        ep,
		id:        append(id, '"'),
		created:   time.Now().Unix(),
		model:     in.models[req.model],
		prompt:    s.promptLen,
		maxOut:    maxOut,
		withUsage: req.includeUsage,
	}
	orca := parseORCAFormat(r.Header.Get(ORCARequestHeader))
	if req.stream {
		in.stream(w, r, s, &meta, orca)
	} else {
		in.reply(w, r, s, &meta, orca)
	}
}

// outputTokens decides how many tokens req generates and rejects requests
// that could never run.
func (in *Instance) outputTokens(req *request) (int, *apiError) {
	prompt := len(req.tokens)
	n := req.maxTokens
	if n == 0 {
		// Like vLLM, a default never pushes the request past the context.
		n = max(1, min(in.cfg.DefaultMaxTokens, in.cfg.MaxModelLen-prompt))
	}
	if c := in.cfg.MaxOutputTokens; c > 0 && n > c {
		n = c
	}
	if prompt+n > in.cfg.MaxModelLen {
		return 0, badRequest("", "This model's maximum context length is %d tokens. However, you requested %d tokens "+
			"(%d in the messages, %d in the completion). Please reduce the length of the messages or completion.",
			in.cfg.MaxModelLen, prompt+n, prompt, n)
	}
	if need := ceilDiv(prompt+n, in.cfg.BlockSize); need > in.cfg.CacheBlocks {
		return 0, badRequest("", "request needs %d KV blocks (%d prompt + %d completion tokens) but the KV cache holds only %d blocks",
			need, prompt, n, in.cfg.CacheBlocks)
	}
	return n, nil
}

// errorFor maps how a sequence ended to an HTTP error.
func errorFor(err error) *apiError {
	switch {
	case errors.Is(err, errRestarted):
		return &apiError{status: http.StatusInternalServerError, typ: "InternalServerError", msg: err.Error()}
	case errors.Is(err, errRestarting), errors.Is(err, errClosed):
		return &apiError{status: http.StatusServiceUnavailable, typ: "ServiceUnavailableError", msg: err.Error()}
	}
	return &apiError{status: http.StatusInternalServerError, typ: "InternalServerError", msg: fmt.Sprint(err)}
}

// reply waits for the whole output and writes one JSON body.
func (in *Instance) reply(w http.ResponseWriter, r *http.Request, s *seq, meta *replyMeta, orca orcaFormat) {
	select {
	case <-s.done:
	case <-r.Context().Done():
		in.eng.cancel(s)
		return
	}
	if s.err != nil {
		writeError(w, errorFor(s.err))
		return
	}
	meta.cached = int(s.cached.Load())
	meta.engineTTFT = s.ttftV.Load()
	if orca != orcaNone {
		running, waiting, kv := in.eng.load()
		w.Header().Set(ORCAResponseHeader, formatORCA(orca, kv, waiting, running))
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(meta.appendResponse(make([]byte, 0, 512+8*meta.maxOut)))
}

// stream writes Server-Sent Events as the engine produces tokens: one event
// per wake-up carrying every token produced since the last one, each event
// flushed, then an optional usage event and [DONE]. A failure after the
// headers went out becomes an error event without [DONE].
func (in *Instance) stream(w http.ResponseWriter, r *http.Request, s *seq, meta *replyMeta, orca orcaFormat) {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	if orca != orcaNone && in.cfg.ORCAOnStreaming {
		running, waiting, kv := in.eng.load()
		h.Set(ORCAResponseHeader, formatORCA(orca, kv, waiting, running))
	}
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	_ = rc.Flush()

	buf := make([]byte, 0, 1024)
	send := func() bool {
		_, err := w.Write(buf)
		if err == nil {
			err = rc.Flush()
		}
		buf = buf[:0]
		return err == nil
	}
	sent := 0
	for {
		select {
		case <-s.notify:
		case <-s.done:
		case <-r.Context().Done():
			in.eng.cancel(s)
			return
		}
		ended := s.finished() // read before progress: once ended, progress is final
		n := int(s.progress.Load())
		if n > sent {
			if sent == 0 && meta.ep == chatEndpoint {
				buf = meta.appendRoleEvent(buf)
				if !send() {
					in.eng.cancel(s)
					return
				}
			}
			buf = meta.appendTokensEvent(buf, sent, n)
			sent = n
			if !send() {
				if !ended {
					in.eng.cancel(s)
				}
				return
			}
		}
		if !ended {
			continue
		}
		if s.err != nil {
			buf = append(buf, "data: "...)
			buf = appendErrorBody(buf, errorFor(s.err))
			buf = append(buf, "\n\n"...)
			send()
			return
		}
		if meta.withUsage {
			meta.cached = int(s.cached.Load())
			meta.engineTTFT = s.ttftV.Load()
			buf = meta.appendUsageEvent(buf)
			if !send() {
				return
			}
		}
		buf = append(buf, doneEvent...)
		send()
		return
	}
}
