package main

import (
	"io"
	"time"

	"github.com/rs/zerolog"
)

// newLogger builds the process logger. Info level is quiet (lifecycle and
// problems); debug logs one line per routing decision. It does not name
// the node: serve adds "node" for its own and the router's lines, and the
// mesh and the transport add it to theirs (once each: JSON with a key
// twice is ambiguous).
func newLogger(cfg LogConfig, w io.Writer) zerolog.Logger {
	if cfg.Format == "console" {
		w = zerolog.ConsoleWriter{Out: w, TimeFormat: time.TimeOnly}
	}
	level, err := zerolog.ParseLevel(cfg.Level)
	if err != nil {
		level = zerolog.InfoLevel
	}
	return zerolog.New(w).Level(level).With().Timestamp().Logger()
}
