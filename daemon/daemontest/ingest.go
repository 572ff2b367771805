package daemontest

// The in-process harness for the signed-ingest HTTP surface: the App
// NewInProcess assembles (daemon.Open over a real SQLite file in
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
	"github.com/chalupa-run/chalupa/ingest"
	"github.com/chalupa-run/chalupa/internal/proctest"
	"github.com/chalupa-run/chalupa/protocol"
	"github.com/chalupa-run/chalupa/storage"
)

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

// IngestOptions configures NewIngest.
type IngestOptions struct {
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

// UnlimitedQuotas sets every CHALUPA_QUOTA_* to 0 (unlimited): for tests and
// benchmarks that measure something else and send far beyond a quota
// (IngestOptions.Env, AppOptions.Env). The names are the variable table's
// (daemon.VariableNames), so a new quota is unlimited here without an edit.
// Each call returns a new map.
func UnlimitedQuotas() map[string]string {
	out := map[string]string{}
	for _, name := range daemon.VariableNames() {
		if strings.HasPrefix(name, "CHALUPA_QUOTA_") {
			out[name] = "0"
		}
	}
	return out
}

// Ingest is one in-process daemon over a real database with a recording,
// signing client: the harness of the signed-ingest tests (ingest's own and
// the daemon's quota, storage and shedding tests). Its methods must be
// called from the test's goroutine unless they say otherwise.
type Ingest struct {
	// InProcess is the daemon: App, Admin (the typed admin client over
	// the recording transport), URL, Env and Logs.
	*InProcess
	// T is the test the harness fails.
	T testing.TB
	// Clock is the fake clock the daemon and the signer share.
	Clock *clockwork.FakeClock
	// HTTP is the recording client every request goes through.
	HTTP *http.Client

	rec *recorder
	opt IngestOptions
	// cfg is the configuration the daemon was opened with, kept for the
	// secret scan and SQL after the daemon has closed.
	cfg *daemon.Config

	mu       sync.Mutex
	issuance map[string]string // key material -> "what" of its issuance response
	check    *sql.DB           // separate connection for assertions and test setup
}

// NewIngest starts a daemon over a fresh data dir. Cleanup stops it and,
// unless opt.NoLeakCheck, runs the secret scan (AssertNoSecretLeak) when
// the test has not already failed.
func NewIngest(t testing.TB, opt IngestOptions) *Ingest {
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
	h := &Ingest{
		T: t, opt: opt,
		Clock:    clockwork.NewFakeClockAt(epoch),
		rec:      rec,
		HTTP:     &http.Client{Transport: rec, Timeout: 60 * time.Second},
		issuance: map[string]string{},
	}
	logs := &proctest.SyncBuffer{}
	// Registered before NewInProcess's own cleanup, so it runs after the
	// daemon has stopped (cleanups run last-in first-out).
	t.Cleanup(func() {
		if h.check != nil {
			h.check.Close()
		}
		if !h.opt.NoLeakCheck && !t.Failed() {
			h.AssertNoSecretLeak(t)
		}
	})
	h.InProcess = NewInProcess(t, AppOptions{Env: env, Clock: h.Clock, Logs: logs, HTTP: h.HTTP, Statfs: opt.Statfs})
	h.cfg = h.App.Config
	return h
}

// Restart closes the daemon and opens a new one on the same data dir (a
// process restart, as far as the keyring's cache is concerned).
func (h *Ingest) Restart() {
	h.T.Helper()
	h.InProcess.Restart(AppOptions{Env: h.Env, Clock: h.Clock, Logs: h.Logs, HTTP: h.HTTP, Statfs: h.opt.Statfs})
}

// ---- HTTP -----------------------------------------------------------------

// Response is one answer, with the JSON error decoded when there is one.
type Response struct {
	// Status is the HTTP status; Header and Body are the answer's.
	Status int
	Header http.Header
	Body   []byte
	// Code and Message are the error body's (4xx and 5xx), else "".
	Code    string
	Message string
}

// String is the status and the body, for failure messages.
func (r Response) String() string {
	return fmt.Sprintf("%d %s", r.Status, bytes.TrimSpace(r.Body))
}

// Do sends method path with header and body through the recording
// client; a transport error fails the test.
func (h *Ingest) Do(method, path string, header http.Header, body []byte) Response {
	h.T.Helper()
	req, err := http.NewRequest(method, h.URL+path, bytes.NewReader(body))
	if err != nil {
		h.T.Fatalf("build request: %v", err)
	}
	for k, vs := range header {
		req.Header[k] = vs
	}
	return h.RoundTrip(req)
}

// RoundTrip sends req through the recording client; a transport error
// fails the test.
func (h *Ingest) RoundTrip(req *http.Request) Response {
	h.T.Helper()
	r, err := DoRequest(h.HTTP, req)
	if err != nil {
		h.T.Fatalf("%s %s: %v", req.Method, req.URL.Path, err)
	}
	return r
}

// DoRequest sends req with hc and reads the answer (its error body decoded
// when the status is 4xx or 5xx). It is safe to call from any goroutine.
func DoRequest(hc *http.Client, req *http.Request) (Response, error) {
	resp, err := hc.Do(req)
	if err != nil {
		return Response{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return Response{}, err
	}
	out := Response{Status: resp.StatusCode, Header: resp.Header, Body: b}
	var eb adminapi.ErrorBody
	if resp.StatusCode >= 400 && json.Unmarshal(b, &eb) == nil {
		out.Code, out.Message = eb.Error.Code, eb.Error.Message
	}
	return out, nil
}

// AdminToken is CHALUPA_ADMIN_TOKEN.
func (h *Ingest) AdminToken() string { return h.Env["CHALUPA_ADMIN_TOKEN"] }

// ReadyToken is CHALUPA_READY_TOKEN.
func (h *Ingest) ReadyToken() string { return h.Env["CHALUPA_READY_TOKEN"] }

// AdminOp sends operation id's request with the admin bearer, at the method
// and path the operation table gives it; body is marshalled unless it is
// already []byte or a string (sent as is, to test what the server refuses).
// The answer keeps its status, headers and error code for the contract
// tests; typed calls go through h.Admin.
func (h *Ingest) AdminOp(id string, body any) Response {
	h.T.Helper()
	op, ok := adminapi.Lookup(id)
	if !ok {
		h.T.Fatalf("unknown operation %s", id)
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
			h.T.Fatal(err)
		}
	}
	return h.Do(op.Method, op.Path, http.Header{"Authorization": {"Bearer " + h.AdminToken()}, "Content-Type": {"application/json"}}, b)
}

// OpPath is the path the operation table gives operation id.
func OpPath(id string) string {
	op, ok := adminapi.Lookup(id)
	if !ok {
		panic("unknown operation " + id)
	}
	return op.Path
}

// CreateEnv creates environment slug through the admin client.

func (h *Ingest) CreateEnv(slug string) {
	h.T.Helper()
	if _, err := h.Admin.CreateEnvironment(context.Background(), adminapi.CreateEnvironmentRequest{Slug: slug}); err != nil {
		h.T.Fatalf("create environment %s: %v", slug, err)
	}
}

// Key is an issued key as the test holds it.
type Key struct {
	// ID is the key id (X-Chalupa-Key-Id).
	ID string
	// Material is the key as issued (its text form); Raw its bytes, the
	// HMAC key.
	Material string
	Raw      []byte
	// Env is the slug of the environment the key is bound to.
	Env string
}

// keyCall runs issue or rotate and records where the material was issued
// (the one response allowed to hold it).
func (h *Ingest) keyCall(call func(context.Context, string) (adminapi.IssuedKey, error), slug, what string) (Key, adminapi.IssuedKey) {
	h.T.Helper()
	k, err := call(context.Background(), slug)
	if err != nil {
		h.T.Fatalf("%s: %v", what, err)
	}
	raw, err := protocol.DecodeKeyMaterial(k.KeyMaterial)
	if err != nil {
		h.T.Fatalf("%s: key material: %v", what, err)
	}
	op, _ := adminapi.Lookup(adminapi.OpIssueIngestKey)
	h.mu.Lock()
	h.issuance[k.KeyMaterial] = fmt.Sprintf("%s %s -> %d", op.Method, op.Path, op.Status)
	h.mu.Unlock()
	return Key{ID: k.KeyID, Material: k.KeyMaterial, Raw: raw, Env: k.EnvironmentSlug}, k
}

// Issue issues a key for environment slug.
func (h *Ingest) Issue(slug string) Key {
	h.T.Helper()
	k, _ := h.keyCall(h.Admin.IssueIngestKey, slug, "issue key for "+slug)
	return k
}

// Rotate rotates slug's keys: the new key and the ids rotated out.
func (h *Ingest) Rotate(slug string) (Key, []string) {
	h.T.Helper()
	k, full := h.keyCall(h.Admin.RotateIngestKey, slug, "rotate keys of "+slug)
	return k, full.RotatedKeyIDs
}

// Revoke revokes key keyID.
func (h *Ingest) Revoke(keyID string) {
	h.T.Helper()
	if _, err := h.Admin.RevokeIngestKey(context.Background(), keyID); err != nil {
		h.T.Fatalf("revoke %s: %v", keyID, err)
	}
}

// Fleet is the admin fleet listing.
func (h *Ingest) Fleet() adminapi.Fleet {
	h.T.Helper()
	f, err := h.Admin.ListFleet(context.Background())
	if err != nil {
		h.T.Fatalf("fleet: %v", err)
	}
	return f
}

// ---- signed requests ------------------------------------------------------

// SignedReq describes one signed ingest request. Zero fields take defaults:
// TS is the clock's now, Nonce a fresh one, the signature covers POST,
// ingest.HeartbeatRoute and Body.
type SignedReq struct {
	// KeyID and Key sign the request; "" sends no X-Chalupa-Key-Id.
	KeyID string
	Key   []byte
	// TS (Unix seconds) and Nonce are the headers' values.
	TS    string
	Nonce string
	// Body is sent to Path (default ingest.HeartbeatRoute).
	Body []byte
	Path string

	SignMethod, SignPath string // what the signature covers, when it differs
	SignBody             []byte
	Sig                  string            // overrides the signature header value
	Omit                 []string          // headers to leave out
	Extra                map[string]string // headers added after the signed ones (a second value for a protocol header)
}

// Build fills in defaults and returns the request plus the filled-in copy.
func (h *Ingest) Build(r SignedReq) (*http.Request, SignedReq) {
	h.T.Helper()
	if r.TS == "" {
		r.TS = strconv.FormatInt(h.Clock.Now().Unix(), 10)
	}
	if r.Nonce == "" {
		r.Nonce = protocol.NewNonce()
	}
	if r.Path == "" {
		r.Path = ingest.HeartbeatRoute
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
		h.T.Fatal(err)
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

// Send builds r (Build) and sends it.
func (h *Ingest) Send(r SignedReq) Response {
	h.T.Helper()
	req, _ := h.Build(r)
	return h.RoundTrip(req)
}

// HeartbeatOpts shapes a heartbeat body.
type HeartbeatOpts struct {
	// The fields are HeartbeatV1's: the environment and deployment, the
	// droplet, the reaper's observation, the session expiry, the agent.
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

// Heartbeat returns a valid HeartbeatV1 body for o (defaults: limit 30 min,
// last activity 5 min before the clock, sent now, agent "test/1").
func (h *Ingest) Heartbeat(o HeartbeatOpts) []byte {
	h.T.Helper()
	now := h.Clock.Now()
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
		h.T.Fatal(err)
	}
	if o.ExtraJSONAtTheEnd != "" {
		b = append(b[:len(b)-1], []byte(","+o.ExtraJSONAtTheEnd+"}")...)
	}
	return b
}

// DiscardWriter is a ResponseWriter that keeps only the status: for
// benchmarks that call a handler directly, without a connection.
type DiscardWriter struct {
	h http.Header
	// Code is the status written (200 for a body without one).
	Code int
}

// Header is the header map, kept only for the handler to write into.
func (d *DiscardWriter) Header() http.Header {
	if d.h == nil {
		d.h = http.Header{}
	}
	return d.h
}

// WriteHeader records the first status.
func (d *DiscardWriter) WriteHeader(code int) {
	if d.Code == 0 {
		d.Code = code
	}
}

// Write discards p (an implicit 200 if no status was written).
func (d *DiscardWriter) Write(p []byte) (int, error) {
	if d.Code == 0 {
		d.Code = http.StatusOK
	}
	return len(p), nil
}

// ---- direct SQL (assertions and test setup) -------------------------------

// SQL is a connection of its own to the database file, outside the
// daemon's pools: test setup writes (an ended deployment, a swapped
// envelope) and assertions go through it.
func (h *Ingest) SQL() *sql.DB {
	h.T.Helper()
	if h.check == nil {
		c, err := sql.Open("sqlite", "file:"+h.cfg.DatabasePath()+"?_pragma=busy_timeout(10000)")
		if err != nil {
			h.T.Fatalf("open check connection: %v", err)
		}
		c.SetMaxOpenConns(1)
		h.check = c
	}
	return h.check
}

// Count runs query, which answers one integer, on SQL.
func (h *Ingest) Count(query string, args ...any) int {
	h.T.Helper()
	return CountRows(h.T, h.SQL(), query, args...)
}

// CountRows runs a query answering one integer (usable inside a fuzz
// target, where the harness's own testing.F may not be used).
func CountRows(t testing.TB, db *sql.DB, query string, args ...any) int {
	t.Helper()
	var n int
	if err := db.QueryRow(query, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

// Exec runs query on SQL.
func (h *Ingest) Exec(query string, args ...any) {
	h.T.Helper()
	if _, err := h.SQL().Exec(query, args...); err != nil {
		h.T.Fatalf("%s: %v", query, err)
	}
}

// HeartbeatRows counts the heartbeats table.
func (h *Ingest) HeartbeatRows() int { return h.Count(`SELECT count(*) FROM heartbeats`) }

// NonceRows counts the nonces table.
func (h *Ingest) NonceRows() int { return h.Count(`SELECT count(*) FROM nonces`) }

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

// PlantResponse records a response as if the client had received it (what
// is "METHOD path -> status") and returns the function that forgets it and
// every response recorded after it: the secret scan's own test plants
// leaks with it to prove AssertNoSecretLeak reports them.
func (h *Ingest) PlantResponse(what string, header http.Header, body []byte) (forget func()) {
	h.rec.mu.Lock()
	defer h.rec.mu.Unlock()
	n := len(h.rec.all)
	h.rec.all = append(h.rec.all, recordedResponse{what: what, header: header, body: body})
	return func() {
		h.rec.mu.Lock()
		defer h.rec.mu.Unlock()
		h.rec.all = h.rec.all[:n]
	}
}

// AssertNoSecretLeak scans the logs and every recorded response, reporting
// each leak with t.Errorf.
func (h *Ingest) AssertNoSecretLeak(t testing.TB) {
	t.Helper()
	type secret struct {
		name  string
		forms [][]byte
		// issuedIn is the one response allowed to hold it ("" for none).
		issuedIn string
	}
	var secrets []secret
	for _, k := range []string{"CHALUPA_ADMIN_TOKEN", "CHALUPA_READY_TOKEN", "CHALUPA_INGEST_KEY"} {
		if v := h.Env[k]; v != "" {
			secrets = append(secrets, secret{name: k, forms: secretForms(v, nil)})
		}
	}
	secrets = append(secrets, secret{name: "CHALUPA_INGEST_MASTER_KEY", forms: secretForms(h.Env["CHALUPA_INGEST_MASTER_KEY"], h.cfg.MasterKey())})
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
	logs := h.Logs.Bytes()
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
