package daemon_test

import (
	"encoding/json"
	"net/http"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/daemon"
	"github.com/chalupa-run/chalupa/daemon/daemontest"
	"github.com/chalupa-run/chalupa/ingest"
	"github.com/chalupa-run/chalupa/internal/apischema"
	"github.com/chalupa-run/chalupa/internal/buildinfo"
	"github.com/chalupa-run/chalupa/protocol"
)

// shapeCodes are the error codes of a refusal for shape: a body whose
// keys or values break a rule a schema can state.
var shapeCodes = map[string]bool{"invalid_slug": true, "invalid_name": true, "invalid_box": true, "bad_body": true, "invalid_body": true, "malformed_json": true}

// shapeCase is one body sent to one operation.
type shapeCase struct {
	name string
	// op is an admin operationId, or "" for the signed ingest route path.
	// For an admin operation with path parameters, path is the concrete
	// path ("/api/admin/boxes/shape-box"), sent with op's method.
	op, path string
	body     []byte
	// status and code are the refusal; 0 and "" for a body the daemon
	// must not refuse for shape.
	status int
	code   string
}

// shapeEnv is what a set of shape rows is built against: one daemon with
// the environment "shape-check" and its ingest key, and body builders.
type shapeEnv struct {
	h      *daemontest.Ingest
	key    daemontest.Key
	minute time.Time
	// rows are the rows run so far, for checkShapeCoverage.
	rows []shapeRow
}

// hb is a signed-route heartbeat body of "shape-check"/"dep-shape" with o.
func (e *shapeEnv) hb(o daemontest.HeartbeatOpts) []byte {
	if o.Env == "" {
		o.Env = "shape-check"
	}
	if o.Deployment == "" {
		o.Deployment = "dep-shape"
	}
	return e.h.Heartbeat(o)
}

// run is run-1's report of "shape-check"/"dep-shape", changed by mutate.
func (e *shapeEnv) run(mutate func(*protocol.RunReportV1)) []byte {
	return e.h.RunReport("shape-check", "dep-shape", "run-1", mutate)
}

// window is a telemetry window of session two minutes ago, changed by mutate.
func (e *shapeEnv) window(session string, mutate func(*protocol.WindowV1)) []byte {
	return e.h.TelemetryWindow("shape-check", "dep-shape", session, e.minute, mutate)
}

// event is a "booted" lifecycle event id of deployment dep.
func (e *shapeEnv) event(id, dep string) []byte {
	return e.h.LifecycleEvent("shape-check", id, "booted", dep, nil)
}

// box is a create-box body for "shape-check" with extra keys appended
// (",\"name\":…").
func (e *shapeEnv) box(extra string) []byte {
	return []byte(`{"environment":"shape-check","region":"nyc3","size":"s-1vcpu-1gb","image":"ubuntu-24-04-x64",` +
		`"sshKeyFingerprints":["00:11:22:33:44:55:66:77:88:99:aa:bb:cc:dd:ee:ff"],` +
		`"customerSource":"203.0.113.7/32","controlPlaneSource":"198.51.100.7/32"` + extra + `}`)
}

// shapeSets are the rows of TestOpenAPIShapeRefusals by group, each group
// registered by the test file that owns it (registerShapes), run in the
// order of their names against one daemon. A group's rows run in order:
// an accepted row may create what a later row needs.
var shapeSets = map[string]func(e *shapeEnv) []shapeCase{}

// registerShapes adds a group of rows; a duplicate name panics.
func registerShapes(name string, rows func(e *shapeEnv) []shapeCase) bool {
	if _, dup := shapeSets[name]; dup {
		panic("shape set registered twice: " + name)
	}
	shapeSets[name] = rows
	return true
}

