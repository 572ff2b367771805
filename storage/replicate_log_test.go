package storage

import (
	"bytes"
	"errors"
	"log/slog"
	"net/url"
	"strings"
	"testing"

	"github.com/rs/zerolog"
)

// Litestream's log lines reach chalupa's log as zerolog JSON with URLs,
// buckets and query strings removed.
func TestLitestreamLogHandlerRedacts(t *testing.T) {
	var buf bytes.Buffer
	l := slog.New(NewLitestreamLogHandler(zerolog.New(&buf), slog.LevelInfo))
	err := &url.Error{Op: "Get", URL: "http://127.0.0.1:9000/secret-bucket/path?list-type=2&prefix=x", Err: errors.New("connection refused")}
	l.With("db", "chalupa.db").Error("monitor error", "error", err, "endpoint", "http://127.0.0.1:9000", "n", 3)
	l.Debug("hidden below min")
	out := buf.String()
	for _, bad := range []string{"secret-bucket", "127.0.0.1:9000", "list-type", "hidden below min"} {
		if strings.Contains(out, bad) {
			t.Errorf("log holds %q: %s", bad, out)
		}
	}
	for _, want := range []string{`"component":"litestream"`, `"level":"error"`, `"db":"chalupa.db"`, `"n":3`, `"message":"monitor error"`} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %s: %s", want, out)
		}
	}
}
