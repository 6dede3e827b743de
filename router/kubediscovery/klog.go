package kubediscovery

import (
	"fmt"

	"github.com/go-logr/logr"
	"github.com/rs/zerolog"
	"k8s.io/klog/v2"
)

// SetLogger sends client-go's own logs (klog: a failed watch, a relist)
// to log, as structured lines: errors at warn level, everything else at
// debug, so a node logging at info shows only client-go's errors and never
// klog's unstructured text. It affects the whole process (klog is global).
func SetLogger(log zerolog.Logger) {
	klog.SetLogger(logr.New(&zerologSink{log: log.With().Str("component", "client-go").Logger()}))
}

// zerologSink is a logr.LogSink over zerolog.
type zerologSink struct {
	log  zerolog.Logger
	name string
}

func (s *zerologSink) Init(logr.RuntimeInfo) {}

func (s *zerologSink) Enabled(int) bool { return s.log.GetLevel() <= zerolog.DebugLevel }

func (s *zerologSink) Info(_ int, msg string, kv ...any) { s.write(s.log.Debug(), msg, kv) }

func (s *zerologSink) Error(err error, msg string, kv ...any) {
	s.write(s.log.Warn().Err(err), msg, kv)
}

func (s *zerologSink) write(ev *zerolog.Event, msg string, kv []any) {
	if s.name != "" {
		ev = ev.Str("logger", s.name)
	}
	for i := 0; i+1 < len(kv); i += 2 {
		ev = ev.Str(fmt.Sprint(kv[i]), fmt.Sprint(kv[i+1]))
	}
	ev.Msg(msg)
}

func (s *zerologSink) WithValues(kv ...any) logr.LogSink {
	ctx := s.log.With()
	for i := 0; i+1 < len(kv); i += 2 {
		ctx = ctx.Str(fmt.Sprint(kv[i]), fmt.Sprint(kv[i+1]))
	}
	return &zerologSink{log: ctx.Logger(), name: s.name}
}

func (s *zerologSink) WithName(name string) logr.LogSink {
	if s.name != "" {
		name = s.name + "/" + name
	}
	return &zerologSink{log: s.log, name: name}
}