var _ = registerShapes("first-stage", func(e *shapeEnv) []shapeCase {
	h := e.h
	hb, run, event, box, minute := e.hb, e.run, e.event, e.box, e.minute
	window := func(session string) []byte { return e.window(session, nil) }
	s := func(v string) []byte { return []byte(v) }
	return []shapeCase{
		{"create environment without slug", adminapi.OpCreateEnvironment, "", s(`{}`), 400, "invalid_slug"},
		{"create environment with an upper-case slug", adminapi.OpCreateEnvironment, "", s(`{"slug":"Demo"}`), 400, "invalid_slug"},
		{"create environment with a one-letter slug", adminapi.OpCreateEnvironment, "", s(`{"slug":"a"}`), 400, "invalid_slug"},
		{"create environment in a bad organization slug", adminapi.OpCreateEnvironment, "", s(`{"slug":"shape-new","organization":"-x"}`), 400, "invalid_slug"},
		{"create organization without slug", adminapi.OpCreateOrganization, "", s(`{"name":"Acme"}`), 400, "invalid_slug"},
		{"create environment with a newline in its name", adminapi.OpCreateEnvironment, "", s(`{"slug":"shape-nl","name":"a\nb"}`), 400, "invalid_name"},
		{"create environment with a bidi override in its name", adminapi.OpCreateEnvironment, "", s(`{"slug":"shape-bidi","name":"a\u202eb"}`), 400, "invalid_name"},
		{"create organization with a zero-width space in its name", adminapi.OpCreateOrganization, "", s(`{"slug":"shape-zw","name":"a\u200bb"}`), 400, "invalid_name"},
		{"create box without name", adminapi.OpCreateBox, "", box(``), 422, "invalid_box"},
		{"create box with an upper-case name", adminapi.OpCreateBox, "", box(`,"name":"Box-1"`), 422, "invalid_box"},
		{"create box with a volume above 16 TiB", adminapi.OpCreateBox, "", box(`,"name":"shape-box","volumeSizeGiB":16385`), 422, "invalid_box"},
		{"create box with a negative volume", adminapi.OpCreateBox, "", box(`,"name":"shape-box","volumeSizeGiB":-1`), 422, "invalid_box"},
		{"create box with agentIdleMinutes above a week", adminapi.OpCreateBox, "", box(`,"name":"shape-box","agentIdleMinutes":10081`), 422, "invalid_box"},
		{"create box with agentSessionMinutes above 30 days", adminapi.OpCreateBox, "", box(`,"name":"shape-box","agentSessionMinutes":43201`), 422, "invalid_box"},
		{"erase logs of an empty slug", adminapi.OpEraseLogs, "", s(`{"environmentSlug":"","confirmation":"erase logs "}`), 400, "invalid_slug"},
		{"erase telemetry without slug", adminapi.OpEraseTelemetry, "", s(`{"confirmation":"erase telemetry"}`), 400, "invalid_slug"},
		{"heartbeat of a bad environment slug", "", ingest.HeartbeatRoute, hb(daemontest.HeartbeatOpts{Env: "Shape_Check"}), 422, "invalid_body"},
		{"heartbeat of a bad deployment id", "", ingest.HeartbeatRoute, hb(daemontest.HeartbeatOpts{Deployment: "-dep"}), 422, "invalid_body"},
		{"heartbeat with limitMinutes above a week", "", ingest.HeartbeatRoute, hb(daemontest.HeartbeatOpts{LimitMinutes: protocol.MaxLimitMinutes + 1}), 422, "invalid_body"},
		{"heartbeat with a negative limitMinutes", "", ingest.HeartbeatRoute, hb(daemontest.HeartbeatOpts{LimitMinutes: -1}), 422, "invalid_body"},
		{"run with a 7-digit commit", "", ingest.RunsRoute, run(func(r *protocol.RunReportV1) { r.Commit = "abcdef1" }), 422, "invalid_body"},
		{"run with an unknown status", "", ingest.RunsRoute, run(func(r *protocol.RunReportV1) { r.Status = "done" }), 422, "invalid_body"},
		{"run without runId", "", ingest.RunsRoute, run(func(r *protocol.RunReportV1) { r.RunID = "" }), 422, "invalid_body"},
		{"run of a bad environment slug", "", ingest.RunsRoute, run(func(r *protocol.RunReportV1) { r.EnvironmentSlug = "x" }), 422, "invalid_body"},
		{"telemetry window of a bad session id", "", ingest.TelemetryRoute, window("-session"), 422, "invalid_body"},
		{"telemetry window of a metric without samples", "", ingest.TelemetryRoute, h.TelemetryWindow("shape-check", "dep-shape", "session-2", minute, func(w *protocol.WindowV1) {
			w.Metrics.CPUPct = &protocol.AggV1{N: 0, Sum: 0, Min: 0, Max: 0, Last: 0}
		}), 422, "invalid_body"},
		{"telemetry window of more than 600 samples", "", ingest.TelemetryRoute, h.TelemetryWindow("shape-check", "dep-shape", "session-2", minute, func(w *protocol.WindowV1) {
			w.Metrics.CPUPct = &protocol.AggV1{N: 601, Sum: 601, Min: 1, Max: 1, Last: 1}
		}), 422, "invalid_body"},
		{"lifecycle event of a bad id", "", ingest.LifecycleRoute, event("-event", "dep-shape"), 422, "invalid_body"},
		{"lifecycle event of an empty deployment id", "", ingest.LifecycleRoute, event("ev-1", ""), 422, "invalid_body"},
		{"log session of a bad session id", "", ingest.LogSessionsRoute, s(`{"environmentSlug":"shape-check","deploymentId":"dep-shape","sessionId":"-s","service":"app.service"}`), 422, "invalid_body"},
		{"log session without service", "", ingest.LogSessionsRoute, s(`{"environmentSlug":"shape-check","deploymentId":"dep-shape","sessionId":"s-1"}`), 422, "invalid_body"},
		{"log session of a bad service", "", ingest.LogSessionsRoute, s(`{"environmentSlug":"shape-check","deploymentId":"dep-shape","sessionId":"s-1","service":"a b"}`), 422, "invalid_body"},
		{"log plan of an upper-case sha256", "", ingest.LogPlanRoute, s(`{"environmentSlug":"shape-check","deploymentId":"dep-shape","sessionId":"s-1","seq":0,"size":10,"sha256":"` + strings.Repeat("AB", 32) + `"}`), 422, "invalid_body"},
		{"log commit without sha256", "", ingest.LogCommitRoute, s(`{"environmentSlug":"shape-check","deploymentId":"dep-shape","sessionId":"s-1","seq":0,"size":10}`), 422, "invalid_body"},
		{"log finish of a bad environment slug", "", ingest.LogFinishRoute, s(`{"environmentSlug":"X","deploymentId":"dep-shape","sessionId":"s-1","final":{}}`), 422, "invalid_body"},
		{"lifecycle event of an unknown kind", "", ingest.LifecycleRoute, h.LifecycleEvent("shape-check", "ev-3", "exploded", "dep-shape", nil), 422, "invalid_body"},
		{"lifecycle event without kind", "", ingest.LifecycleRoute, h.LifecycleEvent("shape-check", "ev-4", "", "dep-shape", nil), 422, "invalid_body"},

		{"create environment", adminapi.OpCreateEnvironment, "", s(`{"slug":"shape-new","name":"Shape"}`), 0, ""},
		{"create organization", adminapi.OpCreateOrganization, "", s(`{"slug":"shape-org","name":"Ünïcode Ltd 名前"}`), 0, ""},
		{"create environment with a 200-byte name", adminapi.OpCreateEnvironment, "", s(`{"slug":"shape-long","name":"` + strings.Repeat("é", 100) + `"}`), 0, ""},
		{"create environment in it", adminapi.OpCreateEnvironment, "", s(`{"slug":"shape-in-org","organization":"shape-org"}`), 0, ""},
		{"create box at the bounds", adminapi.OpCreateBox, "", box(`,"name":"shape-box","volumeSizeGiB":16384,"agentIdleMinutes":10080,"agentSessionMinutes":43200`), 0, ""},
		{"create box with the defaults", adminapi.OpCreateBox, "", box(`,"name":"shape-box-2","agentIdleMinutes":0`), 0, ""},
		{"erase telemetry", adminapi.OpEraseTelemetry, "", s(`{"environmentSlug":"shape-check","confirmation":"erase telemetry shape-check"}`), 0, ""},
		{"erase logs", adminapi.OpEraseLogs, "", s(`{"environmentSlug":"shape-check","confirmation":"erase logs shape-check"}`), 0, ""},
		{"heartbeat", "", ingest.HeartbeatRoute, hb(daemontest.HeartbeatOpts{LimitMinutes: protocol.MaxLimitMinutes}), 0, ""},
		{"run with a SHA-256 commit", "", ingest.RunsRoute, run(func(r *protocol.RunReportV1) { r.Commit = strings.Repeat("0a", 32) }), 0, ""},
		{"telemetry window", "", ingest.TelemetryRoute, window("session-1"), 0, ""},
		{"log session", "", ingest.LogSessionsRoute, s(`{"environmentSlug":"shape-check","deploymentId":"dep-shape","sessionId":"s-1","service":"app@1.service"}`), 0, ""},
		{"log plan", "", ingest.LogPlanRoute, s(`{"environmentSlug":"shape-check","deploymentId":"dep-shape","sessionId":"s-1","seq":0,"size":10,"sha256":"` + strings.Repeat("ab", 32) + `"}`), 0, ""},
		{"lifecycle event", "", ingest.LifecycleRoute, event("ev-2", "dep-shape"), 0, ""},
		{"run without commit", "", ingest.RunsRoute, run(func(r *protocol.RunReportV1) { r.Commit, r.RunID = "", "run-2" }), 0, ""},
	}
})

