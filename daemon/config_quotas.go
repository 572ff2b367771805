package daemon

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/chalupa-run/chalupa/ingest"
	"github.com/chalupa-run/chalupa/ingest/logs"
	"github.com/chalupa-run/chalupa/reaper/clockguard"
)

// minArtifactKiB is the smallest non-zero artifact bucket (KiB): the
// artifacts of the largest run report, rounded up.
const minArtifactKiB = (ingest.MaxRunArtifactBytes + 1023) / 1024

// quotaSpec is one CHALUPA_QUOTA_* row: its variable, its field of
// ingest.Quotas (whose default is ingest.DefaultQuotas'), its help line,
// and whether a non-zero value must hold the largest run report's
// artifacts (minArtifactKiB).
type quotaSpec struct {
	name      string
	field     func(*ingest.Quotas) *int
	help      string
	artifacts bool
}

// quotaSpecs are the whole-number quotas in the order of docs/operations.md,
// "Quotas". Adding a quota is a field of ingest.Quotas with its default in
// ingest.DefaultQuotas, its use in ingest, and one row here
// (TestQuotaRecipe).
var quotaSpecs = []quotaSpec{
	{"CHALUPA_QUOTA_HEARTBEATS_PER_MINUTE", func(q *ingest.Quotas) *int { return &q.HeartbeatsPerMinute }, "a deployment's heartbeats a minute", false},
	{"CHALUPA_QUOTA_HEARTBEAT_BURST", func(q *ingest.Quotas) *int { return &q.HeartbeatBurst }, "a deployment's heartbeat burst", false},
	{"CHALUPA_QUOTA_OPEN_SESSIONS", func(q *ingest.Quotas) *int { return &q.OpenSessions }, "a deployment's telemetry sessions, open and opened an hour", false},
	{"CHALUPA_QUOTA_ACTIVE_DEPLOYMENTS", func(q *ingest.Quotas) *int { return &q.ActiveDeployments }, "an environment's active deployments", false},
	{"CHALUPA_QUOTA_ENVIRONMENT_HEARTBEATS_PER_MINUTE", func(q *ingest.Quotas) *int { return &q.EnvironmentHeartbeatsPerMinute }, "an environment's heartbeats a minute", false},
	{"CHALUPA_QUOTA_TELEMETRY_PER_MINUTE", func(q *ingest.Quotas) *int { return &q.TelemetryPerMinute }, "a deployment's telemetry windows a minute", false},
	{"CHALUPA_QUOTA_TELEMETRY_BURST", func(q *ingest.Quotas) *int { return &q.TelemetryBurst }, "a deployment's telemetry window burst", false},
	{"CHALUPA_QUOTA_ENVIRONMENT_TELEMETRY_PER_MINUTE", func(q *ingest.Quotas) *int { return &q.EnvironmentTelemetryPerMinute }, "an environment's telemetry windows a minute", false},
	{"CHALUPA_QUOTA_LIFECYCLE_PER_MINUTE", func(q *ingest.Quotas) *int { return &q.LifecyclePerMinute }, "a deployment's lifecycle events a minute", false},
	{"CHALUPA_QUOTA_LIFECYCLE_BURST", func(q *ingest.Quotas) *int { return &q.LifecycleBurst }, "a deployment's lifecycle event burst", false},
	{"CHALUPA_QUOTA_ENVIRONMENT_LIFECYCLE_PER_MINUTE", func(q *ingest.Quotas) *int { return &q.EnvironmentLifecyclePerMinute }, "an environment's lifecycle events a minute", false},
	{"CHALUPA_QUOTA_RUNS_PER_MINUTE", func(q *ingest.Quotas) *int { return &q.RunsPerMinute }, "a deployment's run reports a minute", false},
	{"CHALUPA_QUOTA_RUN_BURST", func(q *ingest.Quotas) *int { return &q.RunBurst }, "a deployment's run report burst", false},
	{"CHALUPA_QUOTA_ENVIRONMENT_RUNS_PER_MINUTE", func(q *ingest.Quotas) *int { return &q.EnvironmentRunsPerMinute }, "an environment's run reports a minute", false},
	{"CHALUPA_QUOTA_ARTIFACT_KIB_PER_MINUTE", func(q *ingest.Quotas) *int { return &q.ArtifactKiBPerMinute }, "a deployment's artifact KiB a minute", false},
	{"CHALUPA_QUOTA_ARTIFACT_KIB_BURST", func(q *ingest.Quotas) *int { return &q.ArtifactKiBBurst }, "a deployment's artifact KiB burst", true},
	{"CHALUPA_QUOTA_ENVIRONMENT_ARTIFACT_KIB_PER_MINUTE", func(q *ingest.Quotas) *int { return &q.EnvironmentArtifactKiBPerMinute }, "an environment's artifact KiB a minute", true},
	{"CHALUPA_QUOTA_LOG_REQUESTS_PER_MINUTE", func(q *ingest.Quotas) *int { return &q.LogRequestsPerMinute }, "a deployment's log broker requests a minute", false},
	{"CHALUPA_QUOTA_LOG_BURST", func(q *ingest.Quotas) *int { return &q.LogBurst }, "a deployment's log broker request burst", false},
	{"CHALUPA_QUOTA_ENVIRONMENT_LOG_REQUESTS_PER_MINUTE", func(q *ingest.Quotas) *int { return &q.EnvironmentLogRequestsPerMinute }, "an environment's log broker requests a minute", false},
}

