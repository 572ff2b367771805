package mcpserver_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/mcpserver"
)

// TestLineTooLong: a line longer than MaxLineBytes is answered -32700 with
// id null and skipped; the requests after it are served and Run ends
// without error at the end of input.
func TestLineTooLong(t *testing.T) {
	in := strings.Join([]string{
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`,
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
		`{"jsonrpc":"2.0","id":9,"method":"ping","params":{"pad":"` + strings.Repeat("x", mcpserver.MaxLineBytes) + `"}}`,
		`{"jsonrpc":"2.0","id":2,"method":"tools/list"}`,
	}, "\n") + "\n"
	var out bytes.Buffer
	if err := mcpserver.Run(context.Background(), &adminapi.Client{}, "test", strings.NewReader(in), &out); err != nil {
		t.Fatalf("Run: %v", err)
	}
	got := out.String()
	if !strings.Contains(got, `{"jsonrpc":"2.0","id":null,"error":{"code":-32700,`) {
		t.Errorf("no parse error for the long line:\n%.500s", got)
	}
	if strings.Contains(got, `"id":9`) {
		t.Errorf("the long line was served")
	}
	if !strings.Contains(got, `"id":2,"result":{`) {
		t.Errorf("tools/list after the long line was not answered:\n%.500s", got)
	}
}

// TestRequestIDsMCPRefuses: a request whose id is null, a fraction, or an
// integer beyond what a JSON number holds exactly (2^53) is answered
// -32600 with its id as sent (MCP 2025-06-18: a request id is a string or
// an integer, never null) — not served as a notification, nor answered
// under a rounded id the client never sent.
func TestRequestIDsMCPRefuses(t *testing.T) {
	for _, tc := range []struct{ name, id, echo string }{
		{"null", `null`, `null`},
		{"fraction", `1.5`, `1.5`},
		{"beyond 2^53", `9007199254740993`, `9007199254740993`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := strings.Join([]string{
				`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`,
				`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
				`{"jsonrpc":"2.0","id":` + tc.id + `,"method":"ping"}`,
				`{"jsonrpc":"2.0","id":2,"method":"ping"}`,
			}, "\n") + "\n"
			var out bytes.Buffer
			if err := mcpserver.Run(context.Background(), &adminapi.Client{}, "test", strings.NewReader(in), &out); err != nil {
				t.Fatalf("Run: %v", err)
			}
			got := out.String()
			if want := `{"jsonrpc":"2.0","id":` + tc.echo + `,"error":{"code":-32600,`; !strings.Contains(got, want) {
				t.Errorf("no %s in:\n%s", want, got)
			}
			if strings.Count(got, "\n") != 3 {
				t.Errorf("want 3 answers (initialize, the refusal, ping 2):\n%s", got)
			}
		})
	}
}

// TestInvalidMessagesAnswered: a JSON-RPC object that is neither request
// nor response (an id and nothing else) and one that is not JSON-RPC at
// all are answered -32600 with their id exactly as sent (digits beyond a
// float64's kept), and a request before initialize is answered with a
// JSON-RPC code (-32600), not the SDK's code 0 (docs/operations.md, "MCP
// server").
func TestInvalidMessagesAnswered(t *testing.T) {
	initialize := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`
	for _, tc := range []struct{ name, line, want string }{
		{"no method", `{"jsonrpc":"2.0","id":6}`, `{"jsonrpc":"2.0","id":6,"error":{"code":-32600,`},
		{"no method, string id", `{"jsonrpc":"2.0","id":"a"}`, `{"jsonrpc":"2.0","id":"a","error":{"code":-32600,`},
		{"no method, id beyond 2^53", `{"jsonrpc":"2.0","id":9007199254740993}`, `{"jsonrpc":"2.0","id":9007199254740993,"error":{"code":-32600,`},
		{"not JSON-RPC, id beyond 2^53", `{"id":9007199254740993,"result":1}`, `{"jsonrpc":"2.0","id":9007199254740993,"error":{"code":-32600,`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := strings.Join([]string{initialize, `{"jsonrpc":"2.0","method":"notifications/initialized"}`, tc.line, `{"jsonrpc":"2.0","id":2,"method":"ping"}`}, "\n") + "\n"
			var out bytes.Buffer
			if err := mcpserver.Run(context.Background(), &adminapi.Client{}, "test", strings.NewReader(in), &out); err != nil {
				t.Fatalf("Run: %v", err)
			}
			got := out.String()
			if !strings.Contains(got, tc.want) {
				t.Errorf("no %s in:\n%s", tc.want, got)
			}
			if strings.Count(got, "\n") != 3 {
				t.Errorf("want 3 answers (initialize, the refusal, ping 2):\n%s", got)
			}
		})
	}
	t.Run("before initialize", func(t *testing.T) {
		in := `{"jsonrpc":"2.0","id":3,"method":"tools/list"}` + "\n" + initialize + "\n"
		var out bytes.Buffer
		if err := mcpserver.Run(context.Background(), &adminapi.Client{}, "test", strings.NewReader(in), &out); err != nil {
			t.Fatalf("Run: %v", err)
		}
		if want := `{"jsonrpc":"2.0","id":3,"error":{"code":-32600,`; !strings.Contains(out.String(), want) {
			t.Errorf("no %s in:\n%s", want, out.String())
		}
	})
}

// TestCancelEndsCallInFlight: when Run's context ends (chalupa mcp's
// SIGINT or SIGTERM) while a tool call waits on the daemon, the call's
// request is cancelled and Run returns, instead of waiting for the daemon
// or the call's timeout (60 s by default, longer for converge and report).
func TestCancelEndsCallInFlight(t *testing.T) {
	arrived := make(chan struct{})
	hungUp := make(chan struct{})
	d := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(arrived)
		<-r.Context().Done()
		close(hungUp)
	}))
	defer d.Close()
	defer d.CloseClientConnections() // a failed run leaves the handler waiting
	inR, inW := io.Pipe()
	defer inW.Close()
	go io.WriteString(inW, strings.Join([]string{
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`,
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
		`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"chalupa_admin_get_status","arguments":{}}}`,
	}, "\n")+"\n")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	cl := &adminapi.Client{BaseURL: d.URL, Token: "t", HTTP: &http.Client{}}
	go func() { done <- mcpserver.Run(ctx, cl, "test", inR, io.Discard) }()
	<-arrived
	cancel()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after its context ended while a call waited on the daemon")
	}
	select {
	case <-hungUp:
	case <-time.After(30 * time.Second):
		t.Fatal("the call's request to the daemon was not cancelled")
	}
}
