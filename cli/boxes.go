package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/chalupa-run/chalupa/adminapi"
)

// adminBoxCmd manages boxes, the converge intent (docs/operations.md,
// "Boxes").
type adminBoxCmd struct {
	Create adminBoxCreateCmd `cmd:"" help:"Declare a box (one machine of an environment)."`
	Update adminBoxUpdateCmd `cmd:"" help:"Change a box's declared configuration; the next up converges it."`
	List   adminBoxListCmd   `cmd:"" help:"List boxes."`
	Show   adminBoxShowCmd   `cmd:"" help:"Show a box: configuration, recorded provider ids and the last launch result."`
	// UpgradeAgent is adminUpgradeBoxAgent.
	UpgradeAgent adminBoxUpgradeAgentCmd `cmd:"" name:"upgrade-agent" help:"Replace the agent on the box's running droplet with CHALUPA_AGENT_VERSION over SSH (digest verified first) and restart it; done when the new agent heartbeats with that version, else the previous binary is restored."`
	// DeliverKey is adminDeliverBoxKey.
	DeliverKey adminBoxDeliverKeyCmd `cmd:"" name:"deliver-key" help:"Give the box's running droplet a fresh ingest key over SSH and restart its agent; its old key is revoked once it heartbeats with the new one."`
}

// adminBoxDeliverKeyCmd rotates one box's ingest key (docs/operations.md,
// "Ingest keys").
type adminBoxDeliverKeyCmd struct {
	Box  string `arg:"" help:"Box name or id."`
	JSON bool   `help:"Print JSON."`
}

func (*adminBoxDeliverKeyCmd) operation() string { return adminapi.OpDeliverBoxKey }

// Run rotates the box's key and prints its outcome; it exits 1 unless the
// box was rotated. The call gets at least adminapi.RotateKeysCallBound,
// whatever --timeout says.
func (c *adminBoxDeliverKeyCmd) Run(a *adminCmd) error {
	a.Timeout = max(a.Timeout, adminapi.RotateKeysCallBound)
	var got adminapi.BoxKeyRotation
	err := runOp(a, c.JSON, func(cl *adminapi.Client, ctx context.Context) (adminapi.BoxKeyRotation, error) {
		var err error
		got, err = cl.DeliverBoxKey(ctx, c.Box)
		return got, err
	}, func(w io.Writer, r adminapi.BoxKeyRotation) error {
		printBoxRotation(w, r)
		return nil
	})
	if err != nil {
		return err
	}
	return notRotated([]adminapi.BoxKeyRotation{got})
}

// adminBoxUpgradeAgentCmd upgrades a box's agent (docs/operations.md,
// "Agent install", under Upgrade).
type adminBoxUpgradeAgentCmd struct {
	Box  string `arg:"" help:"Box name or id."`
	JSON bool   `help:"Print JSON."`
}

func (*adminBoxUpgradeAgentCmd) operation() string { return adminapi.OpUpgradeBoxAgent }

// Run upgrades the agent and prints the versions before and after (or,
// when the droplet already ran the version, says so). The
// call gets at least adminapi.UpgradeBoxAgentCallBound, whatever
// --timeout says: a shorter bound gives up before the daemon answers.
func (c *adminBoxUpgradeAgentCmd) Run(a *adminCmd) error {
	a.Timeout = max(a.Timeout, adminapi.UpgradeBoxAgentCallBound)
	return runOp(a, c.JSON, func(cl *adminapi.Client, ctx context.Context) (adminapi.BoxAgentUpgrade, error) {
		return cl.UpgradeBoxAgent(ctx, c.Box)
	}, func(w io.Writer, u adminapi.BoxAgentUpgrade) error {
		if u.Outcome == "skipped" {
			_, err := fmt.Fprintf(w, "%s: droplet %d: %s\n", u.Box, u.DropletID, displayText(u.Detail))
			return err
		}
		_, err := fmt.Fprintf(w, "%s: droplet %d (%s): %s -> %s\n", u.Box, u.DropletID, u.Arch, u.Before, u.After)
		return err
	})
}

