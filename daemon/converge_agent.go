package daemon

import (
	"errors"
	"net/http"
	"net/url"
	"strings"

	"github.com/chalupa-run/chalupa/boxes/agentrelease"
	originpkg "github.com/chalupa-run/chalupa/internal/origin"
	"github.com/chalupa-run/chalupa/jobs"
)

// codeAgentReleaseInvalid is the 422 code of a converge request refused
// because the box carries the agent and the configured agent release
// cannot be installed (docs/operations.md, "Converge").
const codeAgentReleaseInvalid = "agent_release_invalid"

// agentReleaseText says what is wrong with a release in words that name
// the variables and never their values.
func agentReleaseText(problems []error) string {
	parts := make([]string, 0, len(problems))
	for _, p := range problems {
		parts = append(parts, p.Error())
	}
	return strings.Join(parts, "; ")
}

// agentAdmitAnswer is the admin API's answer to an admission refusal.
func agentAdmitAnswer(e *jobs.AdmitError) error {
	return fail(http.StatusUnprocessableEntity, e.Code, e.Message)
}

// agentReleaseWarning is what config check and serve say about the agent
// release (docs/operations.md, "Configuration"): with converge on, any
// problem (boxes that carry the agent cannot be brought up); with it off,
// a release set but not installable. "" when there is nothing to say.
func agentReleaseWarning(release agentrelease.Release, convergeOn bool) string {
	problems := release.Check()
	switch {
	case len(problems) == 0:
		return ""
	case convergeOn:
		return "converge cannot install the agent, so up and preview of a box that carries it answer 422 " +
			codeAgentReleaseInvalid + ": " + agentReleaseText(problems)
	case len(problems) == 1 && errors.Is(problems[0], agentrelease.ErrNotConfigured):
		return ""
	}
	return "the agent release cannot be installed: " + agentReleaseText(problems)
}

// agentReachWarnings are what config check and serve say when boxes would
// get an agent that cannot do its work (docs/operations.md,
// "Configuration"): with converge on, a loopback CHALUPA_ORIGIN is the
// agent URL converge writes into every box, so a real droplet's agent
// would report to itself and the reaper end the box at its idle deadline;
// and one digest pasted into both architectures' variables cannot match
// both archives, so droplets of one architecture refuse the install.
// Warnings, not refusals: a loopback origin is right for a converge whose
// droplets run on this host (the tests' stand-in provider).
func agentReachWarnings(release agentrelease.Release, origin string, convergeOn bool) []string {
	var out []string
	if u, err := url.Parse(origin); convergeOn && err == nil && u.Host != "" && originpkg.IsLoopbackHost(u.Hostname()) {
		out = append(out, "CHALUPA_ORIGIN is a loopback address and converge writes it into each box's agent configuration: "+
			"an agent on a droplet would report to itself and the reaper end its box at the idle deadline; set CHALUPA_ORIGIN to the https origin droplets reach")
	}
	amd, arm := release.SHA256["amd64"], release.SHA256["arm64"]
	if amd != "" && strings.EqualFold(amd, arm) {
		out = append(out, agentrelease.EnvSHA256AMD64+" and "+agentrelease.EnvSHA256ARM64+
			" hold the same digest, which one archive cannot match for both architectures: copy each from the release's checksums.txt")
	}
	return out
}
