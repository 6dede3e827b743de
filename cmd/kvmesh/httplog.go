package main

import (
	"log"
	"strings"

	"github.com/rs/zerolog"
)

// httpErrorLog routes net/http's own error lines into zerolog. A handler
// panic is an error and an accept failure (e.g. out of file descriptors) a
// warning: the operator must see them. The rest (TLS handshake noise,
// malformed requests) is the client's problem and goes to debug.
func httpErrorLog(l zerolog.Logger, listener string) *log.Logger {
	return log.New(zerologWriter{l.With().Str("listener", listener).Logger()}, "", 0)
}

type zerologWriter struct{ l zerolog.Logger }

func (w zerologWriter) Write(p []byte) (int, error) {
	msg := strings.TrimSpace(string(p))
	switch {
	case strings.HasPrefix(msg, "http: panic"):
		w.l.Error().Msg(msg)
	case strings.HasPrefix(msg, "http: Accept error"):
		w.l.Warn().Msg(msg)
	default:
		w.l.Debug().Msg(msg)
	}
	return len(p), nil
}
