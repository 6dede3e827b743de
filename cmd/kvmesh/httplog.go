package main

import (
	"log"
	"strings"

	"github.com/rs/zerolog"
)

// httpErrorLog routes net/http's own error lines (TLS handshake errors,
// malformed requests) into zerolog at debug level: they are the client's
// problem, not the operator's.
func httpErrorLog(l zerolog.Logger, listener string) *log.Logger {
	return log.New(zerologWriter{l.With().Str("listener", listener).Logger()}, "", 0)
}

type zerologWriter struct{ l zerolog.Logger }

func (w zerologWriter) Write(p []byte) (int, error) {
	w.l.Debug().Msg(strings.TrimSpace(string(p)))
	return len(p), nil
}
