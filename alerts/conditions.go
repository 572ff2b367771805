package alerts

import (
	"fmt"
	"strings"
)

// Condition kinds (docs/operations.md, "Alerts", conditions). Where an
// event already carried the condition its kind is the event's: the reaper's
// troubles (reaper/troubles.go), its holds (reaper/holds.go), the replica's
// refusal (storage/replica_identity.go), low disk (daemon/storage_health.go),
// quota refusals (ingest/quota_events.go), a failed agent upgrade
// (pulumiexec/agentrollout/upgrade.go).
const (
	KindClockStep            = "clock-step"
	KindClockSuspect         = "clock-suspect"
	KindReplicaFailing       = "replica-failing"
	KindReplicaRefused       = "replica-refused"
	KindStorageUnavailable   = "storage-unavailable"
	KindDiskLow              = "disk-low"
	KindReaperTokenRefused   = "reaper-token-refused"
	KindReaperOverdue        = "reaper-overdue"
	KindDOTokenRefused       = "do-token-refused"
	KindMassDue              = "reaper-mass-due"
	KindReaperRateLimited    = "reaper-rate-limited"
	KindAgentUpgradeFailed   = "agent-upgrade-failed"
	KindJobFailed            = "job-failed"
	KindWorkerOffline        = "worker-offline"
	KindQuotaExceeded        = "quota-exceeded"
	KindBudget               = "budget"
	KindAlertDeliveryFailing = "alert-delivery-failing"
)

// Subject kinds (Subject.Kind).
const (
	SubjectPlatform    = "platform"
	SubjectEnvironment = "environment"
	SubjectBox         = "box"
	SubjectDeployment  = "deployment"
)

// Condition is one row of the condition table: a state chalupa detects that
// a person must hear about (docs/operations.md, "Alerts", conditions).
type Condition struct {
	// Kind names the condition; an alert, its messages, its event and
	// its metric carry it.
	Kind string
	// Subject is the subject kind the condition is about: platform,
	// environment, box or deployment.
	Subject string
	// Severity is the issue's: critical repeats hourly, warning daily.
	Severity Severity
	// Meaning is what the condition means, in the runbook's words.
	Meaning string
	// Action is the first thing to do.
	Action string
	// Memory marks a fault that stops the database taking writes: its
	// alert is held in memory and sent directly while the write fails,
	// and recorded once storage returns.
	Memory bool
}

