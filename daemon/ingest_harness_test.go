package daemon_test

// The in-process harness for the signed-ingest HTTP surface: the App
// daemontest.NewInProcess assembles (daemon.Open over a real SQLite file in
// t.TempDir, migrated, master key proven, replicating to a file:// replica)
// behind an httptest server, with a fake clock shared by the daemon and the
// test's signer. Every response the harness's client receives and every
// log line the server writes are recorded; when the test ends the harness
// fails it if any secret (admin token, ready token, master key, shared key,
// issued key material in any common encoding) appears anywhere except the
// one issuance response of that material.

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/daemon"
	"github.com/chalupa-run/chalupa/daemon/daemontest"
	"github.com/chalupa-run/chalupa/internal/proctest"
	"github.com/chalupa-run/chalupa/protocol"
	"github.com/chalupa-run/chalupa/storage"
)

const heartbeatPath = "/api/ingest/heartbeat"

// recordedResponse is one response as the client saw it.
type recordedResponse struct {
	what   string // "METHOD path -> status"
	header http.Header
	body   []byte
}

// recorder is an http.RoundTripper that keeps every response's header and
// body (it reads the body in full and hands the client a copy).
type recorder struct {
	next http.RoundTripper
	mu   sync.Mutex
	all  []recordedResponse
	// max bounds how many responses are kept (0: unbounded).
	max int
}

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := r.next.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(b))
	r.mu.Lock()
	if r.max == 0 || len(r.all) < r.max {
		r.all = append(r.all, recordedResponse{
			what:   fmt.Sprintf("%s %s -> %d", req.Method, req.URL.Path, resp.StatusCode),
			header: resp.Header.Clone(), body: b,
		})
	}
	r.mu.Unlock()
	return resp, nil
}

func (r *recorder) snapshot() []recordedResponse {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]recordedResponse(nil), r.all...)
}

// harnessOptions configures newIngestHarness.
type harnessOptions struct {
	// SharedKey, when set, is CHALUPA_INGEST_KEY.
	SharedKey string
	// NoLeakCheck skips the secret scan at cleanup (the fuzz target, whose
	// responses are not recorded anyway).
	NoLeakCheck bool
	// Epoch is the clock's start; zero means now (whole seconds).
	Epoch time.Time
	// Env adds variables to the daemon's environment (CHALUPA_QUOTA_*).
	Env map[string]string
	// Statfs measures the data dir's filesystem (a test's full disk).
	Statfs storage.StatfsFunc
}

// ingestHarness is one in-process daemon over a real database.
type ingestHarness struct {
	t     testing.TB
	env   map[string]string
	cfg   *daemon.Config
	clock *clockwork.FakeClock
	logs  *proctest.SyncBuffer
	rec   *recorder
	hc    *http.Client
	opt   harnessOptions
	p     *daemontest.InProcess
	URL   string
	// handler is the App's root handler (the fuzz target calls it directly).
	handler http.Handler

	mu       sync.Mutex
	issuance map[string]string // key material -> "what" of its issuance response
	check    *sql.DB           // separate connection for assertions and test setup
}

// newIngestHarness starts a daemon over a fresh data dir. Cleanup stops it
// and, unless opt.NoLeakCheck, runs the secret scan.
func newIngestHarness(t testing.TB, opt harnessOptions) *ingestHarness {
	t.Helper()
	env := map[string]string{}
	for k, v := range opt.Env {
		env[k] = v
	}
	if opt.SharedKey != "" {
		env["CHALUPA_INGEST_KEY"] = opt.SharedKey
	}
	rec := &recorder{next: &http.Transport{MaxIdleConnsPerHost: 64}}
	if opt.NoLeakCheck {
		rec.max = 1
	}
	epoch := opt.Epoch
	if epoch.IsZero() {
		epoch = time.Now().UTC().Truncate(time.Second)
	}
	h := &ingestHarness{
		t: t, opt: opt,
		clock:    clockwork.NewFakeClockAt(epoch),
		logs:     &proctest.SyncBuffer{},
		rec:      rec,
		hc:       &http.Client{Transport: rec, Timeout: 60 * time.Second},
		issuance: map[string]string{},
	}
	// Registered before NewInProcess's own cleanup, so it runs after the
	// daemon has stopped (cleanups run last-in first-out).
	t.Cleanup(func() {
		if h.check != nil {
			h.check.Close()
		}
		if !h.opt.NoLeakCheck && !t.Failed() {
			h.assertNoSecretLeak(t)
		}
	})
	h.p = daemontest.NewInProcess(t, h.appOptions(env))
	h.env, h.cfg = h.p.Env, h.p.App.Config
	h.started()
	return h
}

