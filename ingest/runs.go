package ingest

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/chalupa-run/chalupa/internal/apischema"
	"github.com/chalupa-run/chalupa/protocol"
	"github.com/chalupa-run/chalupa/storage"
)

// Run report bounds (docs/operations.md, "Lifecycle events and runs").
const (
	// MaxRunBody bounds a run report body (bytes): 256 KiB holds
	// MaxArtifactsPerRun artifacts with URLs of the longest accepted length.
	MaxRunBody = 256 << 10
	// MaxArtifactsPerRun caps the artifacts of one run: a suite's reports,
	// logs and bundles, not a file listing.
	MaxArtifactsPerRun = 64
	// MaxRunsPerDeployment caps the runs one deployment holds (429
	// run_quota beyond it): a CI job every ten minutes for a week; with
	// MaxArtifactsPerRun it bounds what one leaked environment key writes
	// per deployment, as the telemetry receipt cap does.
	MaxRunsPerDeployment = 1000
	// maxArtifactURL is the longest https locator accepted (bytes).
	maxArtifactURL = 2048
	// maxArtifactName is the longest artifact name (bytes).
	maxArtifactName = 255
	// maxMediaType is the longest media type the mediaType pattern admits
	// (bytes).
	maxMediaType = 255
	// MaxRunArtifactBytes is the most ArtifactBytes one report can carry:
	// MaxArtifactsPerRun artifacts of the longest name, media type and
	// locator (167,808 bytes, 164 KiB).
	MaxRunArtifactBytes = MaxArtifactsPerRun * (maxArtifactName + maxMediaType + maxArtifactURL + 64)
)

// credentialParams are query parameter names (lower-cased) that carry
// credentials: a URL holding one is refused, since run reports are shown to
// the operator and replicated with the database.
var credentialParams = map[string]bool{
	"token": true, "access_token": true, "auth": true, "key": true, "apikey": true, "api_key": true,
	"password": true, "secret": true, "sig": true, "signature": true,
	"x-amz-signature": true, "x-amz-credential": true, "x-amz-security-token": true,
	"x-goog-signature": true, "x-goog-credential": true,
}

// deref is *p, or "" for nil.
func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// RunAccepted is the 202 body of POST /api/ingest/runs.
type RunAccepted struct {
	Accepted bool `json:"accepted"`
	// Deduplicated is true for a retry of a run already stored with the
	// same fingerprint: nothing was written.
	Deduplicated bool `json:"deduplicated"`
}

// normalizeRun validates r and puts it in normal form: times in UTC at
// millisecond resolution, hex digits and media types lower-case, artifacts
// sorted by name. Messages name a field, never its value.
func normalizeRun(r *protocol.RunReportV1, now time.Time) *Refusal {
	bad := func(msg string) *Refusal { return refuse(http.StatusUnprocessableEntity, "invalid_body", "%s", msg) }
	// The rules RunReportV1's schema tags declare, which the OpenAPI
	// document carries too (docs/operations.md, "OpenAPI").
	// Among them suite, the times, the artifacts' count and each
	// artifact's v, name, mediaType, sizeBytes, sha256 and locator syntax.
	if v := apischema.Check(r); v != nil {
		return bad(v.Message())
	}
	// What a schema cannot state: the years, the times' order and the
	// server's clock, unique names and each locator's rules.
	switch {
	case !utcYearInRange(r.StartedAt) || !utcYearInRange(r.FinishedAt):
		return bad("startedAt and finishedAt are required")
	case r.FinishedAt.Before(r.StartedAt):
		return bad("finishedAt must not be before startedAt")
	case r.FinishedAt.After(now.Add(SkewWindow)):
		return bad("finishedAt is in the future")
	}
	r.StartedAt = r.StartedAt.UTC().Truncate(time.Millisecond)
	r.FinishedAt = r.FinishedAt.UTC().Truncate(time.Millisecond)
	r.Commit = strings.ToLower(r.Commit)
	names := make(map[string]bool, len(r.Artifacts))
	for i := range r.Artifacts {
		a := &r.Artifacts[i]
		if rf := validateArtifact(a); rf != nil {
			return rf
		}
		if names[a.Name] {
			return bad("artifact names must be unique within a run")
		}
		names[a.Name] = true
		a.SHA256 = strings.ToLower(a.SHA256)
		a.MediaType = strings.ToLower(a.MediaType)
	}
	sort.Slice(r.Artifacts, func(i, j int) bool { return r.Artifacts[i].Name < r.Artifacts[j].Name })
	return nil
}

