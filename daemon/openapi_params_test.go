package daemon_test

import (
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/alerts"
	"github.com/chalupa-run/chalupa/daemon"
	"github.com/chalupa-run/chalupa/daemon/daemontest"
	"github.com/chalupa-run/chalupa/internal/apischema"
	"github.com/chalupa-run/chalupa/internal/buildinfo"
	"github.com/chalupa-run/chalupa/storage"
)

// paramCase is one request of an admin operation with its path and query
// parameters (by name, in text form) and, for an operation with a body, a
// body the handler takes.
type paramCase struct {
	name   string
	op     string
	params map[string]string
	body   string
	// status and code are the refusal; 0 and "" for parameters the
	// daemon must not refuse for shape.
	status int
	code   string
}

// paramRows are TestOpenAPIParamRefusals' rows, run in order against one
// daemon with the environment "params-env" and the organization
// "params-org": each refusal row breaks exactly one rule of one
// parameter's `schema` tag; the accepted rows sit at the rules' edges.
func paramRows() []paramCase {
	p := func(kv ...string) map[string]string {
		m := map[string]string{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	policy := `{"kind":"demo","maxSessionSeconds":3600}`
	return []paramCase{
		// {slug}: pattern slug, refused with the resource's code.
		{"runs of an upper-case slug", adminapi.OpListRuns, p("slug", "Params-Env"), "", 404, "environment_not_found"},
		{"runs of a one-letter slug", adminapi.OpListRuns, p("slug", "p"), "", 404, "environment_not_found"},
		{"end a deployment of a slug with an underscore", adminapi.OpEndDeployment, p("slug", "params_env", "id", "dep-1"), "", 404, "environment_not_found"},
		{"performance of a slug starting with a hyphen", adminapi.OpGetDeploymentPerformance, p("slug", "-params", "id", "dep-1"), "", 404, "environment_not_found"},
		{"logs of a 64-character slug", adminapi.OpListLogs, p("slug", "a"+strings.Repeat("b", 63), "id", "dep-1"), "", 404, "environment_not_found"},
		{"set a policy of a bad slug", adminapi.OpSetSessionPolicy, p("slug", "Bad"), policy, 400, "invalid_slug"},
		{"clear a policy of a bad slug", adminapi.OpClearSessionPolicy, p("slug", "Bad"), "", 400, "invalid_slug"},
		{"set log services of a bad slug", adminapi.OpSetLogServices, p("slug", "Bad"), `{"reset":true}`, 404, "environment_not_found"},
		{"revoke the token of a bad organization slug", adminapi.OpRevokeProviderToken, p("slug", "Bad"), "", 404, "organization_not_found"},
		// {id}: pattern id.
		{"end a deployment of an id starting with a dot", adminapi.OpEndDeployment, p("slug", "params-env", "id", ".dep"), "", 404, "deployment_not_found"},
		{"performance of a 129-character id", adminapi.OpGetDeploymentPerformance, p("slug", "params-env", "id", strings.Repeat("d", 129)), "", 404, "deployment_not_found"},
		{"logs of an id with a space", adminapi.OpListLogs, p("slug", "params-env", "id", "dep 1"), "", 404, "deployment_not_found"},
		// {session} and {seq} of a log chunk.
		{"chunk of a session starting with a hyphen", adminapi.OpGetLogChunk, p("slug", "params-env", "id", "dep-1", "session", "-s", "seq", "0"), "", 404, "log_chunk_not_found"},
		{"chunk of a negative seq", adminapi.OpGetLogChunk, p("slug", "params-env", "id", "dep-1", "session", "s-1", "seq", "-1"), "", 404, "log_chunk_not_found"},
		{"download of a seq with a plus sign", adminapi.OpGetLogDownload, p("slug", "params-env", "id", "dep-1", "session", "s-1", "seq", "+1"), "", 404, "log_chunk_not_found"},
		{"set the token of a bad organization slug", adminapi.OpSetProviderToken, p("slug", "Bad"), `{"token":"dop_v1_x"}`, 404, "organization_not_found"},
		{"chunk of a bad slug", adminapi.OpGetLogChunk, p("slug", "Bad", "id", "dep-1", "session", "s-1", "seq", "0"), "", 404, "environment_not_found"},
		{"chunk of a bad id", adminapi.OpGetLogChunk, p("slug", "params-env", "id", "-dep", "session", "s-1", "seq", "0"), "", 404, "deployment_not_found"},
		{"download of a bad slug", adminapi.OpGetLogDownload, p("slug", "Bad", "id", "dep-1", "session", "s-1", "seq", "0"), "", 404, "environment_not_found"},
		{"download of a bad id", adminapi.OpGetLogDownload, p("slug", "params-env", "id", "-dep", "session", "s-1", "seq", "0"), "", 404, "deployment_not_found"},
		{"download of a bad session", adminapi.OpGetLogDownload, p("slug", "params-env", "id", "dep-1", "session", "s 1", "seq", "0"), "", 404, "log_chunk_not_found"},
		// Query filters.
		{"logs of a service with a space", adminapi.OpListLogs, p("slug", "params-env", "id", "dep-1", "service", "a b"), "", 422, "bad_param"},
		{"logs of a session with a slash", adminapi.OpListLogs, p("slug", "params-env", "id", "dep-1", "session", "s/1"), "", 422, "bad_param"},
		{"events of a bad environment", adminapi.OpListEvents, p("environment", "Params-Env"), "", 422, "bad_param"},
		{"boxes of a bad environment", adminapi.OpListBoxes, p("environment", "x"), "", 422, "bad_param"},
		{"jobs of an unknown status", adminapi.OpListJobs, p("status", "done"), "", 422, "bad_param"},
		{"jobs with a negative limit", adminapi.OpListJobs, p("limit", "-1"), "", 422, "bad_param"},
		{"jobs with limit 501", adminapi.OpListJobs, p("limit", "501"), "", 422, "bad_param"},
		{"alerts with recent 201", adminapi.OpListAlerts, p("recent", "201"), "", 400, "bad_recent"},
		{"alerts with a negative recent", adminapi.OpListAlerts, p("recent", "-1"), "", 400, "bad_recent"},
		{"alerts with recent 0", adminapi.OpListAlerts, p("recent", "0"), "", 400, "bad_recent"},
		{"costs of month 13", adminapi.OpGetCosts, p("month", "2026-13"), "", 400, "bad_month"},
		{"costs of a month without its zero", adminapi.OpGetCosts, p("month", "2026-1"), "", 400, "bad_month"},
		// Enums of fixed sets.
		{"pause an unknown loop", adminapi.OpPauseLoop, p("name", "ingest"), "", 404, "unknown_loop"},
		{"resume an upper-case loop", adminapi.OpResumeLoop, p("name", "Jobs"), "", 404, "unknown_loop"},
		{"mute an unknown alert kind", adminapi.OpMuteAlertKind, p("kind", "exploded"), `{"for":"1h"}`, 404, "unknown_kind"},
		{"unmute an unknown alert kind", adminapi.OpUnmuteAlertKind, p("kind", "Budget"), "", 404, "unknown_kind"},

		{"runs of a two-character slug", adminapi.OpListRuns, p("slug", "p1"), "", 0, ""},
		{"runs of a 63-character slug", adminapi.OpListRuns, p("slug", "a"+strings.Repeat("b", 62)), "", 0, ""},
		{"runs", adminapi.OpListRuns, p("slug", "params-env"), "", 0, ""},
		{"set a policy", adminapi.OpSetSessionPolicy, p("slug", "params-env"), policy, 0, ""},
		{"clear a policy", adminapi.OpClearSessionPolicy, p("slug", "params-env"), "", 0, ""},
		{"revoke the token of an organization", adminapi.OpRevokeProviderToken, p("slug", "params-org"), "", 0, ""},
		{"performance of a 128-character id", adminapi.OpGetDeploymentPerformance, p("slug", "params-env", "id", strings.Repeat("d", 128)), "", 0, ""},
		{"end a deployment of an id with every allowed character", adminapi.OpEndDeployment, p("slug", "params-env", "id", "Dep.1:y-z"), "", 0, ""},
		{"chunk", adminapi.OpGetLogChunk, p("slug", "params-env", "id", "dep-1", "session", "s-1", "seq", "0"), "", 0, ""},
		{"download of a large seq", adminapi.OpGetLogDownload, p("slug", "params-env", "id", "dep-1", "session", "s-1", "seq", "9223372036854775807"), "", 0, ""},
		{"logs of a service and a session", adminapi.OpListLogs, p("slug", "params-env", "id", "dep-1", "service", "app@1.service", "session", "s-1"), "", 0, ""},
		{"events of an environment and a kind", adminapi.OpListEvents, p("environment", "params-env", "kind", "booted"), "", 0, ""},
		{"boxes of an environment", adminapi.OpListBoxes, p("environment", "params-env"), "", 0, ""},
		{"jobs at limit 500", adminapi.OpListJobs, p("limit", "500", "status", "cancelled"), "", 0, ""},
		{"jobs at limit 0 (the default)", adminapi.OpListJobs, p("limit", "0", "status", "queued"), "", 0, ""},
		{"alerts with recent 1", adminapi.OpListAlerts, p("recent", "1"), "", 0, ""},
		{"alerts with recent 200", adminapi.OpListAlerts, p("recent", "200"), "", 0, ""},
		{"costs of December", adminapi.OpGetCosts, p("month", "2026-12"), "", 0, ""},
		{"costs of January", adminapi.OpGetCosts, p("month", "2026-01"), "", 0, ""},
		{"pause a loop", adminapi.OpPauseLoop, p("name", "costs"), "", 0, ""},
		{"resume a loop", adminapi.OpResumeLoop, p("name", "costs"), "", 0, ""},
		{"mute an alert kind", adminapi.OpMuteAlertKind, p("kind", "alert-delivery-failing"), `{"for":"1h"}`, 0, ""},
		{"unmute an alert kind", adminapi.OpUnmuteAlertKind, p("kind", "clock-step"), "", 0, ""},
	}
}

// TestOpenAPIParamRefusals: each path or query parameter value the daemon
// refuses for its shape (its field's `schema` tag, with the field's
// `refuse` status and code) is refused by the document's parameter schema
// too (kin-openapi, JSON Schema 2020-12), and values at the rules' edges
// are accepted by both (docs/operations.md, "OpenAPI").
func TestOpenAPIParamRefusals(t *testing.T) {
	h := daemontest.NewIngest(t, daemontest.IngestOptions{})
	h.CreateEnv("params-env")
	if got := h.AdminOp(adminapi.OpCreateOrganization, `{"slug":"params-org","name":"Params"}`); got.Status != http.StatusCreated && got.Status != http.StatusOK {
		t.Fatalf("create organization: %s", got)
	}
	raw, err := daemon.OpenAPI(buildinfo.Version)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := openapi3.NewLoader().LoadFromData(raw)
	if err != nil {
		t.Fatal(err)
	}
	// broken: each request type's parameters some refusal row breaks.
	broken := map[reflect.Type]map[string]bool{}
	for _, tc := range paramRows() {
		t.Run(tc.name, func(t *testing.T) {
			op, ok := adminapi.Lookup(tc.op)
			if !ok {
				t.Fatalf("unknown operation %s", tc.op)
			}
			got := h.Do(op.Method, paramURL(t, op, tc.params),
				http.Header{"Authorization": {"Bearer " + h.AdminToken()}, "Content-Type": {"application/json"}}, []byte(tc.body))
			badParam, schemaErr := paramsAgainstSchema(t, doc, op, tc.params)
			if tc.status == 0 {
				if schemaErr != nil {
					t.Fatalf("the document refuses the parameters: %v", schemaErr)
				}
				if got.Status >= 400 && (got.Code == "bad_param" || strings.HasPrefix(got.Message, "parameter ")) {
					t.Fatalf("parameters the document accepts are refused for shape: %s", got)
				}
				return
			}
			if got.Status != tc.status || got.Code != tc.code {
				t.Fatalf("answer %s; want %d %s", got, tc.status, tc.code)
			}
			if schemaErr == nil {
				t.Fatalf("the daemon refuses %d %s (%s) but the document's parameter schemas accept", got.Status, got.Code, got.Message)
			}
			if broken[op.Request] == nil {
				broken[op.Request] = map[string]bool{}
			}
			broken[op.Request][badParam] = true
		})
	}
	// Every parameter that declares a rule is broken by some row.
	for _, op := range adminapi.Operations {
		for _, p := range adminapi.ParamsOf(reflect.New(orNone(op.Request)).Elem().Interface()) {
			if p.Tag.Get("schema") != "" && !broken[op.Request][p.Name] {
				t.Errorf("%s: no row breaks parameter %s's rules", op.ID, p.Name)
			}
		}
	}
}

// orNone is t, or an empty struct type for an operation without a request.
func orNone(t reflect.Type) reflect.Type {
	if t == nil {
		return reflect.TypeFor[struct{}]()
	}
	return t
}

// paramURL is op's path with its path parameters filled in (escaped) and
// the others as its query.
func paramURL(t *testing.T, op adminapi.Operation, params map[string]string) string {
	t.Helper()
	pathNames, _ := op.Parameters()
	segs := strings.Split(op.Path, "/")
	for i, s := range segs {
		if name, ok := strings.CutPrefix(s, ":"); ok {
			v, given := params[name]
			if !given {
				t.Fatalf("row lacks path parameter %s", name)
			}
			segs[i] = url.PathEscape(v)
		}
	}
	q := url.Values{}
	for name, v := range params {
		if !slices.Contains(pathNames, name) {
			q.Set(name, v)
		}
	}
	out := strings.Join(segs, "/")
	if len(q) > 0 {
		out += "?" + q.Encode()
	}
	return out
}

// paramsAgainstSchema validates each parameter's text against its schema
// in the document; the first refused parameter's name and the refusal, or
// nil. An integer parameter's text that is no integer is refused, as a
// generated client could not send it.
func paramsAgainstSchema(t *testing.T, doc *openapi3.T, op adminapi.Operation, params map[string]string) (string, error) {
	t.Helper()
	item := doc.Paths.Find(openAPIPath(op.Path))
	if item == nil || item.GetOperation(op.Method) == nil {
		t.Fatalf("%s %s is not in the document", op.Method, op.Path)
	}
	for name, text := range params {
		var p *openapi3.Parameter
		for _, ref := range item.GetOperation(op.Method).Parameters {
			if ref.Value.Name == name {
				p = ref.Value
			}
		}
		if p == nil {
			t.Fatalf("%s has no parameter %s in the document", op.ID, name)
		}
		s := p.Schema.Value
		var v any = text
		if s.Type.Is("integer") {
			n, err := strconv.ParseInt(text, 10, 64)
			if err != nil {
				return name, err
			}
			v = float64(n)
		}
		if err := s.VisitJSON(v, openapi3.EnableJSONSchema2020()); err != nil {
			return name, err
		}
	}
	return "", nil
}

// TestParamEnumsAreTheSets: the enums of the parameters' `schema` tags
// are the daemon's fixed sets, so a new loop, alert kind or job status
// cannot be refused by a stale list.
func TestParamEnumsAreTheSets(t *testing.T) {
	kinds := make([]string, 0, len(alerts.Conditions))
	for _, c := range alerts.Conditions {
		kinds = append(kinds, c.Kind)
	}
	for _, tc := range []struct {
		name  string
		typ   reflect.Type
		field string
		want  []string
	}{
		{"loops", reflect.TypeFor[adminapi.LoopRequest](), "Name", daemon.SwitchableLoops},
		{"mute kinds", reflect.TypeFor[adminapi.MuteAlertKindRequest](), "Kind", kinds},
		{"unmute kinds", reflect.TypeFor[adminapi.UnmuteAlertKindRequest](), "Kind", kinds},
		{"job statuses", reflect.TypeFor[adminapi.ListJobsRequest](), "Status",
			[]string{storage.JobQueued, storage.JobRunning, storage.JobSucceeded, storage.JobFailed, storage.JobCancelled}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, ok := tc.typ.FieldByName(tc.field)
			if !ok {
				t.Fatalf("%v has no field %s", tc.typ, tc.field)
			}
			if got := apischema.RulesOf(f.Tag).Enum; !slices.Equal(got, tc.want) {
				t.Fatalf("tag enum %v; the set is %v", got, tc.want)
			}
		})
	}
}
