package ingest

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/chalupa-run/chalupa/protocol"
)

// validHeartbeatJSON is a protocol.HeartbeatV1 body with every field present.
const validHeartbeatJSON = `{"environmentSlug":"demo-harbor",` +
	`"deployment":{"id":"dep-1","dropletId":4242,"region":"nyc3","size":"s-1vcpu-1gb"},` +
	`"agentVersion":"agent/1","sentAt":"2026-01-01T00:00:00Z",` +
	`"reaper":{"idleChecks":3,"limitMinutes":30,"lastActivityAt":"2025-12-31T23:55:00Z","ciActive":false},` +
	`"sessionExpiresAt":"2026-01-02T00:00:00Z"}`

// hbWith returns validHeartbeatJSON with the first old replaced by new.
func hbWith(t *testing.T, old, new string) []byte {
	t.Helper()
	if !strings.Contains(validHeartbeatJSON, old) {
		t.Fatalf("%q is not in the valid body", old)
	}
	return []byte(strings.Replace(validHeartbeatJSON, old, new, 1))
}

// TestDecodeBodyStrictKeys drives decodeBody (the production path) into a
// protocol.HeartbeatV1: keys that encoding/json would match only case-insensitively,
// and keys repeated within one object, are 422 invalid_body naming the key
// (never a value); malformed JSON stays 400; valid bodies still decode.
func TestDecodeBodyStrictKeys(t *testing.T) {
	const (
		accept = iota
		caseVariant
		duplicate
		malformed
		unknown // refused by encoding/json itself, before the strict check
	)
	tests := []struct {
		name string
		body []byte
		want int
		key  string // the key the refusal must name
	}{
		{"valid body accepted", []byte(validHeartbeatJSON), accept, ""},
		{"valid body without optional fields accepted", []byte(`{"environmentSlug":"demo-harbor","deployment":{"id":"dep-1"},` +
			`"agentVersion":"agent/1","sentAt":"2026-01-01T00:00:00Z","reaper":{"limitMinutes":30,"lastActivityAt":"2025-12-31T23:55:00Z"}}`), accept, ""},
		{"null optional time accepted", hbWith(t, `"sessionExpiresAt":"2026-01-02T00:00:00Z"`, `"sessionExpiresAt":null`), accept, ""},
		{"escaped exact key accepted", hbWith(t, `"environmentSlug"`, `"environment\u0053lug"`), accept, ""},
		{"whitespace everywhere accepted", []byte(strings.NewReplacer(`{`, "{ \n", `":`, "\" :\t", `,`, " , ").Replace(validHeartbeatJSON)), accept, ""},

		{"top level all upper case", hbWith(t, `"environmentSlug"`, `"ENVIRONMENTSLUG"`), caseVariant, "ENVIRONMENTSLUG"},
		{"top level all lower case", hbWith(t, `"environmentSlug"`, `"environmentslug"`), caseVariant, "environmentslug"},
		{"top level Go field name", hbWith(t, `"sentAt"`, `"SentAt"`), caseVariant, "SentAt"},
		{"top level object key", hbWith(t, `"deployment"`, `"Deployment"`), caseVariant, "Deployment"},
		{"top level optional time", hbWith(t, `"sessionExpiresAt"`, `"sessionexpiresat"`), caseVariant, "sessionexpiresat"},
		{"deployment.id upper case", hbWith(t, `"id"`, `"ID"`), caseVariant, "ID"},
		{"deployment.dropletId", hbWith(t, `"dropletId"`, `"dropletID"`), caseVariant, "dropletID"},
		{"deployment.size with long s (Unicode fold)", hbWith(t, `"size"`, `"ſize"`), caseVariant, "ſize"},
		{"reaper.limitMinutes", hbWith(t, `"limitMinutes"`, `"LimitMinutes"`), caseVariant, "LimitMinutes"},
		{"reaper.ciActive", hbWith(t, `"ciActive"`, `"ciactive"`), caseVariant, "ciactive"},
		{"reaper.idleChecks with Kelvin sign (Unicode fold)", hbWith(t, `"idleChecks"`, `"idleChec`+"\u212a"+`s"`), caseVariant, "idleChec\u212as"},

		{"top level key twice", hbWith(t, `"agentVersion":"agent/1"`, `"agentVersion":"agent/1","environmentSlug":"other-env"`), duplicate, "environmentSlug"},
		{"top level key twice, once escaped", hbWith(t, `"agentVersion":"agent/1"`, `"agentVersion":"agent/1","environment\u0053lug":"other-env"`), duplicate, "environmentSlug"},
		{"top level object twice", hbWith(t, `"agentVersion":"agent/1"`, `"agentVersion":"agent/1","deployment":{"id":"dep-2"}`), duplicate, "deployment"},
		{"top level optional time twice, first null", hbWith(t, `"sessionExpiresAt":"2026-01-02T00:00:00Z"`, `"sessionExpiresAt":null,"sessionExpiresAt":"2026-01-02T00:00:00Z"`), duplicate, "sessionExpiresAt"},
		{"deployment.id twice", hbWith(t, `"id":"dep-1"`, `"id":"dep-1","id":"dep-2"`), duplicate, "id"},
		{"reaper.limitMinutes twice", hbWith(t, `"limitMinutes":30`, `"limitMinutes":30,"limitMinutes":10080`), duplicate, "limitMinutes"},
		{"case variant and exact key (the variant is named)", hbWith(t, `"agentVersion":"agent/1"`, `"agentVersion":"agent/1","AgentVersion":"agent/2"`), caseVariant, "AgentVersion"},

		{"truncated body with a case variant", hbWith(t, `"environmentSlug"`, `"ENVIRONMENTSLUG"`)[:40], malformed, ""},
		{"unterminated body with a duplicate", hbWith(t, `"id":"dep-1"`, `"id":"dep-1","id":"dep-2"`)[:len(validHeartbeatJSON)], malformed, ""},
		{"top level key nested", hbWith(t, `"id":"dep-1"`, `"id":"dep-1","environmentSlug":"x"`), unknown, "environmentSlug"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var hb protocol.HeartbeatV1
			rf := DecodeBody(tc.body, &hb)
			switch tc.want {
			case accept:
				if rf != nil {
					t.Fatalf("refused %d %s: %s", rf.Status, rf.Code, rf.Message)
				}
				if hb.EnvironmentSlug != "demo-harbor" || hb.Deployment.ID != "dep-1" || hb.Reaper.LimitMinutes != 30 {
					t.Fatalf("decoded %+v", hb)
				}
				return
			case malformed:
				if rf == nil || rf.Status != http.StatusBadRequest || rf.Code != "malformed_json" {
					t.Fatalf("got %+v, want 400 malformed_json", rf)
				}
				return
			}
			if rf == nil || rf.Status != http.StatusUnprocessableEntity || rf.Code != "invalid_body" {
				t.Fatalf("got %+v, want 422 invalid_body", rf)
			}
			if !strings.Contains(rf.Message, `"`+tc.key+`"`) {
				t.Errorf("message %q does not name %q", rf.Message, tc.key)
			}
			for _, value := range []string{"demo-harbor", "other-env", "dep-1", "dep-2", "agent/", "10080", "2026"} {
				if strings.Contains(rf.Message, value) {
					t.Errorf("message %q echoes the value %q", rf.Message, value)
				}
			}
			if tc.want == duplicate && !strings.Contains(rf.Message, "more than once") {
				t.Errorf("message %q does not say the key repeats", rf.Message)
			}
			if tc.want == caseVariant && !strings.Contains(rf.Message, "case-sensitive") {
				t.Errorf("message %q does not say names are case-sensitive", rf.Message)
			}
		})
	}
}

// BenchmarkDecodeHeartbeat compares decoding a heartbeat body as before the
// strict key check (encoding/json with DisallowUnknownFields) with DecodeBody
// (the same plus the strict key check of internal/strictjson).
func BenchmarkDecodeHeartbeat(b *testing.B) {
	body := []byte(validHeartbeatJSON)
	b.Run("without-check", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			var hb protocol.HeartbeatV1
			dec := json.NewDecoder(bytes.NewReader(body))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&hb); err != nil || dec.More() {
				b.Fatal(err)
			}
		}
	})
	b.Run("with-check", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			var hb protocol.HeartbeatV1
			if rf := DecodeBody(body, &hb); rf != nil {
				b.Fatal(rf.Message)
			}
		}
	})
}
