package adminapi

import (
	"cmp"
	"context"
	"net/http"
	"os/exec"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/chalupa-run/chalupa/internal/apischema"
)

// TestBodyFor: a body only does what its operationId names. Ingest-key
// bodies must be JSON objects whose action matches the operation (rotate and
// revoke get theirs filled in); operations without a request type take no
// body at all.
func TestBodyFor(t *testing.T) {
	ok := []struct{ name, id, body, want string }{
		{"issue", OpIssueIngestKey, `{"environmentSlug":"demo"}`, `{"environmentSlug":"demo"}`},
		{"issue named", OpIssueIngestKey, `{"action":"issue","environmentSlug":"demo"}`, `{"action":"issue","environmentSlug":"demo"}`},
		{"rotate filled in", OpRotateIngestKey, `{"environmentSlug":"demo"}`, `{"action":"rotate","environmentSlug":"demo"}`},
		{"rotate empty", OpRotateIngestKey, ``, `{"action":"rotate"}`},
		{"revoke", OpRevokeIngestKey, `{"action":"revoke","keyId":"k"}`, `{"action":"revoke","keyId":"k"}`},
		{"revoke filled in", OpRevokeIngestKey, `{"keyId":"k"}`, `{"action":"revoke","keyId":"k"}`},
		{"create", OpCreateEnvironment, `{"slug":"demo"}`, `{"slug":"demo"}`},
		{"status", OpGetStatus, ``, ``},
	}
	for _, tc := range ok {
		t.Run(tc.name, func(t *testing.T) {
			got, err := BodyFor(tc.id, []byte(tc.body))
			if err != nil || string(got) != tc.want {
				t.Errorf("BodyFor(%s, %s) = %s, %v; want %s", tc.id, tc.body, got, err, tc.want)
			}
		})
	}
	bad := []struct{ name, id, body, want string }{
		{"issue with revoke", OpIssueIngestKey, `{"action":"revoke","keyId":"k"}`, "adminIssueIngestKey takes no action"},
		{"issue with rotate", OpIssueIngestKey, `{"action":"rotate","environmentSlug":"demo"}`, "adminIssueIngestKey takes no action"},
		{"issue with number", OpIssueIngestKey, `{"action":7}`, "adminIssueIngestKey takes no action"},
		{"rotate with revoke", OpRotateIngestKey, `{"action":"revoke","keyId":"k"}`, `adminRotateIngestKey takes action "rotate"`},
		{"rotate with null", OpRotateIngestKey, `{"action":null}`, `adminRotateIngestKey takes action "rotate"`},
		{"revoke with rotate", OpRevokeIngestKey, `{"action":"rotate","environmentSlug":"demo"}`, `adminRevokeIngestKey takes action "revoke"`},
		{"revoke null", OpRevokeIngestKey, `null`, "adminRevokeIngestKey body must be a JSON object"},
		{"rotate string", OpRotateIngestKey, `"rotate"`, "adminRotateIngestKey body must be a JSON object"},
		{"issue array", OpIssueIngestKey, `[]`, "adminIssueIngestKey body must be a JSON object"},
		{"status body", OpGetStatus, `{}`, "adminGetStatus takes no body"},
		{"list null", OpListEnvironments, `null`, "adminListEnvironments takes no body"},
		{"fleet body", OpListFleet, `{"x":1}`, "adminListFleet takes no body"},
		{"unknown", "adminNoSuchThing", `{}`, "unknown operation"},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			got, err := BodyFor(tc.id, []byte(tc.body))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("BodyFor(%s, %s) = %s, %v; want an error containing %q", tc.id, tc.body, got, err, tc.want)
			}
		})
	}
}

// TestOperationTable: the table is consistent on its own. Ids are unique
// and start with "admin"; every operation has a success status and a
// response type; GETs take no body and do not mutate; every ":name" path
// segment has exactly one request field tagged path:"name", parameter
// fields are json:"-" and of a supported type; operations sharing a
// route share one request type implementing Actioned and have distinct
// actions, exactly one of them the default.
func TestOperationTable(t *testing.T) {
	seen := map[string]bool{}
	routes := map[string][]Operation{}
	for _, op := range Operations {
		t.Run(op.ID, func(t *testing.T) {
			if seen[op.ID] {
				t.Errorf("duplicate operation id")
			}
			seen[op.ID] = true
			if !strings.HasPrefix(op.ID, "admin") || len(op.ID) <= len("admin") {
				t.Errorf("id must be admin<Name>")
			}
			if op.Status < 200 || op.Status > 299 || op.Response == nil || op.Summary == "" {
				t.Errorf("status %d, response %v, summary %q: all are required", op.Status, op.Response, op.Summary)
			}
			if op.Method == http.MethodGet && (op.HasBody() || op.Mutates) {
				t.Errorf("a GET takes no body and does not mutate")
			}
			if err := op.checkParamTable(); err != nil {
				t.Errorf("parameters: %v", err)
			}
			if op.Method != http.MethodGet && !op.Mutates {
				t.Errorf("%s is not a read: mark it Mutates", op.Method)
			}
			if !strings.HasPrefix(op.Path, "/api/admin/") && !strings.HasPrefix(op.Path, "/admin-api/") {
				t.Errorf("path %s is outside the admin route groups (/api/admin, /admin-api)", op.Path)
			}
		})
		routes[op.Method+" "+op.Path] = append(routes[op.Method+" "+op.Path], op)
	}
	actioned := reflect.TypeFor[Actioned]()
	for route, ops := range routes {
		if len(ops) < 2 {
			continue
		}
		t.Run(route, func(t *testing.T) {
			actions, defaults := map[string]bool{}, 0
			for _, op := range ops {
				if op.Request == nil || !op.Request.Implements(actioned) {
					t.Errorf("%s: operations sharing a route need request types implementing Actioned", op.ID)
				} else if want := cmp.Or(op.Action, defaultAction); !slices.Equal(actionEnum(op.Request), []string{want}) {
					// The document's oneOf tells the bodies apart by it.
					t.Errorf("%s: its request type's action tag declares %v, want exactly [%s]", op.ID, actionEnum(op.Request), want)
				}
				if actions[op.Action] {
					t.Errorf("%s: action %q is taken twice", op.ID, op.Action)
				}
				actions[op.Action] = true
				if op.Action == "" {
					defaults++
				}
			}
			if defaults != 1 {
				t.Errorf("%d default operations; want exactly one with no action", defaults)
			}
		})
	}
}