// validateArtifact checks one artifact reference (422 invalid_body) for
// what its schema tags cannot state, which normalizeRun's Check ran
// first: each locator kind's own field, the URL's host, userinfo,
// fragment and credentials. Messages name the
// field, never its value.
func validateArtifact(a *protocol.ArtifactRefV1) *Refusal {
	bad := func(msg string) *Refusal { return refuse(http.StatusUnprocessableEntity, "invalid_body", "%s", msg) }
	switch a.Locator.Kind {
	case "https":
		if a.Locator.ID != nil || a.Locator.URL == nil {
			return bad("an https locator has a url and no id")
		}
		if !safeHTTPSURL(*a.Locator.URL) {
			return bad("artifact locator url must be an https URL with a host and no credentials or control characters")
		}
	case "local":
		if a.Locator.URL != nil || a.Locator.ID == nil {
			return bad("a local locator has an id and no url")
		}
	default:
		return bad("artifact locator kind must be https or local")
	}
	return nil
}

// safeHTTPSURL reports whether raw is an https URL chalupa may store and
// show: at most maxArtifactURL bytes of printable ASCII without spaces or
// backslashes, scheme exactly "https", a host, no userinfo, and no query
// parameter that carries a credential (credentialParams).
func safeHTTPSURL(raw string) bool {
	if len(raw) > maxArtifactURL || !strings.HasPrefix(raw, "https://") {
		return false
	}
	for i := 0; i < len(raw); i++ {
		if c := raw[i]; c <= 0x20 || c >= 0x7f || c == '\\' {
			return false
		}
	}
	u, err := url.Parse(raw)
	// A fragment is refused whole: it never reaches a server, so a locator
	// has no use for one, and tokens travel in it (#access_token=…).
	if err != nil || u.Scheme != "https" || u.User != nil || u.Hostname() == "" || u.Opaque != "" ||
		strings.Contains(raw, "#") {
		return false
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil || hasControl(u.Path) {
		return false
	}
	for k, vs := range q {
		if credentialParams[strings.ToLower(k)] || hasControl(k) {
			return false
		}
		for _, v := range vs {
			if hasControl(v) {
				return false
			}
		}
	}
	return true
}

// hasControl reports a control character (C0 or DEL) in s: checked again
// after percent-decoding, so %0d%0a or %00 in a path or query cannot
// smuggle one past the raw-byte check.
func hasControl(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] == 0x7f {
			return true
		}
	}
	return false
}

// ArtifactBytes is what r's artifact references take as text: each
// artifact's name, media type, sha256 and locator (URL or id), in bytes.
// The artifact-bytes rate quotas count it (docs/operations.md, "Quotas"):
// it is what a run report stores beyond its few bounded fields.
func ArtifactBytes(r *protocol.RunReportV1) int {
	n := 0
	for _, a := range r.Artifacts {
		n += len(a.Name) + len(a.MediaType) + len(a.SHA256) + len(deref(a.Locator.URL)) + len(deref(a.Locator.ID))
	}
	return n
}

// runFingerprint is the SHA-256 of the normalized run: its fields and its
// artifact array (sorted by name), re-encoded in a fixed order. The
// environment is the key's, so it is not part of it.
func runFingerprint(r *protocol.RunReportV1) [32]byte {
	b, _ := json.Marshal(r) // strings, numbers and times only: cannot fail
	return sha256.Sum256(b)
}