// unlimitedText is a quota at 0 in the preview.
const unlimitedText = "0 (unlimited: benchmarks only)"

// quotaVariables are the CHALUPA_QUOTA_* rows: each whole-number quota, a
// whole number in 0–ingest.MaxQuota (0 is unlimited), then the storage
// budget in bytes, beyond MaxQuota (docs/operations.md, "Quotas").
func (c *Config) quotaVariables() []variable {
	defaults := ingest.DefaultQuotas()
	var defs []string
	for _, s := range quotaSpecs {
		defs = append(defs, thousands(int64(*s.field(&defaults))))
	}
	group := fmt.Sprintf("`CHALUPA_QUOTA_*` (%d; see \"Quotas\")", len(quotaSpecs))
	var rows []variable
	for _, s := range quotaSpecs {
		p := s.field(&c.Quotas)
		rows = append(rows, variable{name: s.name, ptr: p, quota: true, help: s.help, doc: docRow{group: group},
			load: func(l *loader, v string) {
				if v == "" {
					return
				}
				n, err := strconv.Atoi(v)
				if err != nil || n < 0 || n > ingest.MaxQuota {
					l.bad("%s must be a whole number between 0 (unlimited, for benchmarks only) and %d", s.name, ingest.MaxQuota)
					return
				}
				*p = n
				// A bucket smaller than the largest run report's artifacts
				// would hold such a report back for good.
				if s.artifacts && n != 0 && n*1024 < ingest.MaxRunArtifactBytes {
					l.bad("%s must be 0 (unlimited) or at least %d: the artifacts of the largest run report (KiB)", s.name, minArtifactKiB)
				}
			},
			show: func() string {
				if *p == 0 {
					return unlimitedText
				}
				return strconv.Itoa(*p)
			}})
	}
	rows[0].doc = docRow{group: group, def: strings.Join(defs, ", "),
		refusedWhen: "not a whole number in 0–1,000,000; 0 is unlimited, for benchmarks only, and `serve` warns naming each variable at 0",
		why:         "a typo must not silently lift the bound on what one leaked key can write"}
	storage := &c.Quotas.EnvironmentStorageBytes
	return append(rows, variable{name: "CHALUPA_QUOTA_ENVIRONMENT_STORAGE_BYTES", ptr: storage, quota: true,
		load: int64Var(storage, ingest.DefaultEnvironmentStorageBytes, 0, ingest.MaxEnvironmentStorageBytes,
			fmt.Sprintf("CHALUPA_QUOTA_ENVIRONMENT_STORAGE_BYTES must be a whole number of bytes between 0 (unlimited, for benchmarks only) and %d", ingest.MaxEnvironmentStorageBytes)),
		show: func() string {
			if *storage == 0 {
				return unlimitedText
			}
			return strconv.FormatInt(*storage, 10)
		},
		help: "an environment's storage budget in bytes (default 4 GiB)",
		doc: docRow{def: "4 GiB (" + thousands(defaults.EnvironmentStorageBytes) + ")",
			refusedWhen: "not a whole number of bytes in 0–1 TiB; 0 is unlimited, for benchmarks only, and `serve` warns at 0",
			why:         "what an environment's runs, telemetry and producer lifecycle events may hold (see \"Quotas\")"}})
}

// thousands prints n with commas between groups of three digits, as the
// docs write numbers.
func thousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// newIngestService is the signed-ingest service the quotas bound, with the
// deprecated shared key (CHALUPA_INGEST_KEY), the droplet lookup of the
// `sunk` check, the log broker and the clock guard it tells of each
// agent's contact and whose wall-clock high-water mark it keeps (docs/operations.md, "Signed ingest" and "Quotas").
func newIngestService(d serverDeps, droplets ingest.DropletLookup, broker *logs.Broker, guard *clockguard.Guard) *ingest.Service {
	return ingest.NewService(ingest.Config{DB: d.DB, Keys: d.Keys, SharedKey: d.Config.Secrets.sharedKey(), Clock: d.Clock, Log: d.Log,
		Quotas: d.Config.Quotas, Droplets: droplets, Logs: broker, Contact: guard, Mark: guard})
}
