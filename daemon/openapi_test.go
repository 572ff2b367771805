package daemon_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/daemon"
	"github.com/chalupa-run/chalupa/daemon/daemontest"
	"github.com/chalupa-run/chalupa/ingest"
	"github.com/chalupa-run/chalupa/internal/buildinfo"
	"github.com/chalupa-run/chalupa/internal/proctest"
	"github.com/chalupa-run/chalupa/storage"
	"github.com/chalupa-run/chalupa/storage/storagetest"
)

// served fetches the OpenAPI document with bearer and returns its status
// and body.
func served(t *testing.T, p *daemontest.InProcess, bearer string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, p.URL+daemon.OpenAPIPath, nil)
	if err != nil {
		t.Fatal(err)
	}
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b json.RawMessage
	_ = json.NewDecoder(resp.Body).Decode(&b)
	return resp.StatusCode, b
}

// TestOpenAPIDocument: GET /api/admin/openapi.json needs the admin bearer
// (not the ready token), serves what daemon.OpenAPI builds, and the
// document loads and validates as OpenAPI 3.1 with kin-openapi; every
// admin operation of the table is in it.
func TestOpenAPIDocument(t *testing.T) {
	p := daemontest.NewInProcess(t, daemontest.AppOptions{})
	for _, tc := range []struct{ name, bearer string }{{"no bearer", ""}, {"ready token", p.Env[proctest.ReadyTokenVar]}} {
		t.Run(tc.name, func(t *testing.T) {
			if code, _ := served(t, p, tc.bearer); code != http.StatusUnauthorized {
				t.Fatalf("status %d; want 401", code)
			}
		})
	}
	code, body := served(t, p, p.Env[proctest.AdminTokenVar])
	if code != http.StatusOK {
		t.Fatalf("status %d", code)
	}
	want, err := daemon.OpenAPI(buildinfo.Version)
	if err != nil {
		t.Fatal(err)
	}
	var a, b any
	if json.Unmarshal(body, &a) != nil || json.Unmarshal(want, &b) != nil || !jsonEqual(a, b) {
		t.Fatalf("served document differs from daemon.OpenAPI")
	}
	doc, err := openapi3.NewLoader().LoadFromData(body)
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	if !doc.IsOpenAPI31OrLater() {
		t.Errorf("openapi %q; want 3.1", doc.OpenAPI)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatalf("validate: %v", err)
	}
	if len(doc.Servers) != 1 || doc.Servers[0].URL != "/" {
		t.Errorf("servers %v; want the one relative server /", doc.Servers)
	}
	self := doc.Paths.Value(daemon.OpenAPIPath).Get.Responses.Status(http.StatusOK).Value.Content.Get("application/json").Schema.Value
	if err := self.VisitJSON(a, openapi3.EnableJSONSchema2020(), openapi3.VisitAsResponse()); err != nil {
		t.Errorf("the document does not validate against its own route's answer schema: %v", err)
	}
	ids := map[string]bool{}
	ops := 0
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			ops++
			if !identifier.MatchString(op.OperationID) {
				t.Errorf("%s %s: operationId %q is not an identifier", method, path, op.OperationID)
			}
			has4xx := false
			for code := range op.Responses.Map() {
				has4xx = has4xx || strings.HasPrefix(code, "4")
			}
			if !has4xx {
				t.Errorf("%s %s: no 4xx answer", method, path)
			}
			if op.RequestBody != nil && op.Responses.Status(http.StatusRequestEntityTooLarge) == nil {
				t.Errorf("%s %s: takes a body but declares no 413", method, path)
			}
			ids[op.OperationID] = true
			if ext, ok := op.Extensions["x-chalupa-operations"].([]any); ok {
				for _, id := range ext {
					ids[id.(string)] = true
				}
			}
		}
	}
	for _, op := range adminapi.Operations {
		if !ids[op.ID] {
			t.Errorf("operation %s is not in the document", op.ID)
		}
	}
	t.Logf("kin-openapi: OpenAPI %s document valid: %d paths, %d operations, %d security schemes, %d bytes",
		doc.OpenAPI, doc.Paths.Len(), ops, len(doc.Components.SecuritySchemes), len(want))
}

