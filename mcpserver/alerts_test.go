package mcpserver_test

import (
	"context"
	"strings"
	"testing"
)

// TestAlertTools: the alert operations are tools (docs/operations.md,
// "Alerts", operating alerts, and "MCP server"): listing alerts is a
// read-only tool; muting a kind silences the operator, so it is
// destructive and needs its phrase ("mute KIND for DURATION") — without it,
// or with another, nothing is muted; with it the mute is listed; ack and
// test are ordinary tools.
func TestAlertTools(t *testing.T) {
	cs, d := session(t)
	ctx := context.Background()
	res, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	for _, tl := range res.Tools {
		ro := tl.Annotations != nil && tl.Annotations.ReadOnlyHint
		destructive := tl.Annotations != nil && tl.Annotations.DestructiveHint != nil && *tl.Annotations.DestructiveHint
		switch tl.Name {
		case "chalupa_admin_list_alerts":
			listed[tl.Name] = ro && !destructive
		case "chalupa_admin_mute_alert_kind":
			listed[tl.Name] = !ro && destructive
		case "chalupa_admin_ack_alert", "chalupa_admin_test_alert_sinks", "chalupa_admin_unmute_alert_kind":
			listed[tl.Name] = !ro && !destructive
		}
	}
	for _, n := range []string{"chalupa_admin_list_alerts", "chalupa_admin_mute_alert_kind", "chalupa_admin_ack_alert", "chalupa_admin_test_alert_sinks", "chalupa_admin_unmute_alert_kind"} {
		if !listed[n] {
			t.Errorf("tool %s not listed with its annotations (read-only for the list, destructive for mute)", n)
		}
	}
	if r, text := call(t, cs, "chalupa_admin_list_alerts", nil); r.IsError || !strings.Contains(text, `"open":[]`) || !strings.Contains(text, `"sinks":[]`) {
		t.Fatalf("list: error %v, %s", r.IsError, text)
	}
	muted := func() int {
		l, err := d.Admin.ListAlerts(ctx, 0)
		if err != nil {
			t.Fatal(err)
		}
		return len(l.Mutes)
	}
	for _, tc := range []struct {
		name string
		args map[string]any
	}{
		{"without confirm", map[string]any{"kind": "clock-step", "for": "2h"}},
		{"another duration", map[string]any{"kind": "clock-step", "for": "2h", "confirm": "mute clock-step for 24h"}},
		{"another kind", map[string]any{"kind": "clock-step", "for": "2h", "confirm": "mute clock-suspect for 2h"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, text := call(t, cs, "chalupa_admin_mute_alert_kind", tc.args)
			if !r.IsError || !strings.Contains(text, "refused") {
				t.Fatalf("not refused: %s", text)
			}
			if n := muted(); n != 0 {
				t.Fatalf("%d mutes after a refused call", n)
			}
		})
	}
	r, text := call(t, cs, "chalupa_admin_mute_alert_kind", map[string]any{"kind": "clock-step", "for": "2h", "confirm": "mute clock-step for 2h"})
	if r.IsError || !strings.Contains(text, `"kind":"clock-step"`) || muted() != 1 {
		t.Fatalf("mute with the phrase: error %v, %s", r.IsError, text)
	}
	if r, text := call(t, cs, "chalupa_admin_ack_alert", map[string]any{"id": "01NOSUCHALERT"}); !r.IsError || !strings.Contains(text, "unknown_alert") {
		t.Errorf("ack of an unknown alert: error %v, %s", r.IsError, text)
	}
	if r, text := call(t, cs, "chalupa_admin_test_alert_sinks", map[string]any{}); !r.IsError || !strings.Contains(text, "no_sinks") {
		t.Errorf("test without a sink: error %v, %s", r.IsError, text)
	}
}
