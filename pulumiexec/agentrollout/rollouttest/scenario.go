package rollouttest

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chalupa-run/chalupa/adminapi"
)

// rolloutWait bounds the wait for one rollout of the scenario: the report
// bound twice (the upgrade, the restore) and the SSH steps, with room for
// a loaded machine.
const rolloutWait = 3 * time.Minute

// Rollout starts a rollout of the bed's environment with batch and waits
// for it to end, failing the test on an error or after rolloutWait.
// watch, when set, is called with each state read while it runs.
func Rollout(t *testing.T, bed Bed, batch int, watch func(adminapi.AgentRollout)) adminapi.AgentRollout {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), rolloutWait)
	defer cancel()
	r, err := bed.Admin().StartAgentRollout(ctx, adminapi.StartAgentRolloutRequest{Environment: bed.Env(), Batch: batch})
	if err != nil {
		t.Fatalf("start rollout: %v", err)
	}
	for r.Status == "running" {
		if watch != nil {
			watch(r)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("rollout %s still running after %s: %+v", r.ID, rolloutWait, r.Summary)
		case <-time.After(100 * time.Millisecond):
		}
		if r, err = bed.Admin().GetAgentRollout(ctx, r.ID); err != nil {
			t.Fatalf("get rollout: %v", err)
		}
	}
	return r
}

// BadReleases is the scenario of docs/operations.md, "Agent install",
// under Upgrade: two bad releases rolled out to the bed's boxes (at least
// three) — one whose `version` prints the target version and whose `run`
// exits 1, one that runs and never heartbeats. Each time the first box
// fails with the failure named (crashed, never reported), shows
// `upgrading` and is held (listed by `admin reaper status`) while it is
// tried, is restored and reports on the old version; the others are not
// tried and keep the old version; no box is left upgrading or held, and
// no deployment ended.
func BadReleases(t *testing.T, bed Bed) {
	boxes := bed.Boxes()
	if len(boxes) < 3 {
		t.Fatalf("the scenario needs three boxes, the bed has %d", len(boxes))
	}
	for _, tc := range []struct {
		name    string
		version string
		kind    Kind
		reason  string
	}{
		{"run exits 1", "v1.1.0", ExitsOnRun, "crashed"},
		{"never heartbeats", "v1.2.0", NeverReports, "never reported"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bed.UseRelease(t, tc.version, tc.kind)
			var sawUpgrading, sawHold bool
			r := Rollout(t, bed, 2, func(adminapi.AgentRollout) {
				ctx := context.Background()
				if b, err := bed.Admin().GetBox(ctx, boxes[0]); err == nil && b.AgentUpgrade != nil && b.AgentUpgrade.State == "upgrading" {
					sawUpgrading = true
				}
				if st, err := bed.Admin().GetReaperStatus(ctx); err == nil {
					for _, h := range st.Held {
						sawHold = sawHold || (h.Reason == "upgrading" && strings.Contains(h.Evidence, tc.version))
					}
				}
			})
			s := r.Summary
			if r.Status != "failed" || len(s.Failed) != 1 || len(s.Upgraded) != 0 || len(s.Running) != 0 {
				t.Fatalf("rollout %s %q: %+v, want the first box failed and nothing upgraded", r.Status, r.Error, s)
			}
			f := s.Failed[0]
			t.Logf("%s: %s", f.Box, f.Detail)
			if f.Box != boxes[0] || f.Reason != tc.reason || f.Restore != "reported" || !strings.Contains(f.Detail, "chalupa-agent "+OldVersion) {
				t.Errorf("failed %+v, want %s %s and its previous agent restored and reporting", f, boxes[0], tc.reason)
			}
			// The event says which failure it was and that the restore
			// reported.
			ev, err := bed.Admin().ListEvents(context.Background(), adminapi.ListEventsRequest{Environment: bed.Env(), Kind: "agent-upgrade-failed"})
			if err != nil {
				t.Fatal(err)
			}
			found := false
			for _, e := range ev.Events {
				found = found || (strings.Contains(e.Message, tc.version) && strings.Contains(e.Message, tc.reason) && strings.Contains(e.Message, "which reported"))
			}
			if !found {
				t.Errorf("no agent-upgrade-failed event names %s, %q and the restore reporting: %+v", tc.version, tc.reason, ev.Events)
			}
			if !slices.Equal(s.NotTried, boxes[1:]) {
				t.Errorf("not tried %v, want %v", s.NotTried, boxes[1:])
			}
			if !sawUpgrading || !sawHold {
				t.Errorf("while it ran: box upgrading %v, upgrading hold listed %v; want both", sawUpgrading, sawHold)
			}
			afterwards(t, bed, boxes)
		})
	}
}

