package daemon_test

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/daemon"
	"github.com/chalupa-run/chalupa/daemon/daemontest"
	"github.com/chalupa-run/chalupa/ingest"
	"github.com/chalupa-run/chalupa/internal/proctest"
	"github.com/chalupa-run/chalupa/protocol"
)

// TestIngestAdminKeyAPI: issue/rotate/revoke error paths, codes, and that
// only the bearer header authenticates (never a cookie).
func TestIngestAdminKeyAPI(t *testing.T) {
	h := daemontest.NewIngest(t, daemontest.IngestOptions{})
	h.CreateEnv("demo-harbor")
	keyPath := daemontest.OpPath(adminapi.OpIssueIngestKey)
	cases := []struct {
		name   string
		body   string
		status int
		code   string
	}{
		{"issue for an unknown environment", `{"environmentSlug":"no-such-env"}`, 404, "environment_not_found"},
		{"rotate an unknown environment", `{"action":"rotate","environmentSlug":"no-such-env"}`, 404, "environment_not_found"},
		{"revoke an unknown key", `{"action":"revoke","keyId":"env_demo-harbor_0000000000000000"}`, 404, "key_not_found"},
		{"malformed JSON", `{"environmentSlug":`, 400, "bad_body"},
		{"unknown field", `{"environmentSlug":"demo-harbor","extra":1}`, 400, "bad_body"},
		{"wrong type", `{"environmentSlug":7}`, 400, "bad_body"},
		{"empty body", ``, 400, "bad_body"},
		{"invalid slug", `{"environmentSlug":"Demo Harbor"}`, 400, "invalid_slug"},
		{"missing slug", `{}`, 400, "invalid_slug"},
		{"unknown action", `{"action":"delete","environmentSlug":"demo-harbor"}`, 400, "bad_action"},
		{"revoke without key id", `{"action":"revoke"}`, 400, "bad_body"},
		{"revoke with a slug", `{"action":"revoke","keyId":"x","environmentSlug":"demo-harbor"}`, 400, "bad_body"},
		{"issue with a key id", `{"environmentSlug":"demo-harbor","keyId":"x"}`, 400, "bad_body"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := h.Count(`SELECT count(*) FROM ingest_keys`)
			r := h.AdminOp(adminapi.OpIssueIngestKey, c.body)
			if r.Status != c.status || r.Code != c.code {
				t.Fatalf("%s, want %d %s", r, c.status, c.code)
			}
			if h.Count(`SELECT count(*) FROM ingest_keys`) != before {
				t.Fatal("a refused key request changed ingest_keys")
			}
		})
	}

	// Issue: key id format, fresh material each time, stored only as an envelope.
	a, b := h.Issue("demo-harbor"), h.Issue("demo-harbor")
	idRE := regexp.MustCompile(`^env_demo-harbor_[0-9a-f]{16}$`)
	if !idRE.MatchString(a.ID) || !idRE.MatchString(b.ID) || a.ID == b.ID || a.Material == b.Material {
		t.Fatalf("issued %s and %s: want distinct ids env_demo-harbor_<16 hex> and distinct material", a.ID, b.ID)
	}
	for _, k := range []daemontest.Key{a, b} {
		var env []byte
		var version int64
		if err := h.SQL().QueryRow(`SELECT envelope, master_key_version FROM ingest_keys WHERE key_id = ?`, k.ID).Scan(&env, &version); err != nil {
			t.Fatal(err)
		}
		if version != 1 || bytes.Contains(env, k.Raw) || bytes.Contains(env, []byte(k.Material)) {
			t.Fatalf("key %s stored in the clear or at version %d", k.ID, version)
		}
	}
	// Revoking twice is not an error.
	h.Revoke(a.ID)
	h.Revoke(a.ID)

	// Authentication: bearer only.
	tok := h.AdminToken()
	for name, hdr := range map[string]http.Header{
		"no credentials":           {},
		"cookie with the token":    {"Cookie": {"chalupa_admin=" + tok + "; token=" + tok + "; session=" + tok}},
		"wrong bearer":             {"Authorization": {"Bearer " + tok + "x"}},
		"ready token as bearer":    {"Authorization": {"Bearer " + h.ReadyToken()}},
		"token without the scheme": {"Authorization": {tok}},
		"basic scheme":             {"Authorization": {"Basic " + tok}},
	} {
		hdr.Set("Content-Type", "application/json")
		for _, rq := range []struct{ method, path, body string }{
			{"POST", keyPath, `{"environmentSlug":"demo-harbor"}`},
			{"POST", keyPath, `{"action":"revoke","keyId":"` + b.ID + `"}`},
			{"GET", daemontest.OpPath(adminapi.OpListFleet), ""},
		} {
			r := h.Do(rq.method, rq.path, hdr, []byte(rq.body))
			if r.Status != 401 || r.Code != "unauthorized" {
				t.Fatalf("%s: %s %s answered %s, want 401 unauthorized", name, rq.method, rq.path, r)
			}
		}
	}
	if n := h.Count(`SELECT count(*) FROM ingest_keys WHERE status = 'active'`); n != 1 {
		t.Fatalf("%d active keys after the unauthenticated attempts, want 1 (b)", n)
	}
}

