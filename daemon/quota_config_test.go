package daemon_test

import (
	"strings"
	"testing"

	"github.com/chalupa-run/chalupa/daemon"
	"github.com/chalupa-run/chalupa/ingest"
)

// TestQuotaConfig: every CHALUPA_QUOTA_* takes its documented default when
// unset, accepts 0 (unlimited, listed for the start-up warning) up to
// ingest.MaxQuota, and refuses anything else naming the variable, never its
// value.
func TestQuotaConfig(t *testing.T) {
	t.Parallel()
	type quotas = ingest.Quotas
	defaults := ingest.DefaultQuotas()
	for _, tc := range []struct {
		name string
		set  map[string]string
		want quotas
		// unlimited lists the variables at 0.
		unlimited []string
		// refused is the variable the error names ("" for none).
		refused string
	}{
		{name: "unset: defaults", want: defaults},
		{name: "defaults are the documented numbers", want: quotas{HeartbeatsPerMinute: 12, HeartbeatBurst: 20, OpenSessions: 8, ActiveDeployments: 100, EnvironmentHeartbeatsPerMinute: 1200,
			EnvironmentStorageBytes: 4 << 30,
			TelemetryPerMinute:      6, TelemetryBurst: 120, EnvironmentTelemetryPerMinute: 600,
			LifecyclePerMinute: 6, LifecycleBurst: 30, EnvironmentLifecyclePerMinute: 240,
			RunsPerMinute: 6, RunBurst: 30, EnvironmentRunsPerMinute: 120,
			ArtifactKiBPerMinute: 256, ArtifactKiBBurst: 1024, EnvironmentArtifactKiBPerMinute: 2048,
			LogRequestsPerMinute: 30, LogBurst: 120, EnvironmentLogRequestsPerMinute: 600}},
		{name: "each set", set: map[string]string{
			"CHALUPA_QUOTA_HEARTBEATS_PER_MINUTE": "6", "CHALUPA_QUOTA_HEARTBEAT_BURST": "10", "CHALUPA_QUOTA_OPEN_SESSIONS": "2",
			"CHALUPA_QUOTA_ACTIVE_DEPLOYMENTS": "400", "CHALUPA_QUOTA_ENVIRONMENT_HEARTBEATS_PER_MINUTE": "1000000",
			"CHALUPA_QUOTA_ENVIRONMENT_STORAGE_BYTES": "1099511627776"},
			want: func() quotas {
				q := defaults
				q.HeartbeatsPerMinute, q.HeartbeatBurst, q.OpenSessions, q.ActiveDeployments, q.EnvironmentHeartbeatsPerMinute = 6, 10, 2, 400, 1000000
				q.EnvironmentStorageBytes = 1 << 40
				return q
			}()},
		{name: "zero storage budget is unlimited", set: map[string]string{"CHALUPA_QUOTA_ENVIRONMENT_STORAGE_BYTES": "0"},
			want: func() quotas {
				q := defaults
				q.EnvironmentStorageBytes = 0
				return q
			}(),
			unlimited: []string{"CHALUPA_QUOTA_ENVIRONMENT_STORAGE_BYTES"}},
		{name: "negative storage budget", set: map[string]string{"CHALUPA_QUOTA_ENVIRONMENT_STORAGE_BYTES": "-4096"}, refused: "CHALUPA_QUOTA_ENVIRONMENT_STORAGE_BYTES"},
		{name: "storage budget in units", set: map[string]string{"CHALUPA_QUOTA_ENVIRONMENT_STORAGE_BYTES": "4GiB"}, refused: "CHALUPA_QUOTA_ENVIRONMENT_STORAGE_BYTES"},
		{name: "storage budget beyond 1 TiB", set: map[string]string{"CHALUPA_QUOTA_ENVIRONMENT_STORAGE_BYTES": "1099511627777"}, refused: "CHALUPA_QUOTA_ENVIRONMENT_STORAGE_BYTES"},
		{name: "each route's rate set", set: map[string]string{
			"CHALUPA_QUOTA_TELEMETRY_PER_MINUTE": "1", "CHALUPA_QUOTA_TELEMETRY_BURST": "2", "CHALUPA_QUOTA_ENVIRONMENT_TELEMETRY_PER_MINUTE": "3",
			"CHALUPA_QUOTA_LIFECYCLE_PER_MINUTE": "4", "CHALUPA_QUOTA_LIFECYCLE_BURST": "5", "CHALUPA_QUOTA_ENVIRONMENT_LIFECYCLE_PER_MINUTE": "6",
			"CHALUPA_QUOTA_RUNS_PER_MINUTE": "7", "CHALUPA_QUOTA_RUN_BURST": "8", "CHALUPA_QUOTA_ENVIRONMENT_RUNS_PER_MINUTE": "9",
			"CHALUPA_QUOTA_ARTIFACT_KIB_PER_MINUTE": "10", "CHALUPA_QUOTA_ARTIFACT_KIB_BURST": "164", "CHALUPA_QUOTA_ENVIRONMENT_ARTIFACT_KIB_PER_MINUTE": "1000000",
			"CHALUPA_QUOTA_LOG_REQUESTS_PER_MINUTE": "13", "CHALUPA_QUOTA_LOG_BURST": "14", "CHALUPA_QUOTA_ENVIRONMENT_LOG_REQUESTS_PER_MINUTE": "15"},
			want: func() quotas {
				q := defaults
				q.TelemetryPerMinute, q.TelemetryBurst, q.EnvironmentTelemetryPerMinute = 1, 2, 3
				q.LifecyclePerMinute, q.LifecycleBurst, q.EnvironmentLifecyclePerMinute = 4, 5, 6
				q.RunsPerMinute, q.RunBurst, q.EnvironmentRunsPerMinute = 7, 8, 9
				q.ArtifactKiBPerMinute, q.ArtifactKiBBurst, q.EnvironmentArtifactKiBPerMinute = 10, 164, 1000000
				q.LogRequestsPerMinute, q.LogBurst, q.EnvironmentLogRequestsPerMinute = 13, 14, 15
				return q
			}()},
		{name: "artifact burst below the largest report", set: map[string]string{"CHALUPA_QUOTA_ARTIFACT_KIB_BURST": "163"}, refused: "CHALUPA_QUOTA_ARTIFACT_KIB_BURST"},
		{name: "environment artifacts below the largest report", set: map[string]string{"CHALUPA_QUOTA_ENVIRONMENT_ARTIFACT_KIB_PER_MINUTE": "100"}, refused: "CHALUPA_QUOTA_ENVIRONMENT_ARTIFACT_KIB_PER_MINUTE"},
		{name: "zero is unlimited", set: map[string]string{"CHALUPA_QUOTA_ACTIVE_DEPLOYMENTS": "0", "CHALUPA_QUOTA_HEARTBEAT_BURST": "0"},
			want: func() quotas {
				q := defaults
				q.ActiveDeployments, q.HeartbeatBurst = 0, 0
				return q
			}(),
			unlimited: []string{"CHALUPA_QUOTA_HEARTBEAT_BURST", "CHALUPA_QUOTA_ACTIVE_DEPLOYMENTS"}},
		{name: "zero turns a route's rate off", set: map[string]string{"CHALUPA_QUOTA_ARTIFACT_KIB_BURST": "0", "CHALUPA_QUOTA_ENVIRONMENT_LOG_REQUESTS_PER_MINUTE": "0"},
			want: func() quotas {
				q := defaults
				q.ArtifactKiBBurst, q.EnvironmentLogRequestsPerMinute = 0, 0
				return q
			}(),
			unlimited: []string{"CHALUPA_QUOTA_ARTIFACT_KIB_BURST", "CHALUPA_QUOTA_ENVIRONMENT_LOG_REQUESTS_PER_MINUTE"}},
		{name: "negative", set: map[string]string{"CHALUPA_QUOTA_HEARTBEATS_PER_MINUTE": "-7321"}, refused: "CHALUPA_QUOTA_HEARTBEATS_PER_MINUTE"},
		{name: "negative burst", set: map[string]string{"CHALUPA_QUOTA_HEARTBEAT_BURST": "-1"}, refused: "CHALUPA_QUOTA_HEARTBEAT_BURST"},
		{name: "not a number", set: map[string]string{"CHALUPA_QUOTA_OPEN_SESSIONS": "eight-sessions"}, refused: "CHALUPA_QUOTA_OPEN_SESSIONS"},
		{name: "a fraction", set: map[string]string{"CHALUPA_QUOTA_ACTIVE_DEPLOYMENTS": "99.5"}, refused: "CHALUPA_QUOTA_ACTIVE_DEPLOYMENTS"},
		{name: "beyond the maximum", set: map[string]string{"CHALUPA_QUOTA_ENVIRONMENT_HEARTBEATS_PER_MINUTE": "1000001"}, refused: "CHALUPA_QUOTA_ENVIRONMENT_HEARTBEATS_PER_MINUTE"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			env := goodEnv(t.TempDir())
			for k, v := range tc.set {
				env[k] = v
			}
			cfg, err := daemon.LoadConfig(envFunc(env))
			if tc.refused != "" {
				if err == nil {
					t.Fatalf("accepted %v", tc.set)
				}
				msg := err.Error()
				if !strings.Contains(msg, tc.refused) {
					t.Fatalf("error does not name %s:\n%s", tc.refused, msg)
				}
				if v := tc.set[tc.refused]; strings.Contains(msg, v) {
					t.Fatalf("error repeats the value %q:\n%s", v, msg)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := cfg.Quotas; got != tc.want {
				t.Fatalf("quotas = %+v, want %+v", got, tc.want)
			}
			if got := strings.Join(cfg.UnlimitedQuotas(), ","); got != strings.Join(tc.unlimited, ",") {
				t.Fatalf("unlimited = %q, want %q", got, tc.unlimited)
			}
			shown := map[string]string{}
			for _, kv := range cfg.Redacted() {
				shown[kv[0]] = kv[1]
			}
			for _, k := range tc.unlimited {
				if !strings.HasPrefix(shown[k], "0 (unlimited") {
					t.Fatalf("config check shows %s as %q", k, shown[k])
				}
			}
			if _, ok := shown["CHALUPA_QUOTA_HEARTBEATS_PER_MINUTE"]; !ok {
				t.Fatalf("config check does not show the quotas")
			}
		})
	}
}