func (h *ingestHarness) appOptions(env map[string]string) daemontest.AppOptions {
	return daemontest.AppOptions{Env: env, Clock: h.clock, Logs: h.logs, HTTP: h.hc, Statfs: h.opt.Statfs}
}

// started records what a (re)start of the daemon changed.
func (h *ingestHarness) started() {
	h.URL, h.handler = h.p.URL, h.p.App.Server.Handler()
}

// restart closes the daemon and opens a new one on the same data dir (a
// process restart, as far as the keyring's cache is concerned).
func (h *ingestHarness) restart() {
	h.t.Helper()
	h.p.Restart(h.appOptions(h.env))
	h.started()
}

// ---- HTTP -----------------------------------------------------------------

// apiResponse is one answer, with the JSON error decoded when there is one.
type apiResponse struct {
	Status  int
	Header  http.Header
	Body    []byte
	Code    string
	Message string
}

func (r apiResponse) String() string {
	return fmt.Sprintf("%d %s", r.Status, bytes.TrimSpace(r.Body))
}

func (h *ingestHarness) do(method, path string, header http.Header, body []byte) apiResponse {
	h.t.Helper()
	req, err := http.NewRequest(method, h.URL+path, bytes.NewReader(body))
	if err != nil {
		h.t.Fatalf("build request: %v", err)
	}
	for k, vs := range header {
		req.Header[k] = vs
	}
	return h.roundTrip(req)
}

func (h *ingestHarness) roundTrip(req *http.Request) apiResponse {
	h.t.Helper()
	r, err := doRequest(h.hc, req)
	if err != nil {
		h.t.Fatalf("%s %s: %v", req.Method, req.URL.Path, err)
	}
	return r
}

