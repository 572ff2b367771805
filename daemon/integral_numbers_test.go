package daemon_test

import (
	"testing"

	"github.com/chalupa-run/chalupa/daemon/daemontest"
)

// TestAdminIntegerWrittenAsFloat: an admin body's integer field takes an
// integral number written with a fraction or an exponent (what Python's
// json.dumps writes for a float, and what the document's integer admits),
// while a fraction that is not integral stays 400 bad_body
// (docs/operations.md, "Admin API").
func TestAdminIntegerWrittenAsFloat(t *testing.T) {
	p := daemontest.NewInProcess(t, daemontest.AppOptions{})
	newEnv(t, p.Admin, "demo")
	const path = "/api/admin/environments/demo/session-policy"
	for _, tc := range []struct {
		name, body string
		status     int
		code       string
	}{
		{"3600.0", `{"kind":"demo","maxSessionSeconds":3600.0}`, 200, ""},
		{"3.6e3", `{"kind":"demo","maxSessionSeconds":3.6e3}`, 200, ""},
		{"3600.5", `{"kind":"demo","maxSessionSeconds":3600.5}`, 400, "bad_body"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, code, body := rawAdmin(t, p, "PUT", path, tc.body)
			if status != tc.status || code != tc.code {
				t.Errorf("PUT %s: %d %q, want %d %q: %s", tc.body, status, code, tc.status, tc.code, body)
			}
		})
	}
}
