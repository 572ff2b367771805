package daemon_test

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/chalupa-run/chalupa/daemon"
	"github.com/chalupa-run/chalupa/daemon/adminapi"
	"github.com/chalupa-run/chalupa/daemon/daemontest"
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
	for _, tc := range []struct{ name, bearer string }{{"no bearer", ""}, {"ready token", p.Env[daemontest.ReadyTokenVar]}} {
		t.Run(tc.name, func(t *testing.T) {
			if code, _ := served(t, p, tc.bearer); code != http.StatusUnauthorized {
				t.Fatalf("status %d; want 401", code)
			}
		})
	}
	code, body := served(t, p, p.Env[daemontest.AdminTokenVar])
	if code != http.StatusOK {
		t.Fatalf("status %d", code)
	}
	want, err := daemon.OpenAPI(daemon.Version)
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
	ids := map[string]bool{}
	ops := 0
	for _, item := range doc.Paths.Map() {
		for _, op := range item.Operations() {
			ops++
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

func jsonEqual(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

// TestOpenAPIMatchesRoutes: every registered route outside the console
// (whose pages are HTML for a browser) is in the document with its method
// and its group's security, and every documented route is registered.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	p := daemontest.NewInProcess(t, daemontest.AppOptions{})
	raw, err := daemon.OpenAPI(daemon.Version)
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
