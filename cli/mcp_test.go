package cli

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/daemon/daemontest"
)

// MCP frames of the tests below: a client's first lines and two requests.
const (
	mcpInitialize  = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"pipe","version":"1"}}}`
	mcpInitialized = `{"jsonrpc":"2.0","method":"notifications/initialized"}`
	mcpToolsList   = `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`
	mcpCallFleet   = `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"chalupa_admin_list_fleet","arguments":{}}}`
)

// TestMCPPipe runs `chalupa mcp` through the CLI's entry point with its
// standard input given whole and then closed, as `printf … | chalupa mcp`
// does, against an in-process daemon (docs/operations.md, "MCP server"):
// every request read before the end of input is answered, then the
// command exits 0; a line that is not JSON is answered -32700 with id null
// and the requests after it are served; JSON that is not a JSON-RPC
// message is answered -32600 with its id.
func TestMCPPipe(t *testing.T) {
	t.Parallel()
	p := daemontest.NewInProcess(t, daemontest.AppOptions{})
	if _, err := p.Admin.CreateEnvironment(t.Context(), adminapi.CreateEnvironmentRequest{Slug: "pipe-harbor"}); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"CHALUPA_ADMIN_TOKEN": p.Admin.Token, "CHALUPA_URL": p.URL}
	for _, tc := range []struct {
		name  string
		lines []string
		// want is each id answered and whether with an error code (0: a
		// result).
		want map[string]int
	}{
		{"closed pipe", []string{mcpInitialize, mcpInitialized, mcpToolsList, mcpCallFleet},
			map[string]int{"1": 0, "2": 0, "3": 0}},
		{"malformed line", []string{mcpInitialize, mcpInitialized, `{this is not json`, mcpToolsList, mcpCallFleet},
			map[string]int{"1": 0, "null": -32700, "2": 0, "3": 0}},
		{"JSON that is not a message", []string{mcpInitialize, mcpInitialized, `{"id":7}`, mcpToolsList},
			map[string]int{"1": 0, "7": -32600, "2": 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, code := runIn(env, strings.Join(tc.lines, "\n")+"\n", "mcp")
			if code != 0 {
				t.Fatalf("exit %d, want 0:\n%s", code, out)
			}
			got := map[string]int{}
			for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
				var m struct {
					ID     json.RawMessage `json:"id"`
					Result json.RawMessage `json:"result"`
					Error  *struct {
						Code int `json:"code"`
					} `json:"error"`
				}
				if err := json.Unmarshal([]byte(line), &m); err != nil {
					t.Fatalf("a line of output is not JSON-RPC: %q", line)
				}
				switch {
				case m.Error != nil:
					got[string(m.ID)] = m.Error.Code
				case m.Result != nil:
					got[string(m.ID)] = 0
				}
				if string(m.ID) == "3" && !strings.Contains(line, `pipe-harbor`) {
					t.Errorf("the fleet tool's answer lacks the environment: %s", line)
				}
			}
			if len(got) != len(tc.want) {
				t.Errorf("answered %v; want %v", got, tc.want)
			}
			for id, c := range tc.want {
				if g, ok := got[id]; !ok || g != c {
					t.Errorf("id %s: answered %v (code %d); want code %d\n%s", id, ok, g, c, out)
				}
			}
		})
	}
}
