package daemon_test

import (
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/alerts"
	"github.com/chalupa-run/chalupa/alerts/sink/smtp"
	"github.com/chalupa-run/chalupa/alerts/sink/webhook"
	"github.com/chalupa-run/chalupa/daemon/daemontest"
	"github.com/chalupa-run/chalupa/ingest"
	"github.com/chalupa-run/chalupa/internal/apischema"
	"github.com/chalupa-run/chalupa/jobs"
	"github.com/chalupa-run/chalupa/storage"
)

// The codes the admin bodies of this group answer for shape, beside
// shapeCodes' own: an accepted row refused with one of them fails.
var _ = func() bool {
	for _, c := range []string{"missing_action", "unknown_action", "unknown_scope", "invalid_rollout", "unknown_sink",
		"bad_duration", "bad_password", "invalid_kind", "invalid_max_session", "invalid_services", "invalid_token", "bad_action"} {
		shapeCodes[c] = true
	}
	return true
}()

// shapeSelectors are constraints of an anyOf that select an alternative
// rather than refuse a body, so that no body breaks one alone (without
// it, the body another alternative accepts), with the reason;
// checkShapeCoverage passes over them.
var shapeSelectors = map[string]string{
	"POST /api/admin/ingest-keys anyOf[1]/required:action": "a rotate body without its action is an issue body, which the issue alternative accepts",
}

// opAt is operation id's path with its parameters filled from kv
// (":slug", "shape-admin", …).
func opAt(id string, kv ...string) string {
	return strings.NewReplacer(kv...).Replace(daemontest.OpPath(id))
}