// TestIngestWrongMasterKeyRefusesToStart runs daemon.Run (the serve path) on
// a database created under one master key with another: it refuses with
// ingest.ErrWrongMasterKey before listening. With the right key it starts
// and an issued key still verifies.
func TestIngestWrongMasterKeyRefusesToStart(t *testing.T) {
	h := daemontest.NewIngest(t, daemontest.IngestOptions{})
	h.CreateEnv("demo-harbor")
	k := h.Issue("demo-harbor")
	h.InProcess.Close()

	load := func(masterKey string) *daemon.Config {
		env := map[string]string{}
		for kk, v := range h.Env {
			env[kk] = v
		}
		env["CHALUPA_INGEST_MASTER_KEY"] = masterKey
		cfg, err := daemon.LoadConfig(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	wrong := proctest.NewSecrets()[proctest.MasterKeyVar]
	logs := &proctest.SyncBuffer{}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	listened := false
	refusal := daemon.Run(ctx, load(wrong), daemon.RunOptions{Logs: logs, Listening: func(string) { listened = true }})
	if !errors.Is(refusal, ingest.ErrWrongMasterKey) {
		t.Fatalf("Run with the wrong master key: %v, want ErrWrongMasterKey", refusal)
	}
	if listened {
		t.Fatal("Run listened before refusing")
	}
	if !strings.Contains(refusal.Error(), "CHALUPA_INGEST_MASTER_KEY") {
		t.Fatalf("refusal %q does not name the variable", refusal)
	}

	// The right key starts, and the key issued before verifies.
	rctx, rcancel := context.WithCancel(context.Background())
	addr := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- daemon.Run(rctx, load(h.Env["CHALUPA_INGEST_MASTER_KEY"]), daemon.RunOptions{Logs: logs, Listening: func(a string) { addr <- a }})
	}()
	var base string
	select {
	case a := <-addr:
		base = "http://" + a
	case err := <-done:
		rcancel()
		t.Fatalf("Run with the right key exited: %v", err)
	case <-time.After(time.Minute):
		rcancel()
		t.Fatal("Run with the right key did not listen within a minute")
	}
	cl := &protocol.Client{BaseURL: base, KeyID: k.ID, Key: k.Raw, HTTP: h.HTTP}
	sent := time.Now()
	body := h.Heartbeat(daemontest.HeartbeatOpts{Env: "demo-harbor", Deployment: "dep-run", SentAt: sent, LastActivityAt: sent})
	resp, err := cl.Post(context.Background(), ingest.HeartbeatRoute, body)
	rcancel()
	if rerr := <-done; rerr != nil {
		t.Errorf("Run returned %v after cancel", rerr)
	}
	if err != nil || resp.Status != 202 {
		t.Fatalf("heartbeat through daemon.Run: %+v, %v", resp, err)
	}
	for name, s := range map[string]string{"right master key": h.Env["CHALUPA_INGEST_MASTER_KEY"], "wrong master key": wrong,
		"admin token": h.AdminToken(), "ready token": h.ReadyToken(), "key material": k.Material} {
		if strings.Contains(string(logs.Bytes()), s) || strings.Contains(refusal.Error(), s) {
			t.Errorf("%s appears in daemon.Run's logs or error", name)
		}
	}
}