// identifier is what every generator accepts as a function name unchanged.
var identifier = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// TestOpenAPIRedoclyLint: Redocly's recommended ruleset, with only the
// exceptions contrib/redocly.yaml names (docs/operations.md, "OpenAPI"),
// finds no error and no warning in the generated document.
func TestOpenAPIRedoclyLint(t *testing.T) {
	redocly := proctest.ToolPath(t, "redocly")
	raw, err := daemon.OpenAPI(buildinfo.Version)
	if err != nil {
		t.Fatal(err)
	}
	doc := filepath.Join(t.TempDir(), "openapi.json")
	if err := os.WriteFile(doc, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(redocly, "lint", "--config", filepath.Join(proctest.RepoRoot(t), "contrib", "redocly.yaml"), "--format=summary", doc)
	cmd.Env = append(os.Environ(), "REDOCLY_TELEMETRY=off", "REDOCLY_SUPPRESS_UPDATE_NOTICE=true")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("redocly lint: %v\n%s", err, out)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) > 0 && (f[0] == "warning" || f[0] == "error") {
			t.Errorf("redocly: %s", line)
		}
	}
}

func jsonEqual(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

// TestOpenAPIMatchesRoutes: every registered route outside the console
// (whose pages are HTML for a browser) is in the document with its method
// and its group's security, and every documented route is registered; the
// signed ingest routes are exactly ingest.Routes, in the router and in the
// document (TestIngestRoutesFromTable).
func TestOpenAPIMatchesRoutes(t *testing.T) {
	p := daemontest.NewInProcess(t, daemontest.AppOptions{})
	raw, err := daemon.OpenAPI(buildinfo.Version)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Paths map[string]map[string]struct {
			Security []map[string][]string `json:"security"`
		} `json:"paths"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	security := map[string]string{daemon.GroupPublic: "", daemon.GroupProbe: "readyBearer", daemon.GroupAdmin: "adminBearer", daemon.GroupIngest: "v1Signature"}
	registered := map[string]bool{}
	for _, rt := range p.App.Server.Routes() {
		if rt.Group == daemon.GroupConsole {
			continue
		}
		path := openAPIPath(rt.Pattern)
		key := rt.Method + " " + path
		registered[key] = true
		t.Run(key, func(t *testing.T) {
			op, ok := doc.Paths[path][strings.ToLower(rt.Method)]
			if !ok {
				t.Fatalf("registered route %s is not in the document", key)
			}
			var schemes []string
			for _, req := range op.Security {
				for name := range req {
					schemes = append(schemes, name)
				}
			}
			if want := security[rt.Group]; (want == "") != (len(schemes) == 0) || (want != "" && !slices.Contains(schemes, want)) {
				t.Errorf("security %v; group %s wants %q", schemes, rt.Group, want)
			}
		})
	}
	for path, item := range doc.Paths {
		for method := range item {
			if key := strings.ToUpper(method) + " " + path; !registered[key] {
				t.Errorf("documented route %s is not registered", key)
			}
		}
	}
}

// TestIngestRoutesFromTable: the router's ingest group holds exactly the
// rows of ingest.Routes (method and path, nothing more, nothing less), and
// the document describes each row with its summary, its body bound and its
// request type's schema.
func TestIngestRoutesFromTable(t *testing.T) {
	p := daemontest.NewInProcess(t, daemontest.AppOptions{})
	raw, err := daemon.OpenAPI(buildinfo.Version)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Paths map[string]map[string]struct {
			Summary     string   `json:"summary"`
			OperationID string   `json:"operationId"`
			Aliases     []string `json:"x-chalupa-aliases"`
			Responses   map[string]struct {
				Content map[string]struct {
					Schema struct {
						Ref string `json:"$ref"`
					} `json:"schema"`
				} `json:"content"`
			} `json:"responses"`
			RequestBody struct {
				Description string `json:"description"`
				Content     map[string]struct {
					Schema struct {
						Ref string `json:"$ref"`
					} `json:"schema"`
				} `json:"content"`
			} `json:"requestBody"`
		} `json:"paths"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	registered := map[string]bool{}
	for _, rt := range p.App.Server.Routes() {
		if rt.Group == daemon.GroupIngest {
			registered[rt.Method+" "+rt.Pattern] = true
		}
	}
	inTable := map[string]bool{}
	for _, rt := range ingest.Routes {
		key := rt.Method + " " + rt.Path
		inTable[key] = true
		t.Run(key, func(t *testing.T) {
			if !registered[key] {
				t.Errorf("%s is in ingest.Routes but not registered in group %s", key, daemon.GroupIngest)
			}
			op, ok := doc.Paths[rt.Path][strings.ToLower(rt.Method)]
			if !ok {
				t.Fatalf("%s is in ingest.Routes but not in the document", key)
			}
			if op.Summary != rt.Summary {
				t.Errorf("summary %q; the table says %q", op.Summary, rt.Summary)
			}
			if want := fmt.Sprintf("at most %d KiB", rt.MaxBody>>10); op.RequestBody.Description != want {
				t.Errorf("request body %q; want %q", op.RequestBody.Description, want)
			}
			if ref, want := op.RequestBody.Content["application/json"].Schema.Ref, "#/components/schemas/"+rt.Request.Name()+"Input"; ref != want {
				t.Errorf("request schema %q; want %q", ref, want)
			}
			if ref, want := op.Responses["202"].Content["application/json"].Schema.Ref, "#/components/schemas/"+rt.Answer.Name(); ref != want {
				t.Errorf("202 schema %q; want %q, the type the handler encodes", ref, want)
			}
			// The earlier id ("ingestLogs/plan") stays a documented alias.
			if old := "ingest" + strings.ToUpper(rt.Path[len("/api/ingest/"):][:1]) + rt.Path[len("/api/ingest/")+1:]; old != op.OperationID && !slices.Contains(op.Aliases, old) {
				t.Errorf("operationId %q; the old id %q is not among its aliases %v", op.OperationID, old, op.Aliases)
			}
		})
	}
	for key := range registered {
		if !inTable[key] {
			t.Errorf("registered ingest route %s is not in ingest.Routes", key)
		}
	}
	for path, item := range doc.Paths {
		for method := range item {
			if key := strings.ToUpper(method) + " " + path; strings.HasPrefix(path, "/api/ingest/") && !inTable[key] {
				t.Errorf("documented ingest route %s is not in ingest.Routes", key)
			}
		}
	}
}

// openAPIPath turns httprouter's ":name" into "{name}".
func openAPIPath(p string) string {
	segs := strings.Split(p, "/")
	for i, s := range segs {
		if strings.HasPrefix(s, ":") {
			segs[i] = "{" + s[1:] + "}"
		}
	}
	return strings.Join(segs, "/")
}

// TestOpenAPIResponsesValidate: the bodies the admin API really answers
// validate against the document's response schemas (JSON Schema 2020-12,
// kin-openapi), on a seeded daemon where nullable fields are null: an
// active deployment that has never been seen by the reaper, an ended one,
// a box that has never converged. Every read operation whose parameters
// the fixture can fill is checked.
func TestOpenAPIResponsesValidate(t *testing.T) {
	p := daemontest.NewInProcess(t, daemontest.AppOptions{})
	db := p.App.DB
	env := storagetest.Environment(t, db, storage.Environment{Slug: "schema-check"})
	live := storagetest.Deployment(t, db, storage.Deployment{EnvironmentID: env.ID, ID: "dep-live"})
	storagetest.Heartbeat(t, db, storage.Heartbeat{EnvironmentID: env.ID, DeploymentID: live.ID})
	ended := storagetest.Deployment(t, db, storage.Deployment{EnvironmentID: env.ID, ID: "dep-ended"})
	storagetest.EndDeployment(t, db, env.ID, ended.ID, time.Now())
	box := storagetest.Box(t, db, storage.Box{EnvironmentID: env.ID})
	// An open alert never acknowledged, a resolved one and a mute: the
	// alert list's optional times absent and present.
	now := time.Now()
	if err := db.Writer.Do(context.Background(), func(tx storage.Tx) error {
		if err := storage.InsertAlert(context.Background(), tx, storage.Alert{ID: "01OPEN", Kind: "reaper-overdue", SubjectKind: "platform",
			Severity: "critical", OpenedAt: now, LastSentAt: now}); err != nil {
			return err
		}
		if err := storage.InsertAlert(context.Background(), tx, storage.Alert{ID: "01RESOLVED", Kind: "clock-step", SubjectKind: "platform",
			Severity: "critical", Detail: "words", OpenedAt: now, LastSentAt: now, ResolvedAt: now, AckedAt: now}); err != nil {
			return err
		}
		return storage.MuteAlertKind(context.Background(), tx, "clock-step", now.Add(time.Hour), now)
	}); err != nil {
		t.Fatal(err)
	}

	raw, err := daemon.OpenAPI(buildinfo.Version)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := openapi3.NewLoader().LoadFromData(raw)
	if err != nil {
		t.Fatal(err)
	}
	params := map[string]string{"slug": env.Slug, "id": live.ID, "box": box.Name}
	// Not fillable from this seed: a job (and its diagnosis) needs the
	// converge executor (TestJobDoctorEndToEnd drives the doctor), the SSH
	// identity a provision token, a log download CHALUPA_LOGS_URL and a
	// committed chunk, a chunk's metadata a chunk (TestAdminLogs covers
	// both against versitygw), an agent rollout a rollout (the rollout
	// tests read theirs through the typed client).
	unfilled := map[string]bool{"adminGetJob": true, "adminDiagnoseJob": true, "adminGetSSHKey": true, "adminGetLogDownload": true, "adminGetLogChunk": true,
		"adminGetAgentRollout": true}
	checked := 0
	for _, op := range adminapi.Operations {
		if op.Method != http.MethodGet || unfilled[op.ID] {
			continue
		}
		t.Run(op.ID, func(t *testing.T) {
			segs := strings.Split(op.Path, "/")
			for i, s := range segs {
				if strings.HasPrefix(s, ":") {
					v, ok := params[s[1:]]
					if !ok {
						t.Fatalf("no seed value for path parameter %s", s)
					}
					segs[i] = v
				}
			}
			req, err := http.NewRequest(http.MethodGet, p.URL+strings.Join(segs, "/"), nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Authorization", "Bearer "+p.Env[proctest.AdminTokenVar])
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var body any
			if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != op.Status {
				t.Fatalf("status %d; want %d: %v", resp.StatusCode, op.Status, body)
			}
			item := doc.Paths.Find(openAPIPath(op.Path))
			if item == nil || item.Get == nil {
				t.Fatalf("%s is not documented", op.Path)
			}
			rr := item.Get.Responses.Status(op.Status)
			if rr == nil || rr.Value == nil || rr.Value.Content.Get("application/json") == nil {
				t.Fatalf("no %d JSON response documented", op.Status)
			}
			schema := rr.Value.Content.Get("application/json").Schema.Value
			if err := schema.VisitJSON(body, openapi3.EnableJSONSchema2020(), openapi3.VisitAsResponse(), openapi3.MultiErrors()); err != nil {
				t.Errorf("answer does not match its schema: %v", err)
			}
			checked++
		})
	}
	if checked < 10 {
		t.Errorf("%d read operations checked; the table has more", checked)
	}
}