type adminBoxCreateCmd struct {
	Name               string   `arg:"" help:"Box name (^[a-z0-9][a-z0-9-]{1,62}$, unique): its stacks are NAME-compute and NAME-data."`
	Env                string   `name:"env" required:"" help:"Environment slug."`
	Region             string   `required:"" help:"DigitalOcean region slug (nyc3)."`
	Size               string   `required:"" help:"Droplet size slug (s-2vcpu-4gb)."`
	Image              string   `required:"" help:"Image slug or id (ubuntu-24-04-x64)."`
	SSHKey             []string `name:"ssh-key" required:"" help:"SSH key MD5 fingerprint (aa:bb:…); repeat for more."`
	CustomerSource     string   `name:"customer-source" required:"" help:"The customer's IPv4 /32, allowed to SSH in."`
	ControlPlaneSource string   `name:"control-plane-source" required:"" help:"The control plane's egress IPv4 /32 (host-key scan and key delivery)."`
	VolumeGiB          int64    `name:"volume-gib" help:"Data volume size in GiB (0: none)."`
	Tag                []string `name:"tag" help:"Extra droplet tag; repeat for more."`
	Managed            bool     `help:"Mark the box's deployments managed: reaped with the platform's write token whatever the environment's organization, never by a customer's token."`
	Agent              *bool    `help:"Install the agent on the box's droplet (--agent=false opts out: the reaper then ends it at its launch deadline)."`
	AgentIdleMinutes   *int64   `name:"agent-idle-minutes" placeholder:"INT-64" help:"The agent's idle limit in minutes, 1-10080 (default 30)."`
	AgentSessionMin    *int64   `name:"agent-session-minutes" placeholder:"INT-64" help:"The agent's session limit in minutes from its install, 0-43200 (0: none)."`
	JSON               bool     `help:"Print JSON."`
}

func (*adminBoxCreateCmd) operation() string { return adminapi.OpCreateBox }

// Run declares the box. The fields added with the agent go only when
// set (createBoxBody): a daemon of the release before them still takes
// the rest.
func (c *adminBoxCreateCmd) Run(a *adminCmd) error {
	body := createBoxBody{CreateBoxRequest: adminapi.CreateBoxRequest{Name: c.Name, Environment: c.Env, Managed: c.Managed, Agent: c.Agent,
		BoxConfig: adminapi.BoxConfig{Region: c.Region, Size: c.Size, Image: c.Image, SSHKeyFingerprints: c.SSHKey,
			CustomerSource: c.CustomerSource, ControlPlaneSource: c.ControlPlaneSource, VolumeSizeGiB: c.VolumeGiB, Tags: c.Tag}}}
	// A limit goes when the operator gave it. An idle limit of 0 is
	// refused here: the daemon reads 0 as "not given" (the CLIs before
	// these flags were optional sent it always) and would set 30 without a
	// word, where the operator — after --agent-session-minutes 0, "none" —
	// may have meant no idle limit, which no box has (docs/operations.md,
	// "Boxes").
	if c.AgentIdleMinutes != nil && *c.AgentIdleMinutes == 0 {
		return &exitError{code: ExitUsage, err: errors.New("--agent-idle-minutes must be 1-10080: every box has an idle limit (leave the flag out for the default, 30)")}
	}
	body.AgentIdleMinutes = c.AgentIdleMinutes
	body.AgentSessionMinutes = c.AgentSessionMin
	return runOp(a, c.JSON, func(cl *adminapi.Client, ctx context.Context) (adminapi.Box, error) {
		return adminapi.CallAs[adminapi.Box](ctx, cl, adminapi.OpCreateBox, body)
	}, func(w io.Writer, b adminapi.Box) error {
		_, err := fmt.Fprintf(w, "declared box %s (%s) in %s; converge it with: chalupa admin converge %s up\n", b.Name, b.ID, b.Environment, b.Name)
		return err
	})
}

type adminBoxUpdateCmd struct {
	Box                string   `arg:"" help:"Box name or id."`
	Region             *string  `help:"DigitalOcean region slug."`
	Size               *string  `help:"Droplet size slug."`
	Image              *string  `help:"Image slug or id."`
	SSHKey             []string `name:"ssh-key" help:"SSH key fingerprint; repeat; replaces the list."`
	CustomerSource     *string  `name:"customer-source" help:"The customer's IPv4 /32."`
	ControlPlaneSource *string  `name:"control-plane-source" help:"The control plane's egress IPv4 /32."`
	VolumeGiB          *int64   `name:"volume-gib" help:"Data volume size in GiB."`
	Tag                []string `name:"tag" help:"Extra droplet tag; repeat; replaces the list."`
	NoTags             bool     `name:"no-tags" help:"Remove every extra tag."`
	Managed            *bool    `help:"Mark the box's deployments managed: reaped with the platform's write token, never by a customer's token (--managed=false to clear)."`
	Agent              *bool    `help:"Install the agent on the box's next droplet (--agent=false opts out; a running droplet keeps what it booted with)."`
	AgentIdleMinutes   *int64   `name:"agent-idle-minutes" help:"The agent's idle limit in minutes, 1-10080."`
	AgentSessionMin    *int64   `name:"agent-session-minutes" help:"The agent's session limit in minutes, 0-43200 (0: none)."`
	JSON               bool     `help:"Print JSON."`
}