var _ = registerShapes("admin", func(e *shapeEnv) []shapeCase {
	s := func(v string) []byte { return []byte(v) }
	policy := opAt(adminapi.OpSetSessionPolicy, ":slug", "shape-admin")
	services := opAt(adminapi.OpSetLogServices, ":slug", "shape-admin")
	token := opAt(adminapi.OpSetProviderToken, ":slug", "shape-admin-org")
	mute := opAt(adminapi.OpMuteAlertKind, ":kind", alerts.Conditions[0].Kind)
	long := func(c string, n int) string { return strings.Repeat(c, n) }
	return []shapeCase{
		// What the later rows need.
		{"create its environment", adminapi.OpCreateEnvironment, "", s(`{"slug":"shape-admin"}`), 0, ""},
		{"create its organization", adminapi.OpCreateOrganization, "", s(`{"slug":"shape-admin-org"}`), 0, ""},

		{"cancel without scope", adminapi.OpCancelPulumiState, "", s(`{}`), 422, "unknown_scope"},
		{"cancel without scope kind", adminapi.OpCancelPulumiState, "", s(`{"scope":{"id":"b"}}`), 422, "unknown_scope"},
		{"cancel of a vm scope", adminapi.OpCancelPulumiState, "", s(`{"scope":{"kind":"vm","id":"b"}}`), 422, "unknown_scope"},
		{"cancel of a box", adminapi.OpCancelPulumiState, "", s(`{"scope":{"kind":"box","id":"no-such-box"}}`), 0, ""},

		{"converge without anything", adminapi.OpRunPulumiConverge, "", s(`{}`), 400, "missing_action"},
		{"converge without action", adminapi.OpRunPulumiConverge, "", s(`{"scope":{"kind":"box","id":"b"}}`), 400, "missing_action"},
		{"converge without scope", adminapi.OpRunPulumiConverge, "", s(`{"action":"up"}`), 422, "unknown_scope"},
		{"converge of a vm scope", adminapi.OpRunPulumiConverge, "", s(`{"scope":{"kind":"vm","id":"b"},"action":"up"}`), 422, "unknown_scope"},
		{"converge with an unknown action", adminapi.OpRunPulumiConverge, "", s(`{"scope":{"kind":"box","id":"b"},"action":"nuke"}`), 422, "unknown_action"},
		{"converge preview", adminapi.OpRunPulumiConverge, "", s(`{"scope":{"kind":"box","id":"no-such-box"},"action":"preview"}`), 0, ""},
		{"converge up", adminapi.OpRunPulumiConverge, "", s(`{"scope":{"kind":"box","id":"no-such-box"},"action":"up"}`), 0, ""},
		{"converge refresh", adminapi.OpRunPulumiConverge, "", s(`{"scope":{"kind":"box","id":"no-such-box"},"action":"refresh"}`), 0, ""},
		{"converge destroy with data", adminapi.OpRunPulumiConverge, "", s(`{"scope":{"kind":"box","id":"no-such-box"},"action":"destroy","includeData":true,"confirmation":"destroy data no-such-box"}`), 0, ""},

		{"rollout of a bad slug", adminapi.OpStartAgentRollout, "", s(`{"environment":"Shape_Admin"}`), 422, "invalid_rollout"},
		{"rollout with batch 51", adminapi.OpStartAgentRollout, "", s(`{"all":true,"batch":51}`), 422, "invalid_rollout"},
		{"rollout with a negative batch", adminapi.OpStartAgentRollout, "", s(`{"all":true,"batch":-1}`), 422, "invalid_rollout"},
		{"rollout with batch 50", adminapi.OpStartAgentRollout, "", s(`{"environment":"shape-admin","batch":50}`), 0, ""},
		{"rollout with the default batch", adminapi.OpStartAgentRollout, "", s(`{"environment":"shape-admin","batch":0}`), 0, ""},

		{"mute without for", adminapi.OpMuteAlertKind, mute, s(`{}`), 400, "bad_duration"},
		{"mute for words", adminapi.OpMuteAlertKind, mute, s(`{"for":"2 hours"}`), 400, "bad_duration"},
		{"mute for a number without unit", adminapi.OpMuteAlertKind, mute, s(`{"for":"2"}`), 400, "bad_duration"},
		{"mute for a lone dot", adminapi.OpMuteAlertKind, mute, s(`{"for":".h"}`), 400, "bad_duration"},
		{"mute for 1.5h", adminapi.OpMuteAlertKind, mute, s(`{"for":"1.5h"}`), 0, ""},
		{"mute for 1h30m", adminapi.OpMuteAlertKind, mute, s(`{"for":"1h30m"}`), 0, ""},
		{"mute for longer than the bound", adminapi.OpMuteAlertKind, mute, s(`{"for":"25h"}`), 0, ""},

		{"test an unknown sink", adminapi.OpTestAlertSinks, "", s(`{"sink":"pager"}`), 404, "unknown_sink"},
		{"test every sink", adminapi.OpTestAlertSinks, "", s(`{}`), 0, ""},
		{"test the webhook", adminapi.OpTestAlertSinks, "", s(`{"sink":"webhook"}`), 0, ""},

		{"console password missing", adminapi.OpSetConsolePassword, "", s(`{}`), 422, "bad_password"},
		{"console password of 11 characters", adminapi.OpSetConsolePassword, "", s(`{"password":"` + long("é", 11) + `"}`), 422, "bad_password"},
		{"console password with a newline", adminapi.OpSetConsolePassword, "", s(`{"password":"twelve chars\nmore"}`), 422, "bad_password"},
		{"console password with DEL", adminapi.OpSetConsolePassword, "", s(`{"password":"twelve chars\u007f"}`), 422, "bad_password"},
		{"console password of 12 two-byte characters", adminapi.OpSetConsolePassword, "", s(`{"password":"` + long("é", 12) + `"}`), 0, ""},
		{"console password with C1 and a space", adminapi.OpSetConsolePassword, "", s(`{"password":"twelve chars\u0085"}`), 0, ""},

		{"session policy of an unknown kind", adminapi.OpSetSessionPolicy, policy, s(`{"kind":"prod","maxSessionSeconds":3600}`), 400, "invalid_kind"},
		{"session policy without kind", adminapi.OpSetSessionPolicy, policy, s(`{"maxSessionSeconds":3600}`), 400, "invalid_kind"},
		{"session policy of 59 s", adminapi.OpSetSessionPolicy, policy, s(`{"kind":"demo","maxSessionSeconds":59}`), 400, "invalid_max_session"},
		{"session policy above 30 days", adminapi.OpSetSessionPolicy, policy, s(`{"kind":"demo","maxSessionSeconds":2592001}`), 400, "invalid_max_session"},
		{"session policy without maxSessionSeconds", adminapi.OpSetSessionPolicy, policy, s(`{"kind":"test"}`), 400, "invalid_max_session"},
		{"session policy of 60 s", adminapi.OpSetSessionPolicy, policy, s(`{"kind":"demo","maxSessionSeconds":60}`), 0, ""},
		{"session policy of 30 days", adminapi.OpSetSessionPolicy, policy, s(`{"kind":"test","maxSessionSeconds":2592000}`), 0, ""},

		{"log services with a space", adminapi.OpSetLogServices, services, s(`{"services":["app.service","a b"]}`), 400, "invalid_services"},
		{"log services with an empty name", adminapi.OpSetLogServices, services, s(`{"services":[""]}`), 400, "invalid_services"},
		{"log services with 129 characters", adminapi.OpSetLogServices, services, s(`{"services":["` + long("a", 129) + `"]}`), 400, "invalid_services"},
		{"log services at the bounds", adminapi.OpSetLogServices, services, s(`{"services":["app@1.service","` + long("a", 128) + `","x"]}`), 0, ""},
		{"log services reset", adminapi.OpSetLogServices, services, s(`{"reset":true}`), 0, ""},

		{"provider token missing", adminapi.OpSetProviderToken, token, s(`{}`), 400, "invalid_token"},
		{"provider token with a space", adminapi.OpSetProviderToken, token, s(`{"token":"dop v1"}`), 400, "invalid_token"},
		{"provider token not ASCII", adminapi.OpSetProviderToken, token, s(`{"token":"dop_v1_é"}`), 400, "invalid_token"},
		{"provider token of 513 bytes", adminapi.OpSetProviderToken, token, s(`{"token":"` + long("a", 513) + `"}`), 400, "invalid_token"},
		{"provider token of 512 bytes", adminapi.OpSetProviderToken, token, s(`{"token":"` + long("a", 512) + `"}`), 0, ""},
		{"provider token of one byte", adminapi.OpSetProviderToken, token, s(`{"token":"~"}`), 0, ""},

		// One route, one schema (anyOf the three actions' bodies).
		{"issue key without slug", adminapi.OpIssueIngestKey, "", s(`{}`), 400, "invalid_slug"},
		{"issue key of a bad slug", adminapi.OpIssueIngestKey, "", s(`{"environmentSlug":"Shape"}`), 400, "invalid_slug"},
		{"issue key with a key id", adminapi.OpIssueIngestKey, "", s(`{"environmentSlug":"shape-admin","keyId":"k"}`), 400, "bad_body"},
		{"rotate keys without slug", adminapi.OpRotateIngestKey, "", s(`{"action":"rotate"}`), 400, "invalid_slug"},
		{"rotate keys with a key id", adminapi.OpRotateIngestKey, "", s(`{"action":"rotate","environmentSlug":"shape-admin","keyId":"k"}`), 400, "bad_body"},
		{"revoke without key id", adminapi.OpRevokeIngestKey, "", s(`{"action":"revoke"}`), 400, "bad_body"},
		{"revoke with a slug", adminapi.OpRevokeIngestKey, "", s(`{"action":"revoke","keyId":"k","environmentSlug":"shape-admin"}`), 400, "bad_body"},
		{"rotate keys of a bad slug", adminapi.OpRotateIngestKey, "", s(`{"action":"rotate","environmentSlug":"Shape"}`), 400, "invalid_slug"},
		{"revoke without its action", adminapi.OpRevokeIngestKey, "", s(`{"keyId":"k"}`), 400, "bad_body"},
		{"key action unknown", adminapi.OpIssueIngestKey, "", s(`{"action":"burn","environmentSlug":"shape-admin"}`), 400, "bad_action"},
		{"key action unknown with a key id", adminapi.OpRevokeIngestKey, "", s(`{"action":"burn","keyId":"k"}`), 400, "bad_action"},
		{"issue key", adminapi.OpIssueIngestKey, "", s(`{"environmentSlug":"shape-admin"}`), 0, ""},
		{"issue key by its action", adminapi.OpIssueIngestKey, "", s(`{"action":"issue","environmentSlug":"shape-admin"}`), 0, ""},
		{"rotate keys", adminapi.OpRotateIngestKey, "", s(`{"action":"rotate","environmentSlug":"shape-admin"}`), 0, ""},
		{"revoke an unknown key", adminapi.OpRevokeIngestKey, "", s(`{"action":"revoke","keyId":"env_shape-admin_0000000000000000"}`), 0, ""},
	}
})

