package adminapi

import (
	"strings"
	"testing"
)

// TestBodyFor: a body only does what its operationId names. Ingest-key
// bodies must be JSON objects whose action matches the operation (rotate and
// revoke get theirs filled in); GET operations take no body at all.
func TestBodyFor(t *testing.T) {
	ok := []struct{ id, body, want string }{
		{OpIssueIngestKey, `{"environmentSlug":"demo"}`, `{"environmentSlug":"demo"}`},
		{OpIssueIngestKey, `{"action":"issue","environmentSlug":"demo"}`, `{"action":"issue","environmentSlug":"demo"}`},
		{OpRotateIngestKey, `{"environmentSlug":"demo"}`, `{"action":"rotate","environmentSlug":"demo"}`},
		{OpRotateIngestKey, ``, `{"action":"rotate"}`},
		{OpRevokeIngestKey, `{"action":"revoke","keyId":"k"}`, `{"action":"revoke","keyId":"k"}`},
		{OpRevokeIngestKey, `{"keyId":"k"}`, `{"action":"revoke","keyId":"k"}`},
		{OpCreateEnvironment, `{"slug":"demo"}`, `{"slug":"demo"}`},
		{OpGetStatus, ``, ``},
	}
	for _, tc := range ok {
		got, err := BodyFor(tc.id, []byte(tc.body))
		if err != nil || string(got) != tc.want {
			t.Errorf("BodyFor(%s, %s) = %s, %v; want %s", tc.id, tc.body, got, err, tc.want)
		}
	}
	bad := []struct{ id, body, want string }{
		{OpIssueIngestKey, `{"action":"revoke","keyId":"k"}`, "adminIssueIngestKey takes no action"},
		{OpIssueIngestKey, `{"action":"rotate","environmentSlug":"demo"}`, "adminIssueIngestKey takes no action"},
		{OpIssueIngestKey, `{"action":7}`, "adminIssueIngestKey takes no action"},
		{OpRotateIngestKey, `{"action":"revoke","keyId":"k"}`, `adminRotateIngestKey takes action "rotate"`},
		{OpRotateIngestKey, `{"action":null}`, `adminRotateIngestKey takes action "rotate"`},
		{OpRevokeIngestKey, `{"action":"rotate","environmentSlug":"demo"}`, `adminRevokeIngestKey takes action "revoke"`},
		{OpRevokeIngestKey, `null`, "adminRevokeIngestKey body must be a JSON object"},
		{OpRotateIngestKey, `"rotate"`, "adminRotateIngestKey body must be a JSON object"},
		{OpIssueIngestKey, `[]`, "adminIssueIngestKey body must be a JSON object"},
		{OpGetStatus, `{}`, "adminGetStatus takes no body"},
		{OpListEnvironments, `null`, "adminListEnvironments takes no body"},
		{OpListFleet, `{"x":1}`, "adminListFleet takes no body"},
		{"adminNoSuchThing", `{}`, "unknown operation"},
	}
	for _, tc := range bad {
		got, err := BodyFor(tc.id, []byte(tc.body))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("BodyFor(%s, %s) = %s, %v; want an error containing %q", tc.id, tc.body, got, err, tc.want)
		}
	}
}