func (*adminBoxUpdateCmd) operation() string { return adminapi.OpUpdateBox }

// Run updates the box.
func (c *adminBoxUpdateCmd) Run(a *adminCmd) error {
	req := adminapi.UpdateBoxRequest{Box: c.Box, Region: c.Region, Size: c.Size, Image: c.Image, CustomerSource: c.CustomerSource,
		ControlPlaneSource: c.ControlPlaneSource, VolumeSizeGiB: c.VolumeGiB, Managed: c.Managed,
		Agent: c.Agent, AgentIdleMinutes: c.AgentIdleMinutes, AgentSessionMinutes: c.AgentSessionMin}
	if c.SSHKey != nil {
		req.SSHKeyFingerprints = &c.SSHKey
	}
	if c.NoTags && c.Tag != nil {
		return &exitError{code: ExitUsage, err: fmt.Errorf("--tag and --no-tags exclude each other")}
	}
	if c.Tag != nil {
		req.Tags = &c.Tag
	} else if c.NoTags {
		none := []string{}
		req.Tags = &none
	}
	return runOp(a, c.JSON, func(cl *adminapi.Client, ctx context.Context) (adminapi.Box, error) {
		return cl.UpdateBox(ctx, req)
	}, func(w io.Writer, b adminapi.Box) error {
		_, err := fmt.Fprintf(w, "updated box %s (configuration version %d)\n", b.Name, b.ConfigVersion)
		return err
	})
}

type adminBoxListCmd struct {
	Env  string `name:"env" help:"Only this environment's boxes."`
	JSON bool   `help:"Print JSON."`
}

func (*adminBoxListCmd) operation() string { return adminapi.OpListBoxes }

