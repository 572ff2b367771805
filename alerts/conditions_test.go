package alerts

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite docs/operations.md's condition table from Conditions")

// TestConditionsDocs: docs/operations.md's "Alerts" condition table is the
// one Conditions renders (ConditionsTable), byte for byte. -update
// rewrites it; otherwise the failure prints the table to paste.
func TestConditionsDocs(t *testing.T) {
	path := filepath.Join("..", "docs", "operations.md")
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	start := strings.Index(doc, ConditionsHeader)
	if start < 0 {
		t.Fatalf("%s has no Alerts condition table (header %q)", path, ConditionsHeader)
	}
	end := start + strings.Index(doc[start:], "\n\n") + 1
	got, want := doc[start:end], ConditionsTable()
	if got == want {
		return
	}
	if *update {
		if err := os.WriteFile(path, []byte(doc[:start]+want+doc[end:]), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Fatalf("%s's Alerts condition table differs from alerts.Conditions; run go test ./alerts -run TestConditionsDocs -update, or paste:\n%s", path, want)
}

// TestConditions: every kind the issue names is in the table once, with
// the severity, a subject kind, a meaning and a first action.
func TestConditions(t *testing.T) {
	critical := []string{KindClockStep, KindClockSuspect, KindReplicaFailing, KindReplicaRefused, KindStorageUnavailable, KindDiskLow,
		KindReaperTokenRefused, KindReaperOverdue, KindDOTokenRefused}
	warning := []string{KindMassDue, KindReaperRateLimited, KindAgentUpgradeFailed, KindJobFailed, KindWorkerOffline, KindQuotaExceeded,
		KindBudget, KindAlertDeliveryFailing}
	seen := map[string]int{}
	for _, c := range Conditions {
		seen[c.Kind]++
		if c.Meaning == "" || c.Action == "" || c.Subject == "" {
			t.Errorf("%s: meaning, action and subject must be set", c.Kind)
		}
	}
	for sev, kinds := range map[Severity][]string{Critical: critical, Warning: warning} {
		for _, k := range kinds {
			t.Run(k, func(t *testing.T) {
				c, ok := Lookup(k)
				if !ok || seen[k] != 1 {
					t.Fatalf("%s: in the table %d times", k, seen[k])
				}
				if c.Severity != sev {
					t.Errorf("%s: severity %s, want %s", k, c.Severity, sev)
				}
			})
		}
	}
	if len(Conditions) != len(critical)+len(warning) {
		t.Errorf("table has %d rows, want %d", len(Conditions), len(critical)+len(warning))
	}
}