// TestClientMethods: every operation has a typed client method named after
// it (adminListFleet → ListFleet) taking a context (and the request's
// fields) and returning the operation's response type and an error; and
// the client has no such method for an operation the table lacks.
func TestClientMethods(t *testing.T) {
	ct := reflect.TypeFor[*Client]()
	ctxType, errType := reflect.TypeFor[context.Context](), reflect.TypeFor[error]()
	want := map[string]bool{"Call": true}
	for _, op := range Operations {
		name := strings.TrimPrefix(op.ID, "admin")
		want[name] = true
		t.Run(op.ID, func(t *testing.T) {
			m, ok := ct.MethodByName(name)
			if !ok {
				t.Fatalf("Client has no method %s", name)
			}
			ft := m.Type // receiver first
			if ft.NumIn() < 2 || ft.In(1) != ctxType {
				t.Errorf("%s must take a context.Context first", name)
			}
			if ft.NumOut() != 2 || ft.Out(0) != op.Response || ft.Out(1) != errType {
				t.Errorf("%s returns %v; want (%v, error)", name, ft, op.Response)
			}
		})
	}
	for i := range ct.NumMethod() {
		if m := ct.Method(i); !want[m.Name] {
			t.Errorf("Client.%s matches no operation in the table", m.Name)
		}
	}
}

// heavy are import paths (prefixes) a leaf package must never pull in:
// storage, SQLite, Litestream, AWS, metrics, and the daemon's own heavy
// packages. The CLI and agents embed the leaves.
var heavy = []string{
	"github.com/chalupa-run/chalupa/storage",
	"github.com/chalupa-run/chalupa/daemon",
	"github.com/chalupa-run/chalupa/ingest",
	"modernc.org/",
	"github.com/benbjohnson/litestream",
	"github.com/superfly/ltx",
	"github.com/aws/",
	"github.com/prometheus/",
	"github.com/pressly/goose",
	"github.com/rs/zerolog",
	"github.com/pulumi/",
	"github.com/digitalocean/godo",
}

// TestDeps keeps the leaves light (Tailscale's client/local TestDeps):
// adminapi imports only the standard library, and protocol,
// which agents embed, nothing heavy either.
func TestDeps(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	for _, pkg := range []string{"github.com/chalupa-run/chalupa/adminapi", "github.com/chalupa-run/chalupa/protocol"} {
		t.Run(pkg, func(t *testing.T) {
			out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", pkg).CombinedOutput()
			if err != nil {
				t.Fatalf("go list: %v\n%s", err, out)
			}
			for _, dep := range strings.Fields(string(out)) {
				if dep == pkg {
					continue
				}
				for _, h := range heavy {
					if strings.HasPrefix(dep, h) {
						t.Errorf("%s imports %s (heavy: %s…)", pkg, dep, h)
					}
				}
				if strings.HasSuffix(pkg, "/adminapi") {
					t.Errorf("adminapi must import only the standard library; it imports %s", dep)
				}
			}
		})
	}
}

// TestConvergePhrase: the console's typed confirmation is the MCP policy's
// template of adminRunPulumiConverge filled in, so the two surfaces ask
// for the same words.
func TestConvergePhrase(t *testing.T) {
	op, ok := Lookup(OpRunPulumiConverge)
	if !ok {
		t.Fatal("no converge operation")
	}
	for _, action := range []string{"preview", "destroy"} {
		t.Run(action, func(t *testing.T) {
			want := strings.NewReplacer("{action}", action, "{scope.id}", "box-1").Replace(op.MCP.Confirm)
			if got := ConvergePhrase(action, "box-1"); got != want {
				t.Errorf("ConvergePhrase = %q, want the MCP template's %q", got, want)
			}
		})
	}
}

// actionEnum is the enum the "action" field of request type t declares.
func actionEnum(t reflect.Type) []string {
	for _, f := range apischema.Fields(t) {
		if f.Name == "action" {
			return f.Rules.Enum
		}
	}
	return nil
}