// doRequest is safe to call from any goroutine.
func doRequest(hc *http.Client, req *http.Request) (apiResponse, error) {
	resp, err := hc.Do(req)
	if err != nil {
		return apiResponse{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return apiResponse{}, err
	}
	out := apiResponse{Status: resp.StatusCode, Header: resp.Header, Body: b}
	var eb adminapi.ErrorBody
	if resp.StatusCode >= 400 && json.Unmarshal(b, &eb) == nil {
		out.Code, out.Message = eb.Error.Code, eb.Error.Message
	}
	return out, nil
}

func (h *ingestHarness) adminToken() string { return h.env["CHALUPA_ADMIN_TOKEN"] }
func (h *ingestHarness) readyToken() string { return h.env["CHALUPA_READY_TOKEN"] }

// admin sends operation id's request with the admin bearer, at the method
// and path the operation table gives it; body is marshalled unless it is
// already []byte or a string (sent as is, to test what the server refuses).
// The answer keeps its status, headers and error code for the contract
// tests; typed calls go through h.client().
func (h *ingestHarness) admin(id string, body any) apiResponse {
	h.t.Helper()
	op, ok := adminapi.Lookup(id)
	if !ok {
		h.t.Fatalf("unknown operation %s", id)
	}
	var b []byte
	switch v := body.(type) {
	case nil:
	case []byte:
		b = v
	case string:
		b = []byte(v)
	default:
		var err error
		if b, err = json.Marshal(v); err != nil {
			h.t.Fatal(err)
		}
	}
	return h.do(op.Method, op.Path, http.Header{"Authorization": {"Bearer " + h.adminToken()}, "Content-Type": {"application/json"}}, b)
}

// opPath is the path the operation table gives operation id.
func opPath(id string) string {
	op, ok := adminapi.Lookup(id)
	if !ok {
		panic("unknown operation " + id)
	}
	return op.Path
}

// client is the typed admin client (over the recording transport).
func (h *ingestHarness) client() *adminapi.Client { return h.p.Admin }

func (h *ingestHarness) createEnv(slug string) {
	h.t.Helper()
	if _, err := h.client().CreateEnvironment(context.Background(), adminapi.CreateEnvironmentRequest{Slug: slug}); err != nil {
		h.t.Fatalf("create environment %s: %v", slug, err)
	}
}

// testKey is an issued key as the test holds it.
type testKey struct {
	ID       string
	Material string
	Raw      []byte
	Env      string
}

// keyCall runs issue or rotate and records where the material was issued
// (the one response allowed to hold it).
func (h *ingestHarness) keyCall(call func(context.Context, string) (adminapi.IssuedKey, error), slug, what string) (testKey, adminapi.IssuedKey) {
	h.t.Helper()
	k, err := call(context.Background(), slug)
	if err != nil {
		h.t.Fatalf("%s: %v", what, err)
	}
	raw, err := protocol.DecodeKeyMaterial(k.KeyMaterial)
	if err != nil {
		h.t.Fatalf("%s: key material: %v", what, err)
	}
	op, _ := adminapi.Lookup(adminapi.OpIssueIngestKey)
	h.mu.Lock()
	h.issuance[k.KeyMaterial] = fmt.Sprintf("%s %s -> %d", op.Method, op.Path, op.Status)
	h.mu.Unlock()
	return testKey{ID: k.KeyID, Material: k.KeyMaterial, Raw: raw, Env: k.EnvironmentSlug}, k
}

func (h *ingestHarness) issue(slug string) testKey {
	h.t.Helper()
	k, _ := h.keyCall(h.client().IssueIngestKey, slug, "issue key for "+slug)
	return k
}

func (h *ingestHarness) rotate(slug string) (testKey, []string) {
	h.t.Helper()
	k, full := h.keyCall(h.client().RotateIngestKey, slug, "rotate keys of "+slug)
	return k, full.RotatedKeyIDs
}

func (h *ingestHarness) revoke(keyID string) {
	h.t.Helper()
	if _, err := h.client().RevokeIngestKey(context.Background(), keyID); err != nil {
		h.t.Fatalf("revoke %s: %v", keyID, err)
	}
}

func (h *ingestHarness) fleet() adminapi.Fleet {
	h.t.Helper()
	f, err := h.client().ListFleet(context.Background())
	if err != nil {
		h.t.Fatalf("fleet: %v", err)
	}
	return f
}

// ---- signed requests ------------------------------------------------------

// signedReq describes one signed ingest request. Zero fields take defaults:
// TS is the clock's now, Nonce a fresh one, the signature covers POST,
// heartbeatPath and Body.
type signedReq struct {
	KeyID string // "" sends no X-Chalupa-Key-Id
	Key   []byte
	TS    string
	Nonce string
	Body  []byte
	Path  string // sent to; default heartbeatPath

	SignMethod, SignPath string // what the signature covers, when it differs
	SignBody             []byte
	Sig                  string            // overrides the signature header value
	Omit                 []string          // headers to leave out
	Extra                map[string]string // headers added after the signed ones (a second value for a protocol header)
}

// build fills in defaults and returns the request plus the filled-in copy.
func (h *ingestHarness) build(r signedReq) (*http.Request, signedReq) {
	h.t.Helper()
	if r.TS == "" {
		r.TS = strconv.FormatInt(h.clock.Now().Unix(), 10)
	}
	if r.Nonce == "" {
		r.Nonce = protocol.NewNonce()
	}
	if r.Path == "" {
		r.Path = heartbeatPath
	}
	sm, sp, sb := "POST", r.Path, r.Body
	if r.SignMethod != "" {
		sm = r.SignMethod
	}
	if r.SignPath != "" {
		sp = r.SignPath
	}
	if r.SignBody != nil {
		sb = r.SignBody
	}
	req, err := http.NewRequest("POST", h.URL+r.Path, bytes.NewReader(r.Body))
	if err != nil {
		h.t.Fatal(err)
	}
	protocol.Attach(req.Header, r.KeyID, r.Key, r.TS, r.Nonce, sm, sp, sb)
	if r.Sig != "" {
		req.Header.Set(protocol.HeaderSignature, r.Sig)
	}
	for _, o := range r.Omit {
		req.Header.Del(o)
	}
	for k, v := range r.Extra {
		req.Header.Add(k, v)
	}
	req.Header.Set("Content-Type", "application/json")
	return req, r
}

func (h *ingestHarness) send(r signedReq) apiResponse {
	h.t.Helper()
	req, _ := h.build(r)
	return h.roundTrip(req)
}

// hbOpts shapes a heartbeat body.
type hbOpts struct {
	Env, Deployment   string
	DropletID         int64
	LimitMinutes      int64
	LastActivityAt    time.Time
	SessionExpiresAt  *time.Time
	CIActive          bool
	IdleChecks        int64
	AgentVersion      string
	SentAt            time.Time
	Region, Size      string
	ExtraJSONAtTheEnd string // raw JSON members appended to the object (e.g. an unknown field)
}

// heartbeat returns a valid HeartbeatV1 body for o (defaults: limit 30 min,
// last activity 5 min before the clock, sent now, agent "test/1").
func (h *ingestHarness) heartbeat(o hbOpts) []byte {
	h.t.Helper()
	now := h.clock.Now()
	if o.LimitMinutes == 0 {
		o.LimitMinutes = 30
	}
	if o.LastActivityAt.IsZero() {
		o.LastActivityAt = now.Add(-5 * time.Minute)
	}
	if o.SentAt.IsZero() {
		o.SentAt = now
	}
	if o.AgentVersion == "" {
		o.AgentVersion = "test/1"
	}
	b, err := json.Marshal(protocol.HeartbeatV1{
		EnvironmentSlug:  o.Env,
		Deployment:       protocol.HeartbeatDeploy{ID: o.Deployment, DropletID: o.DropletID, Region: o.Region, Size: o.Size},
		AgentVersion:     o.AgentVersion,
		SentAt:           o.SentAt,
		Reaper:           protocol.ReaperObservation{IdleChecks: o.IdleChecks, LimitMinutes: o.LimitMinutes, LastActivityAt: o.LastActivityAt, CIActive: o.CIActive},
		SessionExpiresAt: o.SessionExpiresAt,
	})
	if err != nil {
		h.t.Fatal(err)
	}
	if o.ExtraJSONAtTheEnd != "" {
		b = append(b[:len(b)-1], []byte(","+o.ExtraJSONAtTheEnd+"}")...)
	}
	return b
}

// ---- direct SQL (assertions and test setup) -------------------------------

// sqlConn is a connection of its own to the database file, outside the
// daemon's pools: test setup writes (an ended deployment, a swapped
// envelope) and assertions go through it.
func (h *ingestHarness) sqlConn() *sql.DB {
	h.t.Helper()
	if h.check == nil {
		c, err := sql.Open("sqlite", "file:"+h.cfg.DatabasePath()+"?_pragma=busy_timeout(10000)")
		if err != nil {
			h.t.Fatalf("open check connection: %v", err)
		}
		c.SetMaxOpenConns(1)
		h.check = c
	}
	return h.check
}

func (h *ingestHarness) count(query string, args ...any) int {
	h.t.Helper()
	return countRows(h.t, h.sqlConn(), query, args...)
}

// countRows runs a query answering one integer (usable inside a fuzz
// target, where the harness's own testing.F may not be used).
func countRows(t testing.TB, db *sql.DB, query string, args ...any) int {
	t.Helper()
	var n int
	if err := db.QueryRow(query, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

func (h *ingestHarness) exec(query string, args ...any) {
	h.t.Helper()
	if _, err := h.sqlConn().Exec(query, args...); err != nil {
		h.t.Fatalf("%s: %v", query, err)
	}
}

func (h *ingestHarness) heartbeatRows() int { return h.count(`SELECT count(*) FROM heartbeats`) }
func (h *ingestHarness) nonceRows() int     { return h.count(`SELECT count(*) FROM nonces`) }

// ---- secrets --------------------------------------------------------------

// secretForms returns the encodings a secret could leak in.
func secretForms(s string, raw []byte) [][]byte {
	forms := [][]byte{[]byte(s)}
	if len(raw) > 0 {
		forms = append(forms, raw,
			[]byte(base64.StdEncoding.EncodeToString(raw)),
			[]byte(base64.RawStdEncoding.EncodeToString(raw)),
			[]byte(base64.URLEncoding.EncodeToString(raw)),
			[]byte(base64.RawURLEncoding.EncodeToString(raw)),
			[]byte(hex.EncodeToString(raw)),
			[]byte(strings.ToUpper(hex.EncodeToString(raw))))
	}
	// Deduplicate (s is usually one of the encodings).
	var out [][]byte
	for _, f := range forms {
		dup := false
		for _, o := range out {
			if bytes.Equal(o, f) {
				dup = true
			}
		}
		if !dup {
			out = append(out, f)
		}
	}
	return out
}

// occurrences counts non-overlapping appearances of any form of a secret.
func occurrences(hay []byte, forms [][]byte) int {
	n := 0
	for _, f := range forms {
		n += bytes.Count(hay, f)
	}
	return n
}

func headerBytes(h http.Header) []byte {
	var b bytes.Buffer
	_ = h.Write(&b)
	return b.Bytes()
}

// assertNoSecretLeak scans the logs and every recorded response, reporting
// each leak with t.Errorf.
func (h *ingestHarness) assertNoSecretLeak(t testing.TB) {
	t.Helper()
	type secret struct {
		name  string
		forms [][]byte
		// issuedIn is the one response allowed to hold it ("" for none).
		issuedIn string
	}
	var secrets []secret
	for _, k := range []string{"CHALUPA_ADMIN_TOKEN", "CHALUPA_READY_TOKEN", "CHALUPA_INGEST_KEY"} {
		if v := h.env[k]; v != "" {
			secrets = append(secrets, secret{name: k, forms: secretForms(v, nil)})
		}
	}
	secrets = append(secrets, secret{name: "CHALUPA_INGEST_MASTER_KEY", forms: secretForms(h.env["CHALUPA_INGEST_MASTER_KEY"], h.cfg.MasterKey())})
	h.mu.Lock()
	for m, what := range h.issuance {
		raw, _ := protocol.DecodeKeyMaterial(m)
		secrets = append(secrets, secret{name: "key material issued by " + what, forms: secretForms(m, raw), issuedIn: what})
	}
	h.mu.Unlock()

	leaks := 0
	report := func(format string, a ...any) {
		leaks++
		t.Errorf(format, a...)
	}
	logs := h.logs.Bytes()
	if len(logs) == 0 {
		report("secret scan: no log output was captured (the scan would prove nothing)")
	}
	resps := h.rec.snapshot()
	for _, s := range secrets {
		if n := occurrences(logs, s.forms); n > 0 {
			report("secret scan: %s appears %d times in the daemon's logs", s.name, n)
		}
		total := 0
		for _, r := range resps {
			n := occurrences(r.body, s.forms) + occurrences(headerBytes(r.header), s.forms)
			total += n
			if n > 0 && (s.issuedIn == "" || r.what != s.issuedIn) {
				report("secret scan: %s appears in the response to %s", s.name, r.what)
			}
		}
		if s.issuedIn != "" && total != 1 {
			report("secret scan: %s appears %d times across all responses, want exactly once (its issuance)", s.name, total)
		}
	}
	if leaks == 0 {
		t.Logf("secret scan: %d secrets, %d responses, %d bytes of logs: clean", len(secrets), len(resps), len(logs))
	}
}
