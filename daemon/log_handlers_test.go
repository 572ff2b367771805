package daemon_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/daemon/daemontest"
	"github.com/chalupa-run/chalupa/ingest/logs"
)

func httpGet(t *testing.T, u string) (int, []byte) {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// TestAdminLogs: listing, download grants that expire, erase with its
// phrase and receipt, and retention — erase and retention remove objects
// and rows.
func TestAdminLogs(t *testing.T) {
	h := daemontest.NewIngestLogs(t)
	ctx := context.Background()
	c := h.Admin
	one, two := []byte("first chunk\n"), []byte("second chunk\n")
	if r := h.OpenSession(h.Deployment, "m1", "chalupa-agent.service"); r.Status != http.StatusAccepted {
		t.Fatalf("open: %s", r)
	}
	h.ShipChunk(t, "m1", 0, one)
	h.ShipChunk(t, "m1", 1, two)
	if r, _ := h.PlanChunk("m1", 2, []byte("planned only")); r.Status != http.StatusAccepted {
		t.Fatalf("plan: %s", r)
	}

	t.Run("list", func(t *testing.T) {
		l, err := c.ListLogs(ctx, adminapi.ListLogsRequest{EnvironmentSlug: h.Slug, DeploymentID: h.Deployment, Service: "chalupa-agent.service"})
		if err != nil {
			t.Fatal(err)
		}
		if len(l.Sessions) != 1 || len(l.Sessions[0].Chunks) != 3 || l.ChunksPlanned != 3 || l.MaxChunks != 256 {
			t.Fatalf("listing: %+v", l)
		}
		if ch := l.Sessions[0].Chunks; ch[0].State != "committed" || ch[2].State != "planned" || ch[1].SizeBytes != int64(len(two)) {
			t.Fatalf("chunks: %+v", ch)
		}
		other, err := c.ListLogs(ctx, adminapi.ListLogsRequest{EnvironmentSlug: h.Slug, DeploymentID: h.Deployment, Service: "cloud-init.service"})
		if err != nil || len(other.Sessions) != 0 {
			t.Fatalf("narrowed by service: %+v %v", other, err)
		}
		_, err = c.ListLogs(ctx, adminapi.ListLogsRequest{EnvironmentSlug: h.Slug, DeploymentID: "dep-none"})
		var ae *adminapi.APIError
		if !errors.As(err, &ae) || ae.Status != http.StatusNotFound {
			t.Fatalf("unknown deployment: %v", err)
		}
	})
	t.Run("chunk metadata", func(t *testing.T) {
		for _, tc := range []struct {
			seq, state string
			size       int
		}{{"1", "committed", len(two)}, {"2", "planned", len("planned only")}} {
			ch, err := c.GetLogChunk(ctx, adminapi.LogChunkRequest{EnvironmentSlug: h.Slug, DeploymentID: h.Deployment, Session: "m1", Seq: tc.seq})
			if err != nil {
				t.Fatal(err)
			}
			if ch.State != tc.state || ch.SizeBytes != int64(tc.size) || ch.Service != "chalupa-agent.service" || ch.SessionFinished ||
				(ch.CommittedAt != nil) != (tc.state == "committed") || len(ch.SHA256) != 64 {
				t.Fatalf("chunk %s: %+v", tc.seq, ch)
			}
		}
		_, err := c.GetLogChunk(ctx, adminapi.LogChunkRequest{EnvironmentSlug: h.Slug, DeploymentID: h.Deployment, Session: "m1", Seq: "3"})
		var ae *adminapi.APIError
		if !errors.As(err, &ae) || ae.Code != "log_chunk_not_found" {
			t.Fatalf("metadata of a chunk never planned: %v", err)
		}
	})
	t.Run("download grant", func(t *testing.T) {
		d, err := c.GetLogDownload(ctx, adminapi.LogDownloadRequest{EnvironmentSlug: h.Slug, DeploymentID: h.Deployment, Session: "m1", Seq: "1"})
		if err != nil {
			t.Fatal(err)
		}
		if d.ExpiresAt.Sub(h.Clock.Now()) > logs.MaxGrantTTL {
			t.Fatalf("grant lives past %v: %v", logs.MaxGrantTTL, d.ExpiresAt)
		}
		if code, b := httpGet(t, d.URL); code != http.StatusOK || !bytes.Equal(b, two) {
			t.Fatalf("GET with the grant: %d %q", code, b)
		}
		// A grant signed six minutes ago has expired: the store refuses it.
		h.Clock.Advance(-6 * time.Minute)
		old, err := c.GetLogDownload(ctx, adminapi.LogDownloadRequest{EnvironmentSlug: h.Slug, DeploymentID: h.Deployment, Session: "m1", Seq: "1"})
		h.Clock.Advance(6 * time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if code, _ := httpGet(t, old.URL); code != http.StatusForbidden {
			t.Fatalf("GET with an expired grant: %d, want 403", code)
		}
		_, err = c.GetLogDownload(ctx, adminapi.LogDownloadRequest{EnvironmentSlug: h.Slug, DeploymentID: h.Deployment, Session: "m1", Seq: "2"})
		var ae *adminapi.APIError
		if !errors.As(err, &ae) || ae.Code != "log_chunk_not_found" {
			t.Fatalf("grant for a planned chunk: %v", err)
		}
	})
	t.Run("retention", func(t *testing.T) {
		if r := h.OpenSession(h.Deployment, "old", "cloud-init.service"); r.Status != http.StatusAccepted {
			t.Fatalf("open: %s", r)
		}
		h.ShipChunk(t, "old", 0, one)
		h.ShipChunk(t, "old", 1, two)
		oldKey := h.Store.Location().Key(fmt.Sprintf("e1/%s/old/%010d.chunk", h.Deployment, 0))
		h.Exec(`UPDATE log_chunks SET planned_at = planned_at - ? WHERE session_row = (SELECT id FROM log_sessions WHERE session_id = 'old')`,
			(logs.DefaultRetention + time.Hour).Milliseconds())
		h.Exec(`UPDATE log_sessions SET finished_at = 1 WHERE session_id = 'old'`)
		ret := &logs.Retention{DB: h.App.DB, Store: h.Store, Clock: h.Clock, Cap: 1}
		res, err := ret.Tick(ctx)
		if err != nil || res.Chunks != 1 || !res.Capped || res.Sessions != 0 {
			t.Fatalf("first tick (cap 1): %+v %v", res, err)
		}
		res, err = ret.Tick(ctx)
		if err != nil || res.Chunks != 1 || res.Capped || res.Sessions != 1 {
			t.Fatalf("second tick: %+v %v", res, err)
		}
		if _, err := h.Store.Head(ctx, oldKey); !errors.Is(err, logs.ErrObjectMissing) {
			t.Fatalf("old object after retention: %v", err)
		}
		if n := h.Count(`SELECT count(*) FROM log_chunks WHERE session_row NOT IN (SELECT id FROM log_sessions)`); n != 0 {
			t.Fatalf("orphan chunks: %d", n)
		}
		if n := h.Count(`SELECT count(*) FROM log_chunks`); n != 3 {
			t.Fatalf("chunks of m1 left: %d, want 3", n)
		}
		if res, err := ret.Tick(ctx); err != nil || res != (logs.RetentionResult{}) {
			t.Fatalf("idle tick: %+v %v", res, err)
		}
	})
	t.Run("erase", func(t *testing.T) {
		before := h.LogRows()
		_, err := c.EraseLogs(ctx, adminapi.EraseLogsRequest{EnvironmentSlug: h.Slug, Confirmation: "erase logs other"})
		var ae *adminapi.APIError
		if !errors.As(err, &ae) || ae.Code != "confirmation_mismatch" || h.LogRows() != before {
			t.Fatalf("wrong phrase: %v", err)
		}
		r, err := c.EraseLogs(ctx, adminapi.EraseLogsRequest{EnvironmentSlug: h.Slug, Confirmation: adminapi.EraseLogsPhrase(h.Slug)})
		if err != nil {
			t.Fatal(err)
		}
		if r.ChunksRemoved != 3 || r.SessionsRemoved != 1 || r.RemainingChunks != 0 || r.RemainingSessions != 0 || r.Resumed || r.ErasureID == "" {
			t.Fatalf("receipt: %+v", r)
		}
		if n := h.Count(`SELECT count(*) FROM log_chunks`) + h.Count(`SELECT count(*) FROM log_sessions`) +
			h.Count(`SELECT log_chunks + log_bytes FROM deployments WHERE id = ?`, h.Deployment); n != 0 {
			t.Fatalf("rows or counters left: %d", n)
		}
		for seq := range 3 {
			if _, err := h.Store.Head(ctx, h.Store.Location().Key(fmt.Sprintf("e1/%s/m1/%010d.chunk", h.Deployment, seq))); !errors.Is(err, logs.ErrObjectMissing) {
				t.Fatalf("object %d after erase: %v", seq, err)
			}
		}
		if n := h.Count(`SELECT count(*) FROM lifecycle_events WHERE kind = 'logs-erased'`); n != 1 {
			t.Fatalf("logs-erased events after one erase: %d, want 1", n)
		}
		var id, msg string
		if err := h.SQL().QueryRow(`SELECT id, message FROM lifecycle_events WHERE kind = 'logs-erased'`).Scan(&id, &msg); err != nil ||
			id != r.ErasureID || msg != "logs erased: 1 sessions, 3 chunks (objects and rows)" {
			t.Fatalf("logs-erased event %q %q (%v), want id %s and the counts", id, msg, err, r.ErasureID)
		}
		again, err := c.EraseLogs(ctx, adminapi.EraseLogsRequest{EnvironmentSlug: h.Slug, Confirmation: adminapi.EraseLogsPhrase(h.Slug)})
		if err != nil || again.ChunksRemoved != 0 || again.SessionsRemoved != 0 {
			t.Fatalf("second erase: %+v %v", again, err)
		}
		if n := h.Count(`SELECT count(*) FROM lifecycle_events WHERE kind = 'logs-erased' AND id = ?`, again.ErasureID); n != 1 {
			t.Fatalf("the second erasure's event: %d rows, want 1", n)
		}
	})
}

// TestAdminSetLogServices: adminSetLogServices replaces the allowlist the
// broker checks at session open, --reset restores the default, and every
// refusal leaves the stored list as it was.
func TestAdminSetLogServices(t *testing.T) {
	h := daemontest.NewIngestLogs(t)
	ctx := context.Background()
	c := h.Admin
	stored := func() string {
		var v sql.NullString
		if err := h.SQL().QueryRow(`SELECT log_services FROM environments WHERE slug = ?`, h.Slug).Scan(&v); err != nil {
			t.Fatal(err)
		}
		if !v.Valid {
			return "<default>"
		}
		return v.String
	}

	t.Run("set", func(t *testing.T) {
		got, err := c.SetLogServices(ctx, adminapi.SetLogServicesRequest{EnvironmentSlug: h.Slug, Services: []string{"nginx.service", "app.log"}})
		if err != nil {
			t.Fatal(err)
		}
		if got.Default || strings.Join(got.Services, ",") != "nginx.service,app.log" || stored() != "nginx.service,app.log" {
			t.Fatalf("answer %+v, stored %q", got, stored())
		}
		if r := h.OpenSession(h.Deployment, "svc-1", "app.log"); r.Status != http.StatusAccepted {
			t.Fatalf("a service on the new list: %s", r)
		}
		before := h.LogRows()
		h.Refused(t, "a default service off the new list", h.OpenSession(h.Deployment, "svc-2", "chalupa-agent.service"), http.StatusUnprocessableEntity, "service_not_allowed", before)
	})
	t.Run("refusals write nothing", func(t *testing.T) {
		many := make([]string, adminapi.MaxLogServices+1)
		for i := range many {
			many[i] = fmt.Sprintf("s%d.service", i)
		}
		for _, tc := range []struct {
			name   string
			req    adminapi.SetLogServicesRequest
			status int
			code   string
		}{
			{"none", adminapi.SetLogServicesRequest{EnvironmentSlug: h.Slug}, http.StatusBadRequest, "invalid_services"},
			{"services with reset", adminapi.SetLogServicesRequest{EnvironmentSlug: h.Slug, Services: []string{"a"}, Reset: true}, http.StatusBadRequest, "invalid_services"},
			{"bad name", adminapi.SetLogServicesRequest{EnvironmentSlug: h.Slug, Services: []string{"a,b"}}, http.StatusBadRequest, "invalid_services"},
			{"twice", adminapi.SetLogServicesRequest{EnvironmentSlug: h.Slug, Services: []string{"a", "a"}}, http.StatusBadRequest, "invalid_services"},
			{"too many", adminapi.SetLogServicesRequest{EnvironmentSlug: h.Slug, Services: many}, http.StatusBadRequest, "invalid_services"},
			{"unknown environment", adminapi.SetLogServicesRequest{EnvironmentSlug: "no-such-env", Services: []string{"a"}}, http.StatusNotFound, "environment_not_found"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				before := stored()
				_, err := c.SetLogServices(ctx, tc.req)
				var ae *adminapi.APIError
				if !errors.As(err, &ae) || ae.Status != tc.status || ae.Code != tc.code {
					t.Fatalf("got %v, want %d %s", err, tc.status, tc.code)
				}
				if after := stored(); after != before {
					t.Fatalf("a refusal changed the list: %q -> %q", before, after)
				}
			})
		}
	})
	t.Run("reset", func(t *testing.T) {
		got, err := c.SetLogServices(ctx, adminapi.SetLogServicesRequest{EnvironmentSlug: h.Slug, Reset: true})
		if err != nil {
			t.Fatal(err)
		}
		if !got.Default || strings.Join(got.Services, ",") != strings.Join(logs.DefaultServices, ",") || stored() != "<default>" {
			t.Fatalf("answer %+v, stored %q", got, stored())
		}
		if r := h.OpenSession(h.Deployment, "svc-3", "chalupa-agent.service"); r.Status != http.StatusAccepted {
			t.Fatalf("a default service after reset: %s", r)
		}
	})
}
