package e2e

// Issue 33's checks from outside, with tools nobody here wrote: a client
// generated from the daemon's OpenAPI document by openapi-typescript,
// compiled by tsc --strict and run by node, calls every GET operation and
// the ingest routes and each answer is validated against the document
// (docs/operations.md, "OpenAPI"); `promtool check metrics` on a scrape of
// a daemon that has seen every kind of traffic, and every label name a
// series carries is one of a bounded set (docs/operations.md, "Metrics").

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/chalupa-run/chalupa/daemon/daemontest"
	"github.com/chalupa-run/chalupa/digitalocean/dofake"
	"github.com/chalupa-run/chalupa/internal/proctest"
	"github.com/chalupa-run/chalupa/protocol"
)

// ifaceCall is one request the generated client sends (the plan the node
// program reads: e2e/testdata/oapiclient/client.ts).
type ifaceCall struct {
	OperationID string            `json:"operationId"`
	Template    string            `json:"template"`
	Method      string            `json:"method"`
	Path        string            `json:"path"`
	Headers     map[string]string `json:"headers"`
	Body        *string           `json:"body,omitempty"`
	// want2xx: the call must succeed (its objects exist); otherwise any
	// answer the document declares will do (a refusal on purpose, or an
	// object this test does not make).
	want2xx bool
}

// ifaceAnswer is one line the node program prints.
type ifaceAnswer struct {
	OperationID string `json:"operationId"`
	Template    string `json:"template"`
	Method      string `json:"method"`
	Status      int    `json:"status"`
	ContentType string `json:"contentType"`
	Body        string `json:"body"`
}

// ifaceFleet is the daemon and the names the traffic used.
type ifaceFleet struct {
	d                         *proctest.Daemon
	slug, deployment, session string
	keyID                     string
	key                       []byte
	droplet                   int
}

// signed returns a POST of v to path signed with the environment's key as
// of now (docs/operations.md, "Signed ingest"): the node program sends
// the precomputed headers, so each plan is sent once.
func (f *ifaceFleet) signed(t *testing.T, opID, path string, v any) ifaceCall {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	h := http.Header{}
	protocol.Attach(h, f.keyID, f.key, strconv.FormatInt(time.Now().Unix(), 10), protocol.NewNonce(), http.MethodPost, path, b)
	hs := map[string]string{"Content-Type": "application/json"}
	for k := range h {
		hs[k] = h.Get(k)
	}
	body := string(b)
	return ifaceCall{OperationID: opID, Template: path, Method: "post", Path: path, Headers: hs, Body: &body, want2xx: true}
}

// runClient writes plan, runs the compiled client on it and returns its
// answers, one per call, in order.
func runClient(t *testing.T, node, dir string, f *ifaceFleet, calls []ifaceCall) []ifaceAnswer {
	t.Helper()
	b, err := json.Marshal(map[string]any{"baseUrl": f.d.URL, "calls": calls})
	if err != nil {
		t.Fatal(err)
	}
	plan := filepath.Join(dir, "plan-"+strconv.FormatInt(time.Now().UnixNano(), 10)+".json")
	if err := os.WriteFile(plan, b, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(node, filepath.Join(dir, "out", "client.js"), plan)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node client.js: %v\n%s", err, stderr.String())
	}
	var answers []ifaceAnswer
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var a ifaceAnswer
		if err := json.Unmarshal(sc.Bytes(), &a); err != nil {
			t.Fatalf("client printed %q: %v", sc.Text(), err)
		}
		answers = append(answers, a)
	}
	if len(answers) != len(calls) {
		t.Fatalf("client answered %d of %d calls", len(answers), len(calls))
	}
	return answers
}