// Runs handles POST /api/ingest/runs for a request Authenticate verified
// (with MaxRunBody): one CI suite run, stored with its artifacts in the
// same writer unit as the nonce claim. A report whose fingerprint matches
// the stored run of its runId is 202 deduplicated with nothing written
// (not even the nonce); another fingerprint is 409 run_conflict. An unknown
// deployment is 404 deployment_not_found; a deployment at
// MaxRunsPerDeployment is 429 run_quota. Before the unit, the run rate
// quotas (reports, and their ArtifactBytes, per deployment and per
// environment) may refuse it 429 rate_limited with Retry-After, and a run
// beyond the environment's storage budget is 429 storage_quota
// (docs/operations.md, "Quotas"). Every refusal writes nothing
// (docs/operations.md, "Lifecycle events and runs").
func (s *Service) Runs(ctx context.Context, v Verified) Response {
	var run protocol.RunReportV1
	var fp [32]byte
	parse := func(body []byte) *Refusal {
		if rf := DecodeBody(body, &run); rf != nil {
			return rf
		}
		if rf := normalizeRun(&run, s.clock.Now()); rf != nil {
			return rf
		}
		fp = runFingerprint(&run)
		return nil
	}
	record := func(environmentID int64) storage.Run {
		rec := storage.Run{
			EnvironmentID: environmentID, RunID: run.RunID, DeploymentID: run.DeploymentID, Suite: run.Suite,
			Status: run.Status, CommitSHA: run.Commit, StartedAt: run.StartedAt, FinishedAt: run.FinishedAt,
			Fingerprint: fp, ReceivedAt: s.clock.Now().UTC(), Artifacts: make([]storage.Artifact, len(run.Artifacts)),
		}
		for i, a := range run.Artifacts {
			rec.Artifacts[i] = storage.Artifact{Name: a.Name, MediaType: a.MediaType, SizeBytes: a.SizeBytes, SHA256: a.SHA256,
				LocatorKind: a.Locator.Kind, LocatorURL: deref(a.Locator.URL), LocatorID: deref(a.Locator.ID)}
		}
		return rec
	}
	// Before the writer (docs/operations.md, "Quotas"): the run rates — a
	// report costs one run and its artifact bytes — then the storage budget.
	admit := func() *Refusal {
		if rf := s.admitRate(s.runRate, v, run.EnvironmentSlug, run.DeploymentID, 1, ArtifactBytes(&run)); rf != nil {
			return rf
		}
		return s.admitStorage(v, run.EnvironmentSlug, storage.RunCharge(record(0)))
	}
	return s.handleAdmitted(ctx, v, parse, admit, func(ctx context.Context, tx storage.Tx, v Verified) (any, error) {
		environmentID, err := resolveEnvironment(ctx, tx, v, run.EnvironmentSlug)
		if err != nil {
			return nil, err
		}
		rec := record(environmentID)
		res, err := storage.RecordRun(ctx, tx, rec, MaxRunsPerDeployment)
		switch {
		case errors.Is(err, storage.ErrConflict):
			return nil, refuse(http.StatusConflict, "run_conflict", "a different report of this runId was already accepted")
		case errors.Is(err, storage.ErrNotFound):
			return nil, refuse(http.StatusNotFound, "deployment_not_found", "the deployment does not exist in this environment; a heartbeat or a launched event creates it")
		case errors.Is(err, storage.ErrRunQuota):
			return nil, refuse(http.StatusTooManyRequests, "run_quota", "the deployment holds the maximum number of runs (%d)", MaxRunsPerDeployment)
		case err != nil:
			return nil, err
		}
		if res.Deduplicated {
			return nil, &noChange{body: RunAccepted{Accepted: true, Deduplicated: true}}
		}
		if err := s.checkStorage(ctx, tx, environmentID, run.EnvironmentSlug, storage.RunCharge(rec)); err != nil {
			return nil, err
		}
		return RunAccepted{Accepted: true}, nil
	})
}
