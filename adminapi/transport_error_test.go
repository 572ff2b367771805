package adminapi_test

import (
	"context"
	"net"
	"strings"
	"testing"

	"github.com/chalupa-run/chalupa/adminapi"
)

// TestTransportErrorNamesOriginOnly: a call that cannot reach the daemon
// says the daemon's origin it tried, never the request's path or query,
// which carry fleet data (slugs, box names, session ids) into a log or an
// MCP tool error (docs/operations.md, "MCP server").
func TestTransportErrorNamesOriginOnly(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	origin := "http://" + ln.Addr().String()
	ln.Close() // connection refused from now on
	cl := &adminapi.Client{BaseURL: origin, Token: "secret-token"}
	_, err = cl.Call(context.Background(), "adminListEvents", adminapi.Params{"environment": "harbor-secret-slug"}, nil)
	if err == nil {
		t.Fatal("call to a closed port succeeded")
	}
	msg := err.Error()
	if !strings.Contains(msg, origin) {
		t.Errorf("error does not name the origin %s: %s", origin, msg)
	}
	for _, leak := range []string{"harbor-secret-slug", "/api/admin", "secret-token"} {
		if strings.Contains(msg, leak) {
			t.Errorf("error carries %q: %s", leak, msg)
		}
	}
}