// Run lists boxes.
func (c *adminBoxListCmd) Run(a *adminCmd) error {
	return runOp(a, c.JSON, func(cl *adminapi.Client, ctx context.Context) (adminapi.BoxList, error) {
		return cl.ListBoxes(ctx, adminapi.ListBoxesRequest{Environment: c.Env})
	}, func(w io.Writer, l adminapi.BoxList) error {
		tw := table(w)
		fmt.Fprintln(tw, "NAME\tENVIRONMENT\tREGION\tSIZE\tVOLUME GiB\tDROPLET\tLAST LAUNCH\tID")
		for _, b := range l.Boxes {
			drop, launched := "-", "-"
			if b.Resources.DropletID != 0 {
				drop = fmt.Sprint(b.Resources.DropletID)
			}
			if b.LastLaunch != nil {
				launched = timeOrDash(b.LastLaunch.LaunchedAt)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", b.Name, b.Environment, b.Region, b.Size, b.VolumeSizeGiB, drop, launched, b.ID)
		}
		return tw.Flush()
	})
}

type adminBoxShowCmd struct {
	Box  string `arg:"" help:"Box name or id."`
	JSON bool   `help:"Print JSON."`
}

func (*adminBoxShowCmd) operation() string { return adminapi.OpGetBox }

// Run shows one box; what the daemon did not answer shows as unknown
// (boxAnswer).
func (c *adminBoxShowCmd) Run(a *adminCmd) error {
	return runOp(a, c.JSON, func(cl *adminapi.Client, ctx context.Context) (boxAnswer, error) {
		return adminapi.CallAs[boxAnswer](ctx, cl, adminapi.OpGetBox, adminapi.GetBoxRequest{Box: c.Box})
	}, printBox)
}

func printBox(w io.Writer, b boxAnswer) error {
	tw := table(w)
	dash := func(s string) string {
		if s == "" {
			return "-"
		}
		return s
	}
	fmt.Fprintf(tw, "name\t%s\n", b.Name)
	fmt.Fprintf(tw, "id\t%s\n", b.ID)
	fmt.Fprintf(tw, "environment\t%s\n", b.Environment)
	fmt.Fprintf(tw, "managed\t%s\n", managedText(b.Managed))
	agent := agentText(b)
	// The agent is user data: it acts when a droplet is created, so a
	// change made after the recorded droplet launched is for the next
	// one (docs/operations.md, "Boxes"). Without the configuration's
	// change time (an older daemon) or the launch's (a droplet recorded
	// by a refresh), the droplet may predate the change.
	if d := b.Resources.DropletID; d != 0 {
		switch {
		case b.ConfigUpdatedAt == nil || b.LastLaunch == nil:
			agent += fmt.Sprintf("; droplet %d keeps what it booted with", d)
		case b.ConfigUpdatedAt.After(b.LastLaunch.LaunchedAt):
			agent += fmt.Sprintf("; droplet %d launched before the last change and keeps what it booted with", d)
		}
	}
	fmt.Fprintf(tw, "agent\t%s\n", agent)
	if u := b.AgentUpgrade; u != nil {
		fmt.Fprintf(tw, "agent upgrade\t%s\n", agentUpgradeText(*u))
	}
	updated := "unknown"
	if b.ConfigUpdatedAt != nil {
		updated = timeOrDash(*b.ConfigUpdatedAt)
	}
	fmt.Fprintf(tw, "configuration\tversion %d, updated %s\n", b.ConfigVersion, updated)
	fmt.Fprintf(tw, "region / size / image\t%s / %s / %s\n", b.Region, b.Size, b.Image)
	fmt.Fprintf(tw, "ssh keys\t%s\n", strings.Join(b.SSHKeyFingerprints, ", "))
	fmt.Fprintf(tw, "firewall sources\tcustomer %s, control plane %s\n", b.CustomerSource, b.ControlPlaneSource)
	volume := "none"
	if b.VolumeSizeGiB > 0 {
		volume = fmt.Sprintf("%d GiB", b.VolumeSizeGiB)
	}
	fmt.Fprintf(tw, "data volume\t%s\n", volume)
	fmt.Fprintf(tw, "tags\t%s\n", dash(strings.Join(b.Tags, ", ")))
	drop := "-"
	if b.Resources.DropletID != 0 {
		drop = fmt.Sprint(b.Resources.DropletID)
	}
	fmt.Fprintf(tw, "recorded ids\tdroplet %s, firewall %s, volume %s (at %s)\n", drop, dash(b.Resources.FirewallID),
		dash(b.Resources.VolumeID), timeOrDash(b.Resources.RecordedAt))
	if l := b.LastLaunch; l != nil {
		fmt.Fprintf(tw, "last launch\t%s by job %s: droplet %d, ipv4 %s, ipv6 %s\n", timeOrDash(l.LaunchedAt), l.JobID, l.DropletID, dash(l.IPv4), dash(l.IPv6))
		fmt.Fprintf(tw, "host key\t%s\n", dash(displayText(l.HostKey)))
	} else {
		fmt.Fprintln(tw, "last launch\tnever")
	}
	return tw.Flush()
}

// agentUpgradeText is a box's agent upgrade state in words
// (docs/operations.md, "Agent install", under Upgrade).
func agentUpgradeText(u adminapi.BoxAgentUpgradeState) string {
	switch u.State {
	case "upgrading":
		return fmt.Sprintf("upgrading to %s since %s: done when its agent heartbeats with that version", displayText(u.Version), timeOrDash(u.Since))
	case "upgrade-failed":
		return fmt.Sprintf("upgrade-failed: the upgrade to %s at %s failed and the previous agent did not report again (see its agent-upgrade-failed event)",
			displayText(u.Version), timeOrDash(u.Since))
	}
	return displayText(u.State)
}

// agentText is a box's agent setting in words (docs/operations.md,
// "Boxes"); unknown where the daemon did not answer it.
func agentText(b boxAnswer) string {
	switch {
	case b.Agent == nil:
		return unknownText
	case !*b.Agent:
		return "off for the box's next droplet (converge installs no agent: a running reaper ends that droplet at its launch deadline)"
	}
	idle, session := "unknown", "session limit unknown"
	if b.AgentIdleMinutes != nil {
		idle = fmt.Sprintf("%d min", *b.AgentIdleMinutes)
	}
	switch {
	case b.AgentSessionMinutes == nil:
	case *b.AgentSessionMinutes > 0:
		session = fmt.Sprintf("session limit %d min", *b.AgentSessionMinutes)
	default:
		session = "no session limit"
	}
	return fmt.Sprintf("on, idle limit %s, %s", idle, session)
}

// managedText is a box's managed flag in words: who reaps its deployments
// (docs/operations.md, "Customer organizations").
func managedText(managed bool) string {
	if managed {
		return "yes: its deployments are reaped with the platform's write token, whatever the organization"
	}
	return "no: its deployments are reaped with the token of its environment's organization (the platform's write token in a platform environment, the customer's own token in a customer organization's)"
}
