package main

import (
	"io"
	"os"
	"time"

	"github.com/rs/zerolog"
)

// newLogger builds the process logger. Info level is quiet (lifecycle and
// problems); debug logs one line per routing decision. It does not name
// the node: serve adds "node" for its own and the router's lines, and the
// mesh and the transport add it to theirs (once each: JSON with a key
// twice is ambiguous). The console format is coloured only on a terminal:
// in a file or a pipe the escape codes would be noise.
func newLogger(cfg LogConfig, w io.Writer) zerolog.Logger {
	if cfg.Format == "console" {
		w = zerolog.ConsoleWriter{Out: w, TimeFormat: time.TimeOnly, NoColor: !isTerminal(w)}
	}
	level, err := zerolog.ParseLevel(cfg.Level)
	if err != nil {
		level = zerolog.InfoLevel
	}
	return zerolog.New(w).Level(level).With().Timestamp().Logger()
}

// isTerminal reports whether w is a terminal (a character device: a tty,
// not a file, a pipe or a socket).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
