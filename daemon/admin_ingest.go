package daemon

import (
	"errors"
	"net/http"

	"github.com/chalupa-run/chalupa/daemon/adminapi"
	"github.com/chalupa-run/chalupa/ingest"
	"github.com/chalupa-run/chalupa/storage"
)

// fleetEndedLimit is how many ended deployments per environment the fleet
// view shows (active ones are always all shown).
const fleetEndedLimit = 20

// handleIngestKeys serves POST /api/admin/ingest-keys: issue, rotate or
// revoke by the body's action (seed 002, "Ingest key lifecycle").
func (s *Server) handleIngestKeys(w http.ResponseWriter, r *http.Request) {
	var req adminapi.IngestKeyRequest
	if !decodeAdmin(w, r, &req) {
		return
	}
	ctx := r.Context()
	switch req.Action {
	case "", "issue", "rotate":
		if req.KeyID != "" {
			writeError(w, http.StatusBadRequest, "bad_body", "keyId is only used with action revoke")
			return
		}
		if !slugPattern.MatchString(req.EnvironmentSlug) {
			writeError(w, http.StatusBadRequest, "invalid_slug", "environmentSlug must match ^[a-z0-9][a-z0-9-]{1,62}$")
			return
		}
		issue := s.keys.Issue
		if req.Action == "rotate" {
			issue = s.keys.Rotate
		}
		k, err := issue(ctx, req.EnvironmentSlug)
		if errors.Is(err, ingest.ErrEnvironmentNotFound) {
			writeError(w, http.StatusNotFound, "environment_not_found", "no environment with this slug")
			return
		}
		if err != nil {
			s.internal(w, r, "issue ingest key", err)
			return
		}
		writeJSON(w, http.StatusCreated, adminapi.IssuedKey(k))
	case "revoke":
		if req.EnvironmentSlug != "" || req.KeyID == "" {
			writeError(w, http.StatusBadRequest, "bad_body", `revoke takes {"action":"revoke","keyId":…} only`)
			return
		}
		k, err := s.keys.Revoke(ctx, req.KeyID)
		if errors.Is(err, ingest.ErrKeyNotFound) {
			writeError(w, http.StatusNotFound, "key_not_found", "no ingest key with this id")
			return
		}
		if err != nil {
			s.internal(w, r, "revoke ingest key", err)
			return
		}
		writeJSON(w, http.StatusOK, adminapi.RevokedKey(k))
	default:
		writeError(w, http.StatusBadRequest, "bad_action", `action must be "rotate" or "revoke" (omit it to issue)`)
	}
}

// handleFleet serves GET /api/admin/fleet.
func (s *Server) handleFleet(w http.ResponseWriter, r *http.Request) {
	envs, err := storage.Fleet(r.Context(), s.db.Read, fleetEndedLimit)
	if err != nil {
		s.internal(w, r, "read fleet", err)
		return
	}
	out := adminapi.Fleet{Environments: make([]adminapi.FleetEnvironment, 0, len(envs))}
	for _, e := range envs {
		fe := adminapi.FleetEnvironment{Slug: e.Slug, Name: e.Name, Status: e.Status, Keys: e.KeyCounts,
			Deployments: make([]adminapi.FleetDeployment, 0, len(e.Deployments))}
		for _, d := range e.Deployments {
			fe.Deployments = append(fe.Deployments, adminapi.FleetDeployment{
				ID: d.ID, DropletID: d.DropletID, Region: d.Region, Size: d.Size, Status: d.Status,
				LaunchedAt: d.LaunchedAt, EndedAt: d.EndedAt, LastHeartbeatAt: d.LastHeartbeatAt,
				IdleDeadlineAt: d.IdleDeadlineAt, SessionExpiresAt: d.SessionExpiresAt,
				CIActive: d.CIActive, AgentVersion: d.AgentVersion,
			})
		}
		out.Environments = append(out.Environments, fe)
	}
	writeJSON(w, http.StatusOK, out)
}
