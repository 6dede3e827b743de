package router

import (
	"bytes"
)

// usageTail is how many of an answer's last bytes are kept to read the
// backend's usage report: the "usage" object closes a non-streaming
// completion and is the last event of a stream (with include_usage).
const usageTail = 4096

// keepTail keeps the last usageTail bytes of everything passed to it, in a
// buffer of twice that capacity, without allocating.
func (st *reqState) keepTail(p []byte) {
	if len(p) >= usageTail {
		st.tail = append(st.tail[:0], p[len(p)-usageTail:]...)
		return
	}
	if len(st.tail)+len(p) > 2*usageTail {
		keep := usageTail - len(p)
		copy(st.tail, st.tail[len(st.tail)-keep:])
		st.tail = st.tail[:keep]
	}
	st.tail = append(st.tail, p...)
}

// countUsage adds the backend-reported prompt and cached tokens found in
// the answer's tail (usage.prompt_tokens and
// usage.prompt_tokens_details.cached_tokens) to b's counters. The
// backend's own count is the operator's truth about cache hits; the router
// does not rely on it.
func (rt *Router) countUsage(b *backend, tail []byte) {
	cached, ok := lastIntField(tail, `"cached_tokens"`)
	if !ok {
		return
	}
	b.cachedTokens.Add(float64(cached))
	if prompt, ok := lastIntField(tail, `"prompt_tokens"`); ok {
		b.promptTokens.Add(float64(prompt))
	}
}

// lastIntField finds the last occurrence of the quoted key followed by ':'
// and a non-negative integer, and returns the integer.
func lastIntField(s []byte, key string) (int64, bool) {
	for end := len(s); end > 0; {
		i := bytes.LastIndex(s[:end], []byte(key))
		if i < 0 {
			return 0, false
		}
		end = i
		rest := skipSpace(s[i+len(key):])
		if len(rest) == 0 || rest[0] != ':' {
			continue
		}
		rest = skipSpace(rest[1:])
		var n int64
		digits := 0
		for digits < len(rest) && digits < 12 && rest[digits] >= '0' && rest[digits] <= '9' {
			n = n*10 + int64(rest[digits]-'0')
			digits++
		}
		if digits == 0 {
			continue
		}
		return n, true
	}
	return 0, false
}

func skipSpace(s []byte) []byte {
	for len(s) > 0 && (s[0] == ' ' || s[0] == '\t' || s[0] == '\n' || s[0] == '\r') {
		s = s[1:]
	}
	return s
}