// tagOf is the rules of field name of T's `schema` tag.
func tagOf[T any](t *testing.T, name string) apischema.Rules {
	t.Helper()
	f, ok := reflect.TypeFor[T]().FieldByName(name)
	if !ok {
		t.Fatalf("%v has no field %s", reflect.TypeFor[T](), name)
	}
	return apischema.RulesOf(f.Tag)
}

// TestAdminTagsAreTheConstants: the admin bodies' tags say the very
// values the code holds elsewhere: the converge actions (jobs.Actions),
// the scope kind, the rollout's batch bound, the sinks' names, the session
// policy's kinds and bounds, the password's length and the provider
// token's byte bound (docs/operations.md, "OpenAPI").
func TestAdminTagsAreTheConstants(t *testing.T) {
	between := func(r apischema.Rules, lo, hi int64) bool {
		return r.Minimum != nil && *r.Minimum == lo && r.Maximum != nil && *r.Maximum == hi
	}
	for _, c := range []struct {
		name string
		ok   bool
	}{
		{"converge actions", slices.Equal(tagOf[adminapi.ConvergeRequest](t, "Action").Enum, jobs.Actions)},
		{"scope kind", slices.Equal(tagOf[adminapi.Scope](t, "Kind").Enum, []string{jobs.ScopeBox})},
		{"rollout batch", between(tagOf[adminapi.StartAgentRolloutRequest](t, "Batch"), 0, adminapi.MaxRolloutBatch)},
		{"sink names", slices.Equal(tagOf[adminapi.TestAlertSinksRequest](t, "Sink").Enum, []string{smtp.Name, webhook.Name})},
		{"session kinds", slices.Equal(tagOf[adminapi.SetSessionPolicyRequest](t, "Kind").Enum, []string{storage.SessionKindDemo, storage.SessionKindTest})},
		{"session bounds", between(tagOf[adminapi.SetSessionPolicyRequest](t, "MaxSessionSeconds"), storage.MinSessionSeconds, storage.MaxSessionSeconds)},
		{"password length", tagOf[adminapi.SetConsolePasswordRequest](t, "Password").MinLength == adminapi.MinPasswordRunes},
		{"provider token bound", strings.Contains(apischema.Patterns["providerToken"], "{1,"+strconv.Itoa(ingest.MaxProviderTokenBytes)+"}")},
	} {
		t.Run(c.name, func(t *testing.T) {
			if !c.ok {
				t.Fatal("the tag and the constant differ")
			}
		})
	}
}

