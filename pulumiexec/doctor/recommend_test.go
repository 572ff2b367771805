package doctor

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/storage"
)

// TestRecommend: each row of the symptom table (docs/operations.md, "Job
// doctor") gives its action and commands, and an earlier row wins; with
// the provider or a stack unavailable, no row that needs its answer is
// judged.
func TestRecommend(t *testing.T) {
	res := func(ids ...string) []adminapi.ProviderResource {
		out := []adminapi.ProviderResource{}
		for _, id := range ids {
			out = append(out, adminapi.ProviderResource{ID: id})
		}
		return out
	}
	// healthy is a succeeded job whose box, stacks and provider agree.
	healthy := func() adminapi.JobDiagnosis {
		return adminapi.JobDiagnosis{
			Job:      adminapi.Job{ID: "J1", Box: "box-1", Status: storage.JobSucceeded},
			Recorded: adminapi.ProviderIDs{DropletID: "7", VolumeID: "v1", FirewallID: "f1"},
			Stacks: []adminapi.StackDiagnosis{
				{Stack: "box-1-data", Exists: true, State: adminapi.ProviderIDs{VolumeID: "v1"}},
				{Stack: "box-1-compute", Exists: true, State: adminapi.ProviderIDs{DropletID: "7", FirewallID: "f1"}},
			},
			Provider: adminapi.ProviderInventory{Tag: "chalupa:box:box-1", Droplets: res("7"), Volumes: res("v1"), Firewalls: res("f1")},
		}
	}
	deadLock := []adminapi.StackLockInfo{{PID: 99, HolderAlive: false}}
	for _, tc := range []struct {
		name    string
		mutate  func(d *adminapi.JobDiagnosis)
		action  string
		command string // a command the recommendation must include
	}{
		{"agreeing succeeded job", func(*adminapi.JobDiagnosis) {}, adminapi.DoctorNothing, ""},
		{"running here", func(d *adminapi.JobDiagnosis) {
			d.Job.Status, d.Lease.HolderIsThisDaemon, d.Lease.ExpiresAt = storage.JobRunning, true, time.Now()
			d.Stacks[1].Locks = deadLock // a live run wins over anything the stacks say
		}, adminapi.DoctorNothing, "chalupa admin job show J1"},
		{"two droplets", func(d *adminapi.JobDiagnosis) {
			d.Job.Status = storage.JobRunning
			d.Provider.Droplets = res("7", "8")
		}, adminapi.DoctorReconcileHost, "doctl compute droplet delete 8"},
		{"dead running, lane paused", func(d *adminapi.JobDiagnosis) {
			d.Job.Status, d.Lease.LanePaused = storage.JobRunning, true
			d.Stacks[1].Locks = deadLock
			d.Stacks[1].Pending = []adminapi.PendingOperation{{Kind: "creating"}}
		}, adminapi.DoctorResumeLane, "chalupa admin loops resume jobs"},
		{"dead running, lane running", func(d *adminapi.JobDiagnosis) { d.Job.Status = storage.JobRunning }, adminapi.DoctorNothing, "chalupa admin job show J1"},
		{"queued, lane paused", func(d *adminapi.JobDiagnosis) { d.Job.Status, d.Lease.LanePaused = storage.JobQueued, true }, adminapi.DoctorResumeLane, "chalupa admin loops resume jobs"},
		{"unrecorded droplet", func(d *adminapi.JobDiagnosis) {
			d.Recorded.DropletID, d.Stacks[1].State.DropletID = "", ""
		}, adminapi.DoctorReconcileHost, "doctl compute droplet delete 7"},
		{"live lock", func(d *adminapi.JobDiagnosis) {
			d.Stacks[0].Locks = []adminapi.StackLockInfo{{PID: 5, HolderAlive: true}}
		}, adminapi.DoctorNothing, ""},
		{"dead lock", func(d *adminapi.JobDiagnosis) { d.Stacks[1].Locks = deadLock }, adminapi.DoctorCancelLock, "chalupa admin state cancel box-1"},
		{"pending", func(d *adminapi.JobDiagnosis) {
			d.Stacks[1].Pending = []adminapi.PendingOperation{{Kind: "creating"}}
		}, adminapi.DoctorWipeThenUp, "chalupa admin state wipe box-1 --confirm 'wipe box-1'"},
		{"droplet gone", func(d *adminapi.JobDiagnosis) { d.Provider.Droplets = res() }, adminapi.DoctorRefreshThenUp, "chalupa admin converge box-1 refresh --wait"},
		{"recorded droplet missing from the state", func(d *adminapi.JobDiagnosis) { d.Stacks[1].State.DropletID = "" }, adminapi.DoctorWipeThenUp, "chalupa admin converge box-1 up --wait"},
		{"failed, agreeing", func(d *adminapi.JobDiagnosis) { d.Job.Status = storage.JobFailed }, adminapi.DoctorRefreshThenUp, "chalupa admin converge box-1 up --wait"},
		{"provider unavailable, failed", func(d *adminapi.JobDiagnosis) {
			d.Job.Status = storage.JobFailed
			d.Provider = adminapi.ProviderInventory{Tag: d.Provider.Tag, Unavailable: true, ErrorKind: "token_refused",
				Droplets: res(), Volumes: res(), Firewalls: res()}
			d.Stacks[1].Pending = []adminapi.PendingOperation{{Kind: "creating"}} // never a wipe on an unread provider
		}, adminapi.DoctorCheckProvider, "chalupa admin job doctor J1"},
		{"provider unavailable, queued in a paused lane", func(d *adminapi.JobDiagnosis) {
			d.Job.Status, d.Lease.LanePaused = storage.JobQueued, true
			d.Provider = adminapi.ProviderInventory{Tag: d.Provider.Tag, Unavailable: true, ErrorKind: "provider_error"}
		}, adminapi.DoctorResumeLane, "chalupa admin loops resume jobs"},
		{"stack unreadable, failed", func(d *adminapi.JobDiagnosis) {
			d.Job.Status = storage.JobFailed
			d.Stacks[1] = adminapi.StackDiagnosis{Stack: "box-1-compute", Unavailable: true, ErrorKind: "state_corrupt"}
			d.Stacks[0].Pending = []adminapi.PendingOperation{{Kind: "creating"}} // never a wipe on an unread stack
		}, adminapi.DoctorCheckState, "chalupa admin job doctor J1"},
		{"stack unreadable, two droplets", func(d *adminapi.JobDiagnosis) {
			// Which droplet the unread stack records is unknown: no delete.
			d.Stacks[1] = adminapi.StackDiagnosis{Stack: "box-1-compute", Unavailable: true, ErrorKind: "backend_unreadable"}
			d.Provider.Droplets = res("7", "8")
		}, adminapi.DoctorCheckState, "chalupa admin job doctor J1"},
		{"stack unreadable, queued in a paused lane", func(d *adminapi.JobDiagnosis) {
			d.Job.Status, d.Lease.LanePaused = storage.JobQueued, true
			d.Stacks[0] = adminapi.StackDiagnosis{Stack: "box-1-data", Unavailable: true, ErrorKind: "pulumi_failed"}
		}, adminapi.DoctorResumeLane, "chalupa admin loops resume jobs"},
		{"provider and stack unreadable", func(d *adminapi.JobDiagnosis) {
			d.Stacks[0] = adminapi.StackDiagnosis{Stack: "box-1-data", Unavailable: true, ErrorKind: "state_corrupt"}
			d.Provider = adminapi.ProviderInventory{Tag: d.Provider.Tag, Unavailable: true, ErrorKind: "rate_limited"}
		}, adminapi.DoctorCheckProvider, "chalupa admin job doctor J1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := healthy()
			tc.mutate(&d)
			r := Recommend(d)
			if r.Action != tc.action {
				t.Fatalf("action %q (%s: %s), want %q", r.Action, r.Symptom, r.Reason, tc.action)
			}
			if tc.command != "" && !slices.Contains(r.Commands, tc.command) {
				t.Fatalf("commands %q, want %q among them", r.Commands, tc.command)
			}
			if r.Symptom == "" || r.Reason == "" || r.Commands == nil || strings.Contains(r.Reason, "%!") {
				t.Fatalf("incomplete recommendation %+v", r)
			}
		})
	}
}