// Conditions is the condition table, critical first, in the order
// docs/operations.md "Alerts" lists them (alerts_test keeps the two equal).
var Conditions = []Condition{
	{KindClockStep, SubjectPlatform, Critical,
		"The server's wall clock stepped against the monotonic clock; the reaper holds every deadline it cannot trust.",
		"Check NTP (`timedatectl`) and `chalupa admin reaper status`; the hold lifts when the clock agrees again.", false},
	{KindClockSuspect, SubjectPlatform, Critical,
		"The clock guard suspects the wall clock (it disagrees with the stored mark or the agents); no deployment is reaped.",
		"Compare the server clock with a trusted source and fix NTP; read `chalupa admin status` (clock offset).", false},
	{KindReplicaFailing, SubjectPlatform, Critical,
		"Replication to the object store has failed past its lag limit; a disk loss now loses writes.",
		"Read `chalupa admin status` and the replication log lines; check the bucket's credentials and reachability.", false},
	{KindReplicaRefused, SubjectPlatform, Critical,
		"The replica is marked with another database's identity; replication refuses to overwrite it.",
		"Point CHALUPA_REPLICA_URL at this database's own path, or re-seed it as \"Replication\" says.", false},
	{KindStorageUnavailable, SubjectPlatform, Critical,
		"The database refuses writes; heartbeats and the reaper's records are not kept.",
		"Check the data directory's file system and permissions; restart chalupa once it takes writes.", true},
	{KindDiskLow, SubjectPlatform, Critical,
		"The data directory's disk is nearly full; chalupa sheds telemetry and logs to keep the reaper's writes.",
		"Free space on the data directory's file system or grow it.", true},
	{KindReaperTokenRefused, SubjectPlatform, Critical,
		"DigitalOcean refused the reaper's write token (401, or 403 for a missing scope); nothing due is destroyed.",
		"Replace the reaper's DigitalOcean write token with one that has droplet write scope and restart (\"Reaper\").", false},
	{KindReaperOverdue, SubjectPlatform, Critical,
		"Active deployments are more than an hour past their deadline and not destroyed; they are billing.",
		"Read the reaper's events and `chalupa admin reaper status`; destroy by hand if the reaper cannot.", false},
	{KindDOTokenRefused, SubjectPlatform, Critical,
		"A DigitalOcean token chalupa holds is refused by a read-only check; the variable is named, never the value.",
		"Replace the named variable's token and restart; the condition lifts when the token works again.", false},
	{KindMassDue, SubjectEnvironment, Warning,
		"Many deployments fell due at once; the reaper paces its destroys and waits for contact.",
		"Check that the agents can reach chalupa (a network fault looks like a fleet gone idle).", false},
	{KindReaperRateLimited, SubjectPlatform, Warning,
		"DigitalOcean rate-limits the write token; the reaper holds its destroys until the provider's retry time.",
		"Look for another user of the same token; the hold lifts by itself.", false},
	{KindAgentUpgradeFailed, SubjectBox, Warning,
		"An agent upgrade failed and the previous agent did not report again.",
		"Read the box's upgrade event (`chalupa admin box show`); upgrade again with `chalupa admin box upgrade-agent`.", false},
	{KindJobFailed, SubjectBox, Warning,
		"A converge job failed.",
		"Read the job's steps with `chalupa admin job show`; fix the cause and run it again.", false},
	{KindWorkerOffline, SubjectPlatform, Warning,
		"The managed worker that runs converge jobs is offline; jobs wait.",
		"Check the worker's process and its logs; restart chalupa if it stays offline.", false},
	{KindQuotaExceeded, SubjectEnvironment, Warning,
		"Ingest refused requests for a quota; the environment's agents lose data past it.",
		"Read the quota events; raise the quota or find the agent that floods.", false},
	{KindBudget, SubjectPlatform, Warning,
		"The month's estimated cost plus the projected cost passes CHALUPA_BUDGET_USD_MONTH's 80 % (critical past 100 %).",
		"Read the named droplets (held, reaper off, or no agent) and end what is not needed.", false},
	{KindAlertDeliveryFailing, SubjectPlatform, Warning,
		"An alert message could not be delivered to a sink within 24 hours and expired.",
		"Read the log lines `alert delivery failed` (they name the sink and the kind of error) and fix that sink's settings.", false},
}

// Lookup returns the condition table's row for kind.
func Lookup(kind string) (Condition, bool) {
	for _, c := range Conditions {
		if c.Kind == kind {
			return c, true
		}
	}
	return Condition{}, false
}

// ConditionsHeader is the first line of the condition table in
// docs/operations.md, "Alerts".
const ConditionsHeader = "| kind | subject | severity | what it means | first thing to do |\n"

// ConditionsTable renders Conditions as docs/operations.md's Markdown
// table, header first, one row per condition.
func ConditionsTable() string {
	var b strings.Builder
	b.WriteString(ConditionsHeader)
	b.WriteString("|---|---|---|---|---|\n")
	for _, c := range Conditions {
		meaning := c.Meaning
		if c.Memory {
			meaning += " Held in memory and sent directly while the database refuses writes."
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s |\n", c.Kind, c.Subject, c.Severity, esc(meaning), esc(c.Action))
	}
	return b.String()
}

// esc keeps a cell's pipes from splitting it.
func esc(s string) string { return strings.ReplaceAll(s, "|", `\|`) }
