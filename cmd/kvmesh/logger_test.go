package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The console format colours only a terminal: a file or a pipe gets plain
// text.
func TestConsoleLogNoColourOffTerminal(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "log"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	log := newLogger(LogConfig{Level: "info", Format: "console"}, f)
	log.Info().Str("k", "v").Msg("hello")
	var buf bytes.Buffer
	log = newLogger(LogConfig{Level: "info", Format: "console"}, &buf)
	log.Info().Str("k", "v").Msg("hello")
	data, _ := os.ReadFile(f.Name())
	for what, s := range map[string]string{"file": string(data), "buffer": buf.String()} {
		if strings.Contains(s, "\x1b[") || !strings.Contains(s, "hello") || !strings.Contains(s, "k=v") {
			t.Errorf("%s: %q", what, s)
		}
	}
}