// TestInterfacesFromOutside: one daemon (dofake as DigitalOcean, versitygw
// for logs) receives heartbeats, telemetry, lifecycle events, a run
// report, a log session with a committed chunk, refusals, admin reads and
// the reaper's and cost worker's passes; the generated client makes most
// of that traffic. Then the answers are checked against the document and
// the scrape against promtool and the label rule.
func TestInterfacesFromOutside(t *testing.T) {
	t.Parallel()
	bin := proctest.BuildBinary(t)
	promtool := proctest.Promtool(t)
	generator := proctest.ToolPath(t, "openapi-typescript")
	tsc := proctest.ToolPath(t, "tsc")
	node, err := exec.LookPath("node")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("node is missing (CI=true)")
		}
		t.Skip("node is missing: the generated client runs on it")
	}
	gw := proctest.StartVersityGW(t)
	fake := dofake.New(t)
	writeToken := fake.AddToken("write", dofake.FullAccess...)
	readToken := fake.AddToken("read", dofake.ReadOnly...)
	f := &ifaceFleet{slug: "iface-demo", deployment: "dep-iface-1", session: "s-iface"}
	f.droplet = fake.AddDroplet(dofake.Droplet{Tags: dofake.EnvTags(f.slug)}).ID
	f.d = proctest.Start(t, bin, proctest.Options{Env: map[string]string{
		"CHALUPA_DO_API_URL": fake.URL, "DIGITALOCEAN_WRITE_TOKEN": writeToken, "DIGITALOCEAN_READ_TOKEN": readToken,
		"CHALUPA_LOGS_URL": "s3://" + gw.Bucket + "/logs?endpoint=" + gw.Endpoint + "&region=us-east-1",
		"CHALUPA_LOGS_KEY": gw.AccessKey, "CHALUPA_LOGS_SECRET": gw.SecretKey,
	}})
	k := daemontest.EnvironmentKey(t, f.d.Admin(), f.slug)
	f.keyID = k.KeyID
	if f.key, err = protocol.DecodeKeyMaterial(k.KeyMaterial); err != nil {
		t.Fatal(err)
	}

	// The client: generated from the served document, compiled strictly.
	r, err := f.d.Do(context.Background(), "GET", "/api/admin/openapi.json", proctest.Bearer(f.d.AdminToken()), nil)
	if err != nil || r.Status != http.StatusOK {
		t.Fatalf("GET /api/admin/openapi.json: %v %v", err, r)
	}
	doc, err := openapi3.NewLoader().LoadFromData(r.Body)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, name := range []string{"client.ts", "node-min.d.ts", "tsconfig.json"} {
		b, err := os.ReadFile(filepath.Join("e2e", "testdata", "oapiclient", name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "openapi.json"), r.Body, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range [][]string{
		{generator, "openapi.json", "-o", "schema.d.ts"},
		{tsc, "-p", "."},
	} {
		start := time.Now()
		cmd := exec.Command(c[0], c[1:]...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", filepath.Base(c[0]), err, out)
		}
		t.Logf("%s took %v", filepath.Base(c[0]), time.Since(start).Round(time.Millisecond))
	}

	// First run: the ingest routes up to the chunk's plan.
	now := time.Now().UTC()
	chunk := bytes.Repeat([]byte("cloud-init: module ran\n"), 50)
	sum := sha256.Sum256(chunk)
	chunkBody := protocol.ChunkV1{EnvironmentSlug: f.slug, DeploymentID: f.deployment, SessionID: f.session, Seq: 0,
		Size: int64(len(chunk)), SHA256: hex.EncodeToString(sum[:])}
	first := []ifaceCall{
		f.signed(t, "ingestHeartbeat", "/api/ingest/heartbeat", protocol.HeartbeatV1{EnvironmentSlug: f.slug,
			Deployment: protocol.HeartbeatDeploy{ID: f.deployment, DropletID: int64(f.droplet), Region: "nyc3"}, AgentVersion: "e2e/1",
			SentAt: now, Reaper: protocol.ReaperObservation{LimitMinutes: 60, LastActivityAt: now}}),
		f.signed(t, "ingestTelemetry", "/api/ingest/telemetry", protocol.WindowV1{EnvironmentSlug: f.slug, DeploymentID: f.deployment,
			SessionID: "sess-web", WindowStart: now.Truncate(time.Minute).Add(-2 * time.Minute), WindowSeconds: 60,
			Metrics: protocol.MetricsV1{CPUPct: &protocol.PercentAggV1{N: 12, Sum: 120, Min: 9, Max: 11, Last: 10}}}),
		f.signed(t, "ingestLifecycle", "/api/ingest/lifecycle", protocol.LifecycleEventV1{EnvironmentSlug: f.slug, ID: "boot-1",
			Kind: protocol.EventBooted, OccurredAt: now, Deployment: protocol.LifecycleDeploy{ID: f.deployment}}),
		f.signed(t, "ingestRuns", "/api/ingest/runs", protocol.RunReportV1{EnvironmentSlug: f.slug, DeploymentID: f.deployment,
			RunID: "run-1", Suite: "unit", Status: "passed", StartedAt: now.Add(-time.Minute), FinishedAt: now,
			Artifacts: []protocol.ArtifactRefV1{}}),
		f.signed(t, "ingestLogs/sessions", "/api/ingest/logs/sessions", protocol.OpenV1{EnvironmentSlug: f.slug,
			DeploymentID: f.deployment, SessionID: f.session, Service: "cloud-init.service"}),
		f.signed(t, "ingestLogs/plan", "/api/ingest/logs/plan", chunkBody),
	}
	// A refusal: the heartbeat's headers on another body.
	bad := f.signed(t, "ingestHeartbeat", "/api/ingest/heartbeat", map[string]string{"environmentSlug": f.slug})
	other := `{"environmentSlug":"` + f.slug + `","tampered":true}`
	bad.Body, bad.want2xx = &other, false
	first = append(first, bad)
	answers := runClient(t, node, dir, f, first)
	var planned protocol.LogChunkPlanned
	if a := answers[5]; a.Status != http.StatusAccepted || json.Unmarshal([]byte(a.Body), &planned) != nil || planned.Upload == nil {
		t.Fatalf("logs/plan: %d %s", a.Status, a.Body)
	}
	req, _ := http.NewRequest(planned.Upload.Method, planned.Upload.URL, bytes.NewReader(chunk))
	for h, v := range planned.Upload.Headers {
		req.Header.Set(h, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("chunk upload: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		t.Fatalf("chunk upload: %d", resp.StatusCode)
	}

	// Second run: commit and finish, then every GET operation of the
	// document with the objects made above.
	second := []ifaceCall{
		f.signed(t, "ingestLogs/commit", "/api/ingest/logs/commit", chunkBody),
		f.signed(t, "ingestLogs/finish", "/api/ingest/logs/finish", protocol.FinishV1{EnvironmentSlug: f.slug,
			DeploymentID: f.deployment, SessionID: f.session, Final: protocol.FinalV1{Chunks: 1, Bytes: int64(len(chunk))}}),
	}
	second = append(second, ifaceGets(t, doc, f)...)
	// A cost pass now (the loop's is on the quarter hour), so the
	// month-to-date series exist when the scrape is taken.
	second = append(second, ifaceCall{OperationID: "adminReconcileCosts", Template: "/api/admin/costs/reconcile", Method: "post",
		Path: "/api/admin/costs/reconcile", Headers: map[string]string{"Authorization": "Bearer " + f.d.AdminToken()}, want2xx: true})
	// A refusal on the admin side: no token.
	second = append(second, ifaceCall{OperationID: "adminGetStatus", Template: "/api/admin/status", Method: "get",
		Path: "/api/admin/status", Headers: map[string]string{}})
	calls := append(first, second...)
	answers = append(answers, runClient(t, node, dir, f, second)...)

	t.Run("every GET and ingest operation called", func(t *testing.T) {
		called := map[string]bool{}
		for _, c := range calls {
			called[strings.ToUpper(c.Method)+" "+c.Template] = true
		}
		for tmpl, item := range doc.Paths.Map() {
			for method := range item.Operations() {
				if (method == http.MethodGet || strings.HasPrefix(tmpl, "/api/ingest/")) && !called[method+" "+tmpl] {
					t.Errorf("%s %s was not called", method, tmpl)
				}
			}
		}
	})
	validated, closed := 0, 0
	for i, a := range answers {
		c := calls[i]
		t.Run("answer "+strconv.Itoa(i)+" "+c.OperationID+" "+strconv.Itoa(a.Status), func(t *testing.T) {
			if c.want2xx && a.Status/100 != 2 {
				t.Fatalf("%s %s: %d %s", c.Method, c.Path, a.Status, a.Body)
			}
			isClosed, err := ifaceValidate(doc, a)
			if err != nil {
				t.Fatalf("%s %s answered %d: %v\nbody: %.400s", c.Method, c.Path, a.Status, err, a.Body)
			}
			validated++
			if isClosed {
				closed++
			}
		})
	}
	t.Logf("generated client: %d calls, %d answers validated against the document, %d of them against a closed object schema", len(calls), validated, closed)

	// Metrics: the scrape after all of that traffic.
	r, err = f.d.Do(context.Background(), "GET", "/metrics", proctest.Bearer(f.d.ReadyToken()), nil)
	if err != nil || r.Status != http.StatusOK {
		t.Fatalf("GET /metrics: %v %v", err, r)
	}
	scrape := r.Body
	if !bytes.Contains(scrape, []byte(`chalupa_cost_month_to_date_usd{environment="`+f.slug+`"}`)) {
		t.Errorf("no month-to-date series for %s after a cost pass", f.slug)
	}
	t.Run("promtool check metrics", func(t *testing.T) { ifacePromtool(t, promtool, scrape) })
	t.Run("build info", func(t *testing.T) { ifaceBuildInfo(t, scrape) })
	t.Run("labels bounded", func(t *testing.T) { ifaceLabels(t, scrape, f) })
}

// ifaceGets plans every GET operation of doc, path parameters filled with
// the objects f made; an object this test does not make (a job, an agent
// rollout, a box) gets an id that names nothing, and the answer need only
// be one the document declares.
func ifaceGets(t *testing.T, doc *openapi3.T, f *ifaceFleet) []ifaceCall {
	t.Helper()
	const none = "01ARZ3NDEKTSV4RRFFQ69G5FAV"
	var out []ifaceCall
	var templates []string
	for tmpl, item := range doc.Paths.Map() {
		if item.Get != nil {
			templates = append(templates, tmpl)
		}
	}
	sort.Strings(templates)
	for _, tmpl := range templates {
		op := doc.Paths.Value(tmpl).Get
		want2xx := true
		segs := strings.Split(tmpl, "/")
		for i, s := range segs {
			if !strings.HasPrefix(s, "{") {
				continue
			}
			name := strings.Trim(s, "{}")
			switch {
			case name == "slug":
				segs[i] = f.slug
			case name == "id" && i > 0 && segs[i-1] == "deployments":
				segs[i] = f.deployment
			case name == "session":
				segs[i] = f.session
			case name == "seq":
				segs[i] = "0"
			default:
				segs[i] = none
				want2xx = false
			}
		}
		headers := map[string]string{}
		switch {
		case strings.HasPrefix(tmpl, "/api/admin/"):
			headers["Authorization"] = "Bearer " + f.d.AdminToken()
		case tmpl == "/api/ready" || tmpl == "/metrics":
			headers["Authorization"] = "Bearer " + f.d.ReadyToken()
		}
		out = append(out, ifaceCall{OperationID: op.OperationID, Template: tmpl, Method: "get", Path: strings.Join(segs, "/"),
			Headers: headers, want2xx: want2xx})
	}
	return out
}

// ifaceValidate checks a against the response doc declares for its
// operation and status (else its default): the media type must be
// declared, and a JSON body must satisfy the schema. closed reports
// whether that schema is an object schema with additionalProperties
// false.
func ifaceValidate(doc *openapi3.T, a ifaceAnswer) (closed bool, err error) {
	item := doc.Paths.Value(a.Template)
	if item == nil {
		return false, fmt.Errorf("no path %s in the document", a.Template)
	}
	op := item.GetOperation(strings.ToUpper(a.Method))
	if op == nil {
		return false, fmt.Errorf("no %s operation", a.Method)
	}
	rr := op.Responses.Status(a.Status)
	if rr == nil {
		rr = op.Responses.Default()
	}
	if rr == nil || rr.Value == nil {
		return false, fmt.Errorf("status %d is not documented", a.Status)
	}
	mt := strings.TrimSpace(strings.Split(a.ContentType, ";")[0])
	media := rr.Value.Content.Get(mt)
	if media == nil {
		return false, fmt.Errorf("content type %q is not documented for %d", mt, a.Status)
	}
	if mt != "application/json" {
		return false, nil
	}
	var body any
	if err := json.Unmarshal([]byte(a.Body), &body); err != nil {
		return false, fmt.Errorf("not JSON: %v", err)
	}
	if media.Schema == nil || media.Schema.Value == nil {
		return false, fmt.Errorf("no schema for %d %s", a.Status, mt)
	}
	s := media.Schema.Value
	if err := s.VisitJSON(body, openapi3.EnableJSONSchema2020(), openapi3.VisitAsResponse(), openapi3.MultiErrors()); err != nil {
		return false, err
	}
	if extra := ifaceUndeclared(s, body, "$", 0); len(extra) > 0 {
		return false, fmt.Errorf("fields the schema does not declare (a generated client drops them): %v", extra)
	}
	ap := s.AdditionalProperties
	return ap.Has != nil && !*ap.Has, nil
}

// ifaceUndeclared lists the object fields of v, at any depth, that s
// neither declares as a property nor admits through additionalProperties:
// an answer judged as if its schemas were closed, whether or not the
// document says additionalProperties false yet. Alternatives (oneOf,
// anyOf) are not descended into.
func ifaceUndeclared(s *openapi3.Schema, v any, at string, depth int) []string {
	if s == nil || depth > 32 {
		return nil
	}
	var out []string
	switch x := v.(type) {
	case map[string]any:
		props := map[string]*openapi3.Schema{}
		for name, p := range s.Properties {
			props[name] = p.Value
		}
		for _, a := range s.AllOf {
			if a.Value != nil {
				for name, p := range a.Value.Properties {
					props[name] = p.Value
				}
			}
		}
		open := len(props) == 0 || (s.AdditionalProperties.Has != nil && *s.AdditionalProperties.Has)
		for k, fv := range x {
			p, ok := props[k]
			switch {
			case ok:
				out = append(out, ifaceUndeclared(p, fv, at+"."+k, depth+1)...)
			case s.AdditionalProperties.Schema != nil:
				out = append(out, ifaceUndeclared(s.AdditionalProperties.Schema.Value, fv, at+"."+k, depth+1)...)
			case !open:
				out = append(out, at+"."+k)
			}
		}
	case []any:
		if s.Items != nil {
			for i, e := range x {
				out = append(out, ifaceUndeclared(s.Items.Value, e, at+"["+strconv.Itoa(i)+"]", depth+1)...)
			}
		}
	}
	sort.Strings(out)
	return out
}

// ifaceDeprecatedNames are series kept under an old name for one release
// after a rename, with the name that replaces them (docs/operations.md,
// "Metrics"). Their HELP must start "Deprecated" so a reader of the scrape
// knows; each is removed in the release after next.
var ifaceDeprecatedNames = map[string]string{
	"chalupa_cost_month_to_date_total_usd": "sum(chalupa_cost_month_to_date_usd)",
}

// ifacePromtool runs `promtool check metrics` (Prometheus's own linter,
// Debian's package) on scrape, which must find nothing, and applies the
// naming rule promtool 2.42 checks only at the end of a name: `_total`
// belongs to counters alone, anywhere in the name (a gauge
// chalupa_x_total_usd reads as a counter).
func ifacePromtool(t *testing.T, promtool string, scrape []byte) {
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = bytes.NewReader(scrape)
	if out, err := cmd.CombinedOutput(); err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}
	families := ifaceFamilies(t, scrape)
	for name, fam := range families {
		if strings.Contains(name+"_", "_total_") && fam.GetType().String() != "COUNTER" {
			if repl, ok := ifaceDeprecatedNames[name]; ok && strings.HasPrefix(fam.GetHelp(), "Deprecated") {
				t.Logf("%s: deprecated, replaced by %s", name, repl)
				continue
			}
			t.Errorf("%s is a %s with _total in its name: only counters end in _total", name, fam.GetType())
		}
	}
	for name, repl := range ifaceDeprecatedNames {
		repName := strings.TrimSuffix(strings.TrimPrefix(repl, "sum("), ")")
		if families[repName] == nil {
			t.Errorf("%s is deprecated for %s, which is not on the scrape", name, repName)
		}
	}
}

// ifaceFamilies parses a scrape.
func ifaceFamilies(t *testing.T, scrape []byte) map[string]*dto.MetricFamily {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(scrape))
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	return fams
}

// ifaceBuildInfo: chalupa_build_info is one series, 1, with the four
// labels, none empty, go_version the Go release's and litestream_version
// the module's (v0.5.18 and later: a tagged version).
func ifaceBuildInfo(t *testing.T, scrape []byte) {
	fam := ifaceFamilies(t, scrape)["chalupa_build_info"]
	if fam == nil || len(fam.GetMetric()) != 1 {
		t.Fatalf("chalupa_build_info: %v, want one series", fam)
	}
	m := fam.GetMetric()[0]
	if m.GetGauge().GetValue() != 1 {
		t.Errorf("chalupa_build_info is %v, want 1", m.GetGauge().GetValue())
	}
	got := map[string]string{}
	for _, l := range m.GetLabel() {
		got[l.GetName()] = l.GetValue()
	}
	for _, k := range []string{"version", "commit", "go_version", "litestream_version"} {
		if got[k] == "" {
			t.Errorf("chalupa_build_info has no %s: %v", k, got)
		}
	}
	if len(got) != 4 {
		t.Errorf("chalupa_build_info labels %v, want exactly version, commit, go_version, litestream_version", got)
	}
	if !strings.HasPrefix(got["go_version"], "go1.") || !strings.HasPrefix(got["litestream_version"], "v0.") {
		t.Errorf("chalupa_build_info %v: go_version or litestream_version is not a version", got)
	}
}

// ifaceBoundedLabels are the label names a chalupa series may carry, each
// with what bounds its values (docs/operations.md, "Metrics"). A name not
// here fails the test: decide its bound, document it, then add it.
var ifaceBoundedLabels = map[string]string{
	"route":              "the route pattern (the mux's, or the ingest route), never the request's path",
	"method":             "HTTP methods the routes accept",
	"code":               "HTTP status codes",
	"result":             "a fixed result or refusal code per family",
	"quota":              "the quotas of docs/operations.md, \"Quotas\"",
	"environment":        "environment slugs: environments are made by the operator, one per project",
	"scope":              "the clock offset's scopes (fleet, environments)",
	"mode":               "configured modes, one value each",
	"loop":               "the background loops' names",
	"kind":               "fixed kinds per family",
	"reason":             "fixed reasons per family",
	"hold":               "the reaper's holds (docs/operations.md, \"Reaper\")",
	"severity":           "critical or warning (docs/operations.md, \"Alerts\")",
	"version":            "chalupa_build_info: one per binary",
	"commit":             "chalupa_build_info: one per binary",
	"go_version":         "chalupa_build_info: one per binary",
	"litestream_version": "chalupa_build_info: one per binary",
}

// ifaceLabels: every label name of the scrape is bounded, and no label
// value carries an id the traffic used (the deployment, the key, the
// session, the droplet, a request path with a slug): those are unbounded.
func ifaceLabels(t *testing.T, scrape []byte, f *ifaceFleet) {
	names := map[string][]string{}
	for name, fam := range ifaceFamilies(t, scrape) {
		for _, m := range fam.GetMetric() {
			for _, l := range m.GetLabel() {
				names[l.GetName()] = append(names[l.GetName()], name)
				v := l.GetValue()
				for _, id := range []string{f.deployment, f.keyID, f.session, strconv.Itoa(f.droplet), "/" + f.slug + "/"} {
					if strings.Contains(v, id) {
						t.Errorf("%s{%s=%q} carries %q, an unbounded value", name, l.GetName(), v, id)
					}
				}
				if l.GetName() == "environment" && v != f.slug {
					t.Errorf("%s{environment=%q}: not an environment slug of this daemon", name, v)
				}
			}
		}
	}
	var seen []string
	for n, fams := range names {
		seen = append(seen, n)
		if _, ok := ifaceBoundedLabels[n]; !ok {
			sort.Strings(fams)
			t.Errorf("label %q (on %v) has no documented bound", n, fams)
		}
	}
	sort.Strings(seen)
	t.Logf("label names on the scrape: %v", seen)
}