// TestOpenAPIShapeRefusals: each refusal for shape the handlers give
// (invalid_slug 400 on the admin API, invalid_body 422 on ingest) is
// visible in the document: the operation's request schema rejects the
// same body (kin-openapi, JSON Schema 2020-12). And a body the schema
// accepts is not refused for shape (docs/operations.md, "OpenAPI"). The
// rows are shapeSets.
func TestOpenAPIShapeRefusals(t *testing.T) {
	// A log bucket nobody serves: the refusals come before any call to
	// it, and the accepted rows need only the database and a presign.
	h := daemontest.NewIngest(t, daemontest.IngestOptions{Env: map[string]string{
		"CHALUPA_LOGS_URL": "s3://shape-logs/logs?endpoint=http://127.0.0.1:9&region=us-east-1",
		"CHALUPA_LOGS_KEY": "shape-key", "CHALUPA_LOGS_SECRET": "shape-secret",
	}})
	h.CreateEnv("shape-check")
	e := &shapeEnv{h: h, key: h.Issue("shape-check"), minute: h.Clock.Now().Add(-2 * time.Minute).Truncate(time.Minute)}
	raw, err := daemon.OpenAPI(buildinfo.Version)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := openapi3.NewLoader().LoadFromData(raw)
	if err != nil {
		t.Fatal(err)
	}
	names := make([]string, 0, len(shapeSets))
	for name := range shapeSets {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			for _, tc := range shapeSets[name](e) {
				t.Run(tc.name, func(t *testing.T) { runShapeCase(t, e, doc, tc) })
			}
		})
	}
	if t.Failed() {
		return
	}
	t.Run("coverage", func(t *testing.T) { checkShapeCoverage(t, e, raw, e.rows) })
}