// GoodThenNoop rolls out a good release (every box upgraded, one first
// then batches) and then the same release again: a no-op that says so,
// every box skipped as already running it.
func GoodThenNoop(t *testing.T, bed Bed) {
	boxes := bed.Boxes()
	bed.UseRelease(t, "v1.3.0", Good)
	r := Rollout(t, bed, 2, nil)
	if r.Status != "succeeded" || len(r.Summary.Upgraded) != len(boxes) || len(r.Summary.Failed)+len(r.Summary.Skipped)+len(r.Summary.NotTried) != 0 {
		t.Fatalf("rollout %s %q: %+v, want every box upgraded", r.Status, r.Error, r.Summary)
	}
	if r.Summary.Upgraded[0].Box != boxes[0] {
		t.Errorf("first upgraded %s, want %s (one box first)", r.Summary.Upgraded[0].Box, boxes[0])
	}
	for _, b := range boxes {
		if got := bed.Installed(t, b); !strings.HasPrefix(got, "chalupa-agent v1.3.0") {
			t.Errorf("%s runs %q, want v1.3.0", b, got)
		}
	}
	again := Rollout(t, bed, 2, nil)
	if again.Status != "succeeded" || len(again.Summary.Skipped) != len(boxes) || len(again.Summary.Upgraded) != 0 {
		t.Fatalf("the same release again: %s %+v, want every box skipped", again.Status, again.Summary)
	}
	for _, o := range again.Summary.Skipped {
		if o.Reason != "already runs v1.3.0" {
			t.Errorf("%s skipped for %q, want the installed version named", o.Box, o.Reason)
		}
	}
	// The single-box call says the same.
	u, err := bed.Admin().UpgradeBoxAgent(context.Background(), boxes[0])
	if err != nil || u.Outcome != "skipped" || !strings.Contains(u.Detail, "already runs v1.3.0") {
		t.Errorf("box upgrade-agent of the installed version: %+v %v", u, err)
	}
	// Another rollout while none runs is accepted; two at once are not.
	var ae *adminapi.APIError
	if _, err := bed.Admin().StartAgentRollout(context.Background(), adminapi.StartAgentRolloutRequest{Environment: bed.Env(), Batch: 0}); err != nil {
		t.Fatal(err)
	}
	if _, err := bed.Admin().StartAgentRollout(context.Background(), adminapi.StartAgentRolloutRequest{Environment: bed.Env()}); !errors.As(err, &ae) || ae.Code != "rollout_in_progress" {
		t.Errorf("a second rollout at once: %v, want 409 rollout_in_progress", err)
	}
	afterwardsWait(t, bed)
}

// afterwards checks the boxes after a failed rollout: each runs
// OldVersion, none is left upgrading, and no upgrading hold remains.
func afterwards(t *testing.T, bed Bed, boxes []string) {
	t.Helper()
	ctx := context.Background()
	for _, b := range boxes {
		if got := bed.Installed(t, b); !strings.HasPrefix(got, "chalupa-agent "+OldVersion) {
			t.Errorf("%s runs %q, want %s", b, got, OldVersion)
		}
		box, err := bed.Admin().GetBox(ctx, b)
		if err != nil || box.AgentUpgrade != nil {
			t.Errorf("%s: agent upgrade state %+v (%v), want none", b, box.AgentUpgrade, err)
		}
	}
	// Nothing was reaped: every deployment of the environment is active
	// (its agent's heartbeats moved its deadline), one per box.
	fleet, err := bed.Admin().ListFleet(ctx)
	if err != nil {
		t.Fatal(err)
	}
	active := 0
	for _, e := range fleet.Environments {
		for _, d := range e.Deployments {
			if e.Slug != bed.Env() {
				continue
			}
			if d.Status != "active" {
				t.Errorf("deployment %s is %s", d.ID, d.Status)
			}
			active++
		}
	}
	if active != len(boxes) {
		t.Errorf("%d active deployments, want one per box (%d)", active, len(boxes))
	}
	st, err := bed.Admin().GetReaperStatus(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range st.Held {
		if h.Reason == "upgrading" {
			t.Errorf("an upgrading hold outlived the rollout: %+v", h)
		}
	}
}

// afterwardsWait waits for the rollout started last to end.
func afterwardsWait(t *testing.T, bed Bed) {
	t.Helper()
	deadline := time.Now().Add(rolloutWait)
	for time.Now().Before(deadline) {
		l, err := bed.Admin().ListJobs(context.Background(), adminapi.ListJobsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if len(l.Rollouts) == 0 || l.Rollouts[0].Status != "running" {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatal("the last rollout did not end")
}
