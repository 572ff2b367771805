package ingest_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chalupa-run/chalupa/daemon/daemontest"
	"github.com/chalupa-run/chalupa/ingest"
	"github.com/chalupa-run/chalupa/protocol"
)

// TestIngestRunsAnswers: POST /api/ingest/runs (docs/operations.md,
// "Lifecycle events and runs"): a report is stored with its artifacts; a
// retry with the same fingerprint (even re-encoded) is 202 deduplicated and
// writes nothing; another report under the run id is 409; every unsafe or
// malformed report is refused with nothing written, not even the nonce;
// adminListRuns lists what was stored.
func TestIngestRunsAnswers(t *testing.T) {
	h := daemontest.NewIngest(t, daemontest.IngestOptions{})
	h.CreateEnv("demo-harbor")
	k := h.Issue("demo-harbor")
	if r := h.Send(daemontest.SignedReq{KeyID: k.ID, Key: k.Raw, Body: h.Heartbeat(daemontest.HeartbeatOpts{Env: "demo-harbor", Deployment: "dep-1"})}); r.Status != http.StatusAccepted {
		t.Fatalf("heartbeat: %s", r)
	}
	send := func(body []byte) daemontest.Response {
		return h.Send(daemontest.SignedReq{KeyID: k.ID, Key: k.Raw, Body: body, Path: ingest.RunsRoute})
	}
	first := h.RunReport("demo-harbor", "dep-1", "run-1", nil)
	if r := send(first); r.Status != http.StatusAccepted || !strings.Contains(string(r.Body), `"deduplicated":false`) {
		t.Fatalf("first report: %s", r)
	}
	raw := string(h.RunReport("demo-harbor", "dep-1", "run-2", nil))
	replace := func(old, new string) []byte {
		if !strings.Contains(raw, old) {
			t.Fatalf("%q not in the report", old)
		}
		return []byte(strings.Replace(raw, old, new, 1))
	}
	art := func(f func(a *protocol.ArtifactRefV1)) []byte {
		return h.RunReport("demo-harbor", "dep-1", "run-2", func(r *protocol.RunReportV1) { f(&r.Artifacts[0]) })
	}
	url := func(u string) []byte {
		return art(func(a *protocol.ArtifactRefV1) { a.Locator.URL = &u })
	}
	localID := func(id string) []byte {
		return h.RunReport("demo-harbor", "dep-1", "run-2", func(r *protocol.RunReportV1) { r.Artifacts[1].Locator.ID = &id })
	}
	for _, tc := range []struct {
		name   string
		body   []byte
		status int
		code   string
	}{
		{"exact retry", first, http.StatusAccepted, ""},
		{"retry, artifacts reordered and upper-case hex", h.RunReport("demo-harbor", "dep-1", "run-1", func(r *protocol.RunReportV1) {
			r.Artifacts[0], r.Artifacts[1] = r.Artifacts[1], r.Artifacts[0]
			r.Artifacts[0].SHA256 = strings.ToUpper(r.Artifacts[0].SHA256)
			r.StartedAt = r.StartedAt.In(time.FixedZone("x", -7200))
		}), http.StatusAccepted, ""},
		{"same run id, other status", h.RunReport("demo-harbor", "dep-1", "run-1", func(r *protocol.RunReportV1) { r.Status = "failed" }), http.StatusConflict, "run_conflict"},
		{"same run id, other artifact", h.RunReport("demo-harbor", "dep-1", "run-1", func(r *protocol.RunReportV1) { r.Artifacts[0].SizeBytes++ }), http.StatusConflict, "run_conflict"},
		{"unknown deployment", h.RunReport("demo-harbor", "dep-none", "run-2", nil), http.StatusNotFound, "deployment_not_found"},
		{"extra field in the run", replace(`"suite":`, `"extra":1,"suite":`), http.StatusUnprocessableEntity, "invalid_body"},
		{"extra field in an artifact", replace(`"name":"report.xml"`, `"name":"report.xml","extra":1`), http.StatusUnprocessableEntity, "invalid_body"},
		{"extra field in a locator", replace(`"kind":"local"`, `"kind":"local","extra":1`), http.StatusUnprocessableEntity, "invalid_body"},
		{"historical locator shape", replace(`"locator":{"kind":"https","url":"https://ci.example.com/runs/1/report.xml"}`, `"locator":"https://ci.example.com/runs/1/report.xml"`), http.StatusUnprocessableEntity, "invalid_body"},
		{"http URL", url("http://ci.example.com/r.xml"), http.StatusUnprocessableEntity, "invalid_body"},
		{"URL with userinfo", url("https://user:pass@ci.example.com/r.xml"), http.StatusUnprocessableEntity, "invalid_body"},
		{"URL with a user only", url("https://user@ci.example.com/r.xml"), http.StatusUnprocessableEntity, "invalid_body"},
		{"URL with a token", url("https://ci.example.com/r.xml?X-Amz-Signature=abc"), http.StatusUnprocessableEntity, "invalid_body"},
		{"URL without a host", url("https:///r.xml"), http.StatusUnprocessableEntity, "invalid_body"},
		{"URL with a control character", url("https://ci.example.com/r\n.xml"), http.StatusUnprocessableEntity, "invalid_body"},
		{"URL with DEL", url("https://ci.example.com/r\x7f.xml"), http.StatusUnprocessableEntity, "invalid_body"},
		{"URL with a space", url("https://ci.example.com/r .xml"), http.StatusUnprocessableEntity, "invalid_body"},
		{"URL with a backslash", url(`https://ci.example.com\@evil.example/r.xml`), http.StatusUnprocessableEntity, "invalid_body"},
		{"name with a control character", art(func(a *protocol.ArtifactRefV1) { a.Name = "rep\x1bort" }), http.StatusUnprocessableEntity, "invalid_body"},
		{"local id with ..", localID("a..b"), http.StatusUnprocessableEntity, "invalid_body"},
		{"local id with a slash", localID("a/b"), http.StatusUnprocessableEntity, "invalid_body"},
		{"local id upper-case", localID("Cover"), http.StatusUnprocessableEntity, "invalid_body"},
		{"local id empty", localID(""), http.StatusUnprocessableEntity, "invalid_body"},
		{"local id starting with a dot", localID(".hidden"), http.StatusUnprocessableEntity, "invalid_body"},
		{"local locator with a url", art(func(a *protocol.ArtifactRefV1) {
			a.Locator = protocol.LocalLocator("x")
			u := "https://a.example/x"
			a.Locator.URL = &u
		}), http.StatusUnprocessableEntity, "invalid_body"},
		{"https locator with an empty id", replace(`"url":"https://ci.example.com/runs/1/report.xml"}`, `"url":"https://ci.example.com/runs/1/report.xml","id":""}`), http.StatusUnprocessableEntity, "invalid_body"},
		{"local locator with an empty url", replace(`"kind":"local","id":"cover-1.out"}`, `"kind":"local","id":"cover-1.out","url":""}`), http.StatusUnprocessableEntity, "invalid_body"},
		{"https locator without a url", replace(`"kind":"https","url":"https://ci.example.com/runs/1/report.xml"}`, `"kind":"https"}`), http.StatusUnprocessableEntity, "invalid_body"},
		{"URL with a token in the fragment", url("https://ci.example.com/r.xml#access_token=SECRET"), http.StatusUnprocessableEntity, "invalid_body"},
		{"URL with an empty fragment", url("https://ci.example.com/r.xml#"), http.StatusUnprocessableEntity, "invalid_body"},
		{"URL with percent-encoded CR LF", url("https://ci.example.com/r%0d%0a.xml"), http.StatusUnprocessableEntity, "invalid_body"},
		{"URL with percent-encoded NUL in the query", url("https://ci.example.com/r.xml?x=%00"), http.StatusUnprocessableEntity, "invalid_body"},
		{"unknown locator kind", art(func(a *protocol.ArtifactRefV1) { a.Locator.Kind = "s3" }), http.StatusUnprocessableEntity, "invalid_body"},
		{"duplicate names", h.RunReport("demo-harbor", "dep-1", "run-2", func(r *protocol.RunReportV1) { r.Artifacts[1].Name = r.Artifacts[0].Name }), http.StatusUnprocessableEntity, "invalid_body"},
		{"v 2", art(func(a *protocol.ArtifactRefV1) { a.V = 2 }), http.StatusUnprocessableEntity, "invalid_body"},
		{"v missing", replace(`{"v":1,"name":"report.xml"`, `{"name":"report.xml"`), http.StatusUnprocessableEntity, "invalid_body"},
		{"bad sha256", art(func(a *protocol.ArtifactRefV1) { a.SHA256 = "abc" }), http.StatusUnprocessableEntity, "invalid_body"},
		{"negative size", art(func(a *protocol.ArtifactRefV1) { a.SizeBytes = -1 }), http.StatusUnprocessableEntity, "invalid_body"},
		{"bad status", h.RunReport("demo-harbor", "dep-1", "run-2", func(r *protocol.RunReportV1) { r.Status = "running" }), http.StatusUnprocessableEntity, "invalid_body"},
		{"finished before started", h.RunReport("demo-harbor", "dep-1", "run-2", func(r *protocol.RunReportV1) { r.FinishedAt = r.StartedAt.Add(-time.Second) }), http.StatusUnprocessableEntity, "invalid_body"},
		{"artifacts missing", h.RunReport("demo-harbor", "dep-1", "run-2", func(r *protocol.RunReportV1) { r.Artifacts = nil }), http.StatusUnprocessableEntity, "invalid_body"},
		{"malformed JSON", []byte(raw[:len(raw)-1]), http.StatusBadRequest, "malformed_json"},
		{"other environment", h.RunReport("other-env", "dep-1", "run-2", nil), http.StatusForbidden, "environment_mismatch"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := h.LifecycleRows()
			r := send(tc.body)
			if r.Status != tc.status || (tc.code != "" && !strings.Contains(string(r.Body), `"code":"`+tc.code+`"`)) {
				t.Fatalf("got %s, want %d %s", r, tc.status, tc.code)
			}
			if tc.status == http.StatusAccepted && !strings.Contains(string(r.Body), `"deduplicated":true`) {
				t.Fatalf("retry not deduplicated: %s", r)
			}
			if after := h.LifecycleRows(); after != before {
				t.Fatalf("rows %s -> %s: something was written", before, after)
			}
			if strings.Contains(string(r.Body), "example") {
				t.Fatalf("the refusal echoes a value: %s", r)
			}
		})
	}
	t.Run("listed", func(t *testing.T) {
		l, err := h.Admin.ListRuns(context.Background(), "demo-harbor")
		if err != nil || len(l.Runs) != 1 {
			t.Fatalf("runs = %+v, %v", l, err)
		}
		run := l.Runs[0]
		if run.RunID != "run-1" || run.Status != "passed" || len(run.Artifacts) != 2 || run.Artifacts[0].Name != "coverage" ||
			run.Artifacts[0].Locator.ID != "cover-1.out" || run.Artifacts[1].Locator.URL != "https://ci.example.com/runs/1/report.xml" || len(run.Fingerprint) != 64 {
			t.Fatalf("run = %+v", run)
		}
		if _, err := h.Admin.ListRuns(context.Background(), "no-such-env"); err == nil || !strings.Contains(err.Error(), "environment_not_found") {
			t.Fatalf("unknown environment: %v", err)
		}
	})
}