// send sends body to tc's operation and returns the answer, the method
// and the operation's path template.
func (e *shapeEnv) send(tc shapeCase, body []byte) (got daemontest.Response, method, path string) {
	if tc.op == "" {
		return e.h.Send(daemontest.SignedReq{KeyID: e.key.ID, Key: e.key.Raw, Path: tc.path, Body: body}), http.MethodPost, tc.path
	}
	op, _ := adminapi.Lookup(tc.op)
	if tc.path == "" {
		return e.h.AdminOp(tc.op, body), op.Method, op.Path
	}
	header := http.Header{"Authorization": {"Bearer " + e.h.AdminToken()}, "Content-Type": {"application/json"}}
	return e.h.Do(op.Method, tc.path, header, body), op.Method, op.Path
}

// runShapeCase sends tc to the daemon and to the operation's request
// schema and holds the two verdicts to tc.
func runShapeCase(t *testing.T, e *shapeEnv, doc *openapi3.T, tc shapeCase) {
	got, method, path := e.send(tc, tc.body)
	e.rows = append(e.rows, shapeRow{tc: tc, op: method + " " + openAPIPath(path), body: tc.body, refused: tc.status != 0})
	schemaErr := requestSchema(t, doc, method, path).VisitJSON(decoded(t, tc.body), openapi3.EnableJSONSchema2020())
	if tc.status == 0 {
		if schemaErr != nil {
			t.Fatalf("the schema refuses the body: %v", schemaErr)
		}
		if (got.Status == 400 || got.Status == 422) && shapeCodes[got.Code] {
			t.Fatalf("a body the schema accepts is refused for shape: %s", got)
		}
		return
	}
	if got.Status != tc.status || got.Code != tc.code {
		t.Fatalf("answer %s; want %d %s", got, tc.status, tc.code)
	}
	if schemaErr == nil {
		t.Fatalf("the daemon refuses %d %s (%s) but the schema accepts the body", got.Status, got.Code, got.Message)
	}
}

// TestLimitMinutesTagIsTheConstant: the heartbeat's limitMinutes tag says
// the same maximum as protocol.MaxLimitMinutes, which the reaper and the
// agent use.
func TestLimitMinutesTagIsTheConstant(t *testing.T) {
	f, _ := reflect.TypeFor[protocol.ReaperObservation]().FieldByName("LimitMinutes")
	if r := apischema.RulesOf(f.Tag); r.Maximum == nil || *r.Maximum != protocol.MaxLimitMinutes {
		t.Fatalf("limitMinutes tag maximum %v; protocol.MaxLimitMinutes is %d", r.Maximum, protocol.MaxLimitMinutes)
	}
}

// requestSchema is the JSON request body schema of method path.
func requestSchema(t *testing.T, doc *openapi3.T, method, path string) *openapi3.Schema {
	t.Helper()
	item := doc.Paths.Find(openAPIPath(path))
	if item == nil || item.GetOperation(method) == nil || item.GetOperation(method).RequestBody == nil {
		t.Fatalf("%s %s has no request body in the document", method, path)
	}
	return item.GetOperation(method).RequestBody.Value.Content.Get("application/json").Schema.Value
}

func decoded(t *testing.T, b []byte) any {
	t.Helper()
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	return v
}
