package console

import (
	"errors"
	"net/http"

	"github.com/chalupa-run/chalupa/boxes/agentrelease"
	"github.com/chalupa-run/chalupa/internal/slug"
	"github.com/chalupa-run/chalupa/storage"
)

// gettingStarted is the public getting-started page: the generic steps
// only, with placeholders — no environment name, no fleet data
// (docs/operations.md, "Console").
func (c *Console) gettingStarted(w http.ResponseWriter, r *http.Request) {
	c.render(w, r, http.StatusOK, "getting-started", nil)
}

// envStartView is an environment's getting-started page.
type envStartView struct {
	Env, Origin string
	// Missing names the release variables to set when no release can be
	// installed (never their values).
	Missing []string
	// OriginProblem is set when CHALUPA_ORIGIN is not an address an agent
	// may report to.
	OriginProblem bool
	// The release and its rendered cloud-init, when both are usable.
	Version, ArchiveAMD64, ArchiveARM64, SHA256AMD64, SHA256ARM64 string
	IdleMinutes                                                   int
	CloudInit                                                     string
}

// envGettingStarted is a signed-in environment's page for adding a
// hand-made droplet: the cloud-init for the configured agent release,
// rendered by agentrelease.RenderCloudInit exactly as `chalupa config
// cloud-init --env SLUG` renders it (both digests), and the key delivery
// steps. Nothing on it is secret: the key is issued by the CLI and never
// shown. Without a usable release it names the variables to set
// (docs/operations.md, "Console" and "Agent install").
func (c *Console) envGettingStarted(w http.ResponseWriter, r *http.Request) {
	sl := param(r, "slug")
	if !slug.Valid(sl) {
		c.notFound(w, r, "environment")
		return
	}
	if _, err := storage.EnvironmentBySlug(r.Context(), c.d.DB.Read, sl); errors.Is(err, storage.ErrNotFound) {
		c.notFound(w, r, "environment")
		return
	} else if err != nil {
		c.internal(w, r, err)
		return
	}
	rel := c.d.AgentRelease
	v := envStartView{Env: sl, Origin: c.d.Origin, IdleMinutes: agentrelease.DefaultIdleLimitMinutes}
	out, err := agentrelease.RenderCloudInit(rel, agentrelease.Params{URL: c.d.Origin, Environment: sl})
	switch {
	case errors.Is(err, agentrelease.ErrRelease):
		v.Missing = agentrelease.Variables(err)
	case err != nil:
		v.OriginProblem = true
	default:
		v.CloudInit = out
		v.Version, v.SHA256AMD64, v.SHA256ARM64 = rel.Version, rel.SHA256["amd64"], rel.SHA256["arm64"]
		v.ArchiveAMD64, v.ArchiveARM64 = agentrelease.ArchiveName(rel.Version, "amd64"), agentrelease.ArchiveName(rel.Version, "arm64")
	}
	c.render(w, r, http.StatusOK, "env-getting-started", v)
}