// TestDurationPatternIsParseDuration: the "duration" pattern accepts
// exactly what time.ParseDuration parses (an amount that overflows aside,
// which the handler refuses after it).
func TestDurationPatternIsParseDuration(t *testing.T) {
	for _, s := range []string{"0", "+0", "-0", "00", "2h", "1h30m", "1.5h", "1.h", ".5s", ".", ".h", "2", "2 h", "h", "1us", "1µs", "1μs",
		"1ns", "300ms", "-2h", "+2h", "1d", "", "1h-30m", "2H", " 2h", "1e3s"} {
		t.Run(strconv.Quote(s), func(t *testing.T) {
			_, err := time.ParseDuration(s)
			v := apischema.Check(adminapi.MuteAlertKindRequest{For: s})
			if (err == nil) != (v == nil) {
				t.Fatalf("ParseDuration error %v; Check %v", err, v)
			}
		})
	}
}

// TestPasswordTagIsCheckPassword: the password's tag (pattern and
// minLength) refuses exactly what adminapi.CheckPassword refuses below its
// byte bound, which the tag leaves to the handler.
func TestPasswordTagIsCheckPassword(t *testing.T) {
	for _, pw := range []string{"", "short", strings.Repeat("é", 11), strings.Repeat("é", 12), "twelve chars", "eleven char",
		"twelve chars\n", "twelve chars\t", "twelve chars\x7f", "twelve chars\u0085", "twelve chars\x00", strings.Repeat("🙂", 12),
		strings.Repeat("a", adminapi.MaxPasswordBytes)} {
		t.Run(strconv.Quote(pw[:min(len(pw), 16)]), func(t *testing.T) {
			err := adminapi.CheckPassword(pw)
			v := apischema.Check(adminapi.SetConsolePasswordRequest{Password: pw})
			if (err == nil) != (v == nil) {
				t.Fatalf("CheckPassword %v; Check %v", err, v)
			}
		})
	}
}
