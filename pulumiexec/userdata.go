package pulumiexec

import (
	"github.com/chalupa-run/chalupa/boxes/agentrelease"
	"github.com/chalupa-run/chalupa/jobs"
	"github.com/chalupa-run/chalupa/storage"
)

// RendersUserData reports whether a converge action runs the box's program
// and so needs its user data: up and preview. Refresh and destroy never
// create a droplet, so they never wait on the agent release: a box can
// always be read back or torn down.
func RendersUserData(action string) bool {
	return action == jobs.ActionUp || action == jobs.ActionPreview
}

// BoxUserData is the cloud-init user data converge gives box's droplet
// (docs/operations.md, "Converge" and "Agent install"): "" for a box with
// the agent off, else the one template rendered for release with the
// control plane's origin, the box's environment, size and agent limits.
// The ingest key is never part of it. Errors: agentrelease.RenderCloudInit's
// (agentrelease.ErrRelease naming the variables, agentrelease.ErrParams).
func BoxUserData(box storage.Box, release agentrelease.Release, controlPlaneURL string) (string, error) {
	if !box.Config.Agent {
		return "", nil
	}
	return agentrelease.RenderCloudInit(release, agentrelease.Params{URL: controlPlaneURL, Environment: box.EnvironmentSlug,
		Size: box.Config.Size, IdleLimitMinutes: box.Config.AgentIdleMinutes, SessionLimitMinutes: box.Config.AgentSessionMinutes})
}
