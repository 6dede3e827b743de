package main

import (
	"io"
	"time"

	"github.com/rs/zerolog"
)

// newLogger builds the process logger. Info level is quiet (lifecycle and
// problems); debug logs one line per routing decision.
func newLogger(cfg LogConfig, w io.Writer, node string) zerolog.Logger {
	if cfg.Format == "console" {
		w = zerolog.ConsoleWriter{Out: w, TimeFormat: time.TimeOnly}
	}
	level, err := zerolog.ParseLevel(cfg.Level)
	if err != nil {
		level = zerolog.InfoLevel
	}
	return zerolog.New(w).Level(level).With().Timestamp().Str("node", node).Logger()
}
