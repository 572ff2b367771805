package daemon_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/daemon/daemontest"
)

// TestCreateEnvironmentRefusesUndisplayableNames: a name that would drive
// the operator's terminal (NUL, ESC sequences, newlines, DEL, C1 controls)
// or that arrived as invalid UTF-8 is refused with 400 invalid_name, and no
// environment is created; printable Unicode names are still accepted.
func TestCreateEnvironmentRefusesUndisplayableNames(t *testing.T) {
	h := daemontest.NewIngest(t, daemontest.IngestOptions{})
	refused := []struct{ name, body string }{
		{"NUL and ESC", `{"slug":"x1","name":"a\u0000b\u001b[31m"}`},
		{"ESC sequence", `{"slug":"x2","name":"\u001b]0;pwned\u0007"}`},
		{"bidi override", `{"slug":"x9","name":"\u202eevil"}`},
		{"zero width space", `{"slug":"x10","name":"a\u200bb"}`},
		{"soft hyphen only", `{"slug":"x11","name":"\u00ad"}`},
		{"byte order mark", `{"slug":"x12","name":"\ufeffdemo"}`},
		{"newline", `{"slug":"x3","name":"line\nforged line"}`},
		{"tab", `{"slug":"x4","name":"a\tb"}`},
		{"DEL", `{"slug":"x5","name":"a\u007fb"}`},
		{"C1 CSI", `{"slug":"x6","name":"a\u009b31m"}`},
		{"invalid UTF-8", "{\"slug\":\"x7\",\"name\":\"a\xffb\"}"},
	}
	for _, tc := range refused {
		t.Run(tc.name, func(t *testing.T) {
			r := h.AdminOp(adminapi.OpCreateEnvironment, tc.body)
			if r.Status != http.StatusBadRequest || r.Code != "invalid_name" {
				t.Errorf("got %s, want 400 invalid_name", r)
			}
		})
	}
	accepted := map[string]string{"ok-ascii": "Demo harbor (GPU)", "ok-unicode": "Präsentation – 東京 🚀"}
	for slug, name := range accepted {
		r := h.AdminOp(adminapi.OpCreateEnvironment, adminapi.CreateEnvironmentRequest{Slug: slug, Name: name})
		if r.Status != http.StatusCreated {
			t.Errorf("create %s with name %q: got %s, want 201", slug, name, r)
		}
	}

	r := h.AdminOp(adminapi.OpListEnvironments, nil)
	var l adminapi.EnvironmentList
	if err := json.Unmarshal(r.Body, &l); err != nil {
		t.Fatalf("list environments: %s: %v", r, err)
	}
	got := map[string]string{}
	for _, e := range l.Environments {
		got[e.Slug] = e.Name
	}
	if len(got) != len(accepted) {
		t.Errorf("environments after the refusals: %q, want only %v", got, accepted)
	}
	for slug, name := range accepted {
		if got[slug] != name {
			t.Errorf("environment %s has name %q, want %q", slug, got[slug], name)
		}
	}
}

// TestAdminBodiesAreStrict: admin bodies follow the ingest rules, so a
// repeated key, a key that matches a field only case-insensitively, or data
// after the object is refused with 400 bad_body and nothing is written
// (encoding/json alone would take the last or the case-folded value).
func TestAdminBodiesAreStrict(t *testing.T) {
	h := daemontest.NewIngest(t, daemontest.IngestOptions{})
	for name, body := range map[string]string{
		"repeated key":       `{"slug":"dup-a","slug":"dup-b","name":"x"}`,
		"case-variant key":   `{"slug":"cv-a","SLUG":"cv-b"}`,
		"case-variant only":  `{"Slug":"cv-c"}`,
		"stray bracket":      `{"slug":"tr-a"}]`,
		"second JSON object": `{"slug":"tr-b"}{}`,
	} {
		if r := h.AdminOp(adminapi.OpCreateEnvironment, body); r.Status != http.StatusBadRequest || r.Code != "bad_body" {
			t.Errorf("%s: got %s, want 400 bad_body", name, r)
		}
	}
	if r := h.AdminOp(adminapi.OpIssueIngestKey, `{"action":"revoke","keyId":"x","KeyId":"y"}`); r.Status != http.StatusBadRequest || r.Code != "bad_body" {
		t.Errorf("case-variant keyId: got %s, want 400 bad_body", r)
	}
	r := h.AdminOp(adminapi.OpListEnvironments, nil)
	var l adminapi.EnvironmentList
	if err := json.Unmarshal(r.Body, &l); err != nil {
		t.Fatal(err)
	}
	if len(l.Environments) != 0 {
		t.Errorf("refused bodies created environments: %+v", l.Environments)
	}
}
