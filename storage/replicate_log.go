package storage

import (
	"context"
	"log/slog"
	"strings"

	"github.com/rs/zerolog"
)

// NewLitestreamLogHandler returns a slog.Handler for Litestream's own logs
// that writes through log (one log format on stdout) at level min and above,
// with every value redacted the way replica errors are: an error becomes its
// kind (redactReplicaError) and any string holding a URL is dropped. Litestream
// logs its S3 requests' endpoints, buckets, object keys and query strings;
// none of those belong in chalupa's log.
func NewLitestreamLogHandler(log zerolog.Logger, min slog.Level) slog.Handler {
	return &zerologHandler{log: log.With().Str("component", "litestream").Logger(), min: min}
}

type zerologHandler struct {
	log    zerolog.Logger
	min    slog.Level
	attrs  []slog.Attr
	prefix string
}

// Enabled implements slog.Handler.
func (h *zerologHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= h.min }

// Handle implements slog.Handler.
func (h *zerologHandler) Handle(_ context.Context, r slog.Record) error {
	var ev *zerolog.Event
	switch {
	case r.Level >= slog.LevelError:
		ev = h.log.Error()
	case r.Level >= slog.LevelWarn:
		ev = h.log.Warn()
	case r.Level >= slog.LevelInfo:
		ev = h.log.Info()
	default:
		ev = h.log.Debug()
	}
	add := func(a slog.Attr) bool {
		h.addAttr(ev, h.prefix, a)
		return true
	}
	for _, a := range h.attrs {
		add(a)
	}
	r.Attrs(add)
	ev.Msg(redactString(r.Message))
	return nil
}

func (h *zerologHandler) addAttr(ev *zerolog.Event, prefix string, a slog.Attr) {
	v := a.Value.Resolve()
	key := prefix + a.Key
	switch v.Kind() {
	case slog.KindGroup:
		for _, g := range v.Group() {
			h.addAttr(ev, key+".", g)
		}
	case slog.KindString:
		ev.Str(key, redactString(v.String()))
	case slog.KindInt64:
		ev.Int64(key, v.Int64())
	case slog.KindUint64:
		ev.Uint64(key, v.Uint64())
	case slog.KindFloat64:
		ev.Float64(key, v.Float64())
	case slog.KindBool:
		ev.Bool(key, v.Bool())
	case slog.KindDuration:
		ev.Dur(key, v.Duration())
	case slog.KindTime:
		ev.Time(key, v.Time())
	default:
		if err, ok := v.Any().(error); ok {
			ev.Str(key, redactReplicaError(err))
			return
		}
		ev.Str(key, "[redacted]")
	}
}

// redactString drops strings that carry a URL, an S3 query or a path
// outside chalupa's knowledge; short words pass.
func redactString(s string) string {
	if strings.Contains(s, "://") || strings.Contains(s, "?") || strings.Contains(s, "X-Amz") {
		return "[redacted]"
	}
	return s
}

// WithAttrs implements slog.Handler.
func (h *zerologHandler) WithAttrs(as []slog.Attr) slog.Handler {
	h2 := *h
	h2.attrs = append(append([]slog.Attr{}, h.attrs...), as...)
	return &h2
}

// WithGroup implements slog.Handler.
func (h *zerologHandler) WithGroup(name string) slog.Handler {
	h2 := *h
	h2.prefix = h.prefix + name + "."
	return &h2
}
