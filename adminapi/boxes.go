package adminapi

import (
	"context"
	"net/http"
	"time"
)

// Box operation ids (docs/operations.md, "Boxes").
const (
	OpCreateBox  = "adminCreateBox"
	OpUpdateBox  = "adminUpdateBox"
	OpListBoxes  = "adminListBoxes"
	OpGetBox     = "adminGetBox"
	pathBoxes    = "/api/admin/boxes"
	pathBox      = "/api/admin/boxes/:box"
	boxesSummary = "list boxes (converge intent), optionally of one environment"
)

var boxOperations = []Operation{
	{ID: OpCreateBox, MCP: mcpMutate, Method: methodPost, Path: pathBoxes, Status: http.StatusCreated, Mutates: true,
		Request: typeOf[CreateBoxRequest](), Response: typeOf[Box](),
		Summary: `declare a box: {"name","environment","region","size","image","sshKeyFingerprints","customerSource","controlPlaneSource","volumeSizeGiB","tags","managed","agent","agentIdleMinutes","agentSessionMinutes"}; agent is on unless "agent":false`},
	{ID: OpUpdateBox, MCP: mcpMutate, Method: http.MethodPatch, Path: pathBox, Status: http.StatusOK, Mutates: true,
		Request: typeOf[UpdateBoxRequest](), Response: typeOf[Box](),
		Summary: "change a box's declared configuration (fields present are replaced); the next up converges it"},
	{ID: OpListBoxes, MCP: mcpRead, Method: methodGet, Path: pathBoxes, Status: http.StatusOK,
		Request: typeOf[ListBoxesRequest](), Response: typeOf[BoxList](), Summary: boxesSummary},
	{ID: OpGetBox, MCP: mcpRead, Method: methodGet, Path: pathBox, Status: http.StatusOK,
		Request: typeOf[GetBoxRequest](), Response: typeOf[Box](),
		Summary: "one box: its configuration, recorded provider ids and last launch result"},
	{ID: OpUpgradeBoxAgent, Method: methodPost, Path: pathBox + "/agent-upgrade", Bound: UpgradeBoxAgentCallBound,
		Status: http.StatusOK, Mutates: true, Request: typeOf[UpgradeBoxAgentRequest](), Response: typeOf[BoxAgentUpgrade](),
		// Destructive-ish: it replaces the droplet's agent binary and
		// restarts its unit (a monitoring gap of seconds), so a call
		// names the box.
		MCP:     mcpDestructive("upgrade agent {box}"),
		Summary: "replace the agent on a box's running droplet with CHALUPA_AGENT_VERSION over SSH (digest verified first) and restart it"},
	{ID: OpDeliverBoxKey, Method: methodPost, Path: pathBox + "/deliver-key", Bound: RotateKeysCallBound,
		Status: http.StatusOK, Mutates: true, Request: typeOf[DeliverBoxKeyRequest](), Response: typeOf[BoxKeyRotation](),
		// It restarts the box's agent (a monitoring gap of seconds) and,
		// once the new key is heartbeated, revokes the old one: a call
		// names the box. The answer holds key ids, never material.
		MCP:     mcpDestructive("deliver key {box}"),
		Summary: "give a box's running droplet a fresh ingest key of its own over SSH and restart its agent; the old key is revoked at the first heartbeat signed with the new one"},
}

// OpDeliverBoxKey rotates one box's ingest key over SSH
// (docs/operations.md, "Ingest keys").
const OpDeliverBoxKey = "adminDeliverBoxKey"

// DeliverBoxKeyRequest is adminDeliverBoxKey's: the box's id or name.
type DeliverBoxKeyRequest struct {
	Box string `path:"box" json:"-"`
}

// DeliverBoxKey calls adminDeliverBoxKey. Errors: an *APIError with 404
// not_found, 409 agent_off (the box does not carry the agent), 409
// no_droplet (no running droplet with a known address). Every attempt
// answers 200 with its outcome (BoxKeyRotation.Outcome).
func (c *Client) DeliverBoxKey(ctx context.Context, box string) (BoxKeyRotation, error) {
	return call[BoxKeyRotation](ctx, c, OpDeliverBoxKey, DeliverBoxKeyRequest{Box: box})
}

// BoxConfig is a box's declared configuration. Rules (422 invalid_box
// otherwise): region a DigitalOcean region slug (nyc3); size and image
// slugs; 1–10 distinct SSH key MD5 fingerprints (aa:bb:…); customerSource
// and controlPlaneSource each an IPv4 /32 ("203.0.113.7/32") of a unicast
// address, both required; volumeSizeGiB 0 (no data volume) to 16384; at
// most 20 distinct tags of [A-Za-z0-9_:-], none starting with "chalupa";
// agentIdleMinutes 1–10080 (0 on create: 30, the agent's default);
// agentSessionMinutes 0 (none) to 43200 (docs/operations.md, "Boxes").
// Each rule is a schema tag too, the create body's (docs/operations.md,
// "OpenAPI"): agentIdleMinutes from 0, the create default; the named
// patterns are apischema's, which boxes.Validate checks with.
type BoxConfig struct {
	Region string `json:"region" schema:"required,pattern=region"`
	Size   string `json:"size" schema:"required,pattern=size"`
	// Image is an image slug or a numeric image id.
	Image              string   `json:"image" schema:"required,pattern=image"`
	SSHKeyFingerprints []string `json:"sshKeyFingerprints" schema:"required,minItems=1,maxItems=10,uniqueItems,pattern=fingerprint"`
	CustomerSource     string   `json:"customerSource" schema:"required,pattern=ipv4Host,not=nonUnicastHost"`
	ControlPlaneSource string   `json:"controlPlaneSource" schema:"required,pattern=ipv4Host,not=nonUnicastHost"`
	// VolumeSizeGiB is the data volume's size in GiB.
	VolumeSizeGiB int64    `json:"volumeSizeGiB" schema:"minimum=0,maximum=16384"`
	Tags          []string `json:"tags" schema:"maxItems=20,uniqueItems,pattern=tag,not=reservedTag"`
	// AgentIdleMinutes is the agent's idle limit in minutes
	// (CHALUPA_AGENT_LIMIT_MINUTES on the droplet).
	AgentIdleMinutes int64 `json:"agentIdleMinutes" schema:"minimum=0,maximum=10080"`
	// AgentSessionMinutes is the agent's session limit in minutes from its
	// install at first boot (0: no session expiry).
	AgentSessionMinutes int64 `json:"agentSessionMinutes" schema:"minimum=0,maximum=43200"`
}

// CreateBoxRequest is the body of adminCreateBox. Name follows the
// environment slug rule and is unique across boxes; Environment is an
// existing environment's slug (both required).
type CreateBoxRequest struct {
	Name        string `json:"name" schema:"required,pattern=slug"`
	Environment string `json:"environment" schema:"required,pattern=slug"`
	Managed     bool   `json:"managed"`
	// Agent says whether converge installs the agent on the box's droplet;
	// absent means true (docs/operations.md, "Boxes").
	Agent *bool `json:"agent,omitempty"`
	BoxConfig
}

// UpdateBoxRequest is the body of adminUpdateBox: every field present
// replaces the declared value (lists as a whole); absent fields stay.
// Box (the path) is the box's id or name. A field present is held to
// BoxConfig's rule, the same schema tag (docs/operations.md, "OpenAPI"),
// except that agentIdleMinutes is 1–10080: 0 is a default only on create.
type UpdateBoxRequest struct {
	Box                string    `path:"box" json:"-"`
	Region             *string   `json:"region,omitempty" schema:"pattern=region"`
	Size               *string   `json:"size,omitempty" schema:"pattern=size"`
	Image              *string   `json:"image,omitempty" schema:"pattern=image"`
	SSHKeyFingerprints *[]string `json:"sshKeyFingerprints,omitempty" schema:"minItems=1,maxItems=10,uniqueItems,pattern=fingerprint"`
	CustomerSource     *string   `json:"customerSource,omitempty" schema:"pattern=ipv4Host,not=nonUnicastHost"`
	ControlPlaneSource *string   `json:"controlPlaneSource,omitempty" schema:"pattern=ipv4Host,not=nonUnicastHost"`
	VolumeSizeGiB      *int64    `json:"volumeSizeGiB,omitempty" schema:"minimum=0,maximum=16384"`
	Tags               *[]string `json:"tags,omitempty" schema:"maxItems=20,uniqueItems,pattern=tag,not=reservedTag"`
	Managed            *bool     `json:"managed,omitempty"`
	Agent              *bool     `json:"agent,omitempty"`
	// AgentIdleMinutes and AgentSessionMinutes follow BoxConfig's rules.
	AgentIdleMinutes    *int64 `json:"agentIdleMinutes,omitempty" schema:"minimum=1,maximum=10080"`
	AgentSessionMinutes *int64 `json:"agentSessionMinutes,omitempty" schema:"minimum=0,maximum=43200"`
}

// ListBoxesRequest filters adminListBoxes: Environment is a slug ("" for
// all).
type ListBoxesRequest struct {
	Environment string `query:"environment" json:"-"`
}

// GetBoxRequest names a box by id or name.
type GetBoxRequest struct {
	Box string `path:"box" json:"-"`
}

// BoxResources are the provider ids recorded on a box after an up, a
// refresh or crash recovery (0 / "": none known).
type BoxResources struct {
	DropletID  int64     `json:"dropletId"`
	FirewallID string    `json:"firewallId"`
	VolumeID   string    `json:"volumeId"`
	RecordedAt time.Time `json:"recordedAt"`
}

// BoxLaunch is the result of a box's last successful up, kept after the
// droplet is gone.
type BoxLaunch struct {
	DropletID  int64     `json:"dropletId"`
	IPv4       string    `json:"ipv4"`
	IPv6       string    `json:"ipv6"`
	HostKey    string    `json:"hostKey"`
	LaunchedAt time.Time `json:"launchedAt"`
	JobID      string    `json:"jobId"`
}

// Box is one box: intent plus what converge recorded.
type Box struct {
	// ID is the box's ULID, the converge scope id.
	ID          string `json:"id"`
	Name        string `json:"name"`
	Environment string `json:"environment"`
	Managed     bool   `json:"managed"`
	// Agent says whether converge installs the agent on the box's droplet
	// (its user data; a droplet that exists keeps what it booted with).
	Agent bool `json:"agent"`
	BoxConfig
	// ConfigVersion increases on each update.
	ConfigVersion int64 `json:"configVersion"`
	// ConfigUpdatedAt is when the configuration last changed (UpdatedAt
	// also moves when converge records resources or a launch).
	ConfigUpdatedAt time.Time    `json:"configUpdatedAt"`
	Resources       BoxResources `json:"resources"`
	// LastLaunch is nil when the box was never launched.
	LastLaunch *BoxLaunch `json:"lastLaunch"`
	// AgentUpgrade is the box's agent upgrade state: nil when none,
	// else upgrading (until the new agent reports) or upgrade-failed
	// (docs/operations.md, "Agent install", under Upgrade).
	AgentUpgrade *BoxAgentUpgradeState `json:"agentUpgrade,omitempty"`
	CreatedAt    time.Time             `json:"createdAt"`
	UpdatedAt    time.Time             `json:"updatedAt"`
}

// BoxAgentUpgradeState is a box's agent upgrade state.
type BoxAgentUpgradeState struct {
	// State is upgrading or upgrade-failed.
	State string `json:"state"`
	// Version is the release being (or that failed to be) installed.
	Version string    `json:"version"`
	Since   time.Time `json:"since"`
}

// BoxList answers adminListBoxes.
type BoxList struct {
	Boxes []Box `json:"boxes"`
}

// CreateBox calls adminCreateBox. Errors: an *APIError with 422
// invalid_box, 404 environment_not_found or 409 box_exists.
func (c *Client) CreateBox(ctx context.Context, req CreateBoxRequest) (Box, error) {
	return call[Box](ctx, c, OpCreateBox, req)
}

// UpdateBox calls adminUpdateBox. Errors: an *APIError with 422
// invalid_box or 404 not_found.
func (c *Client) UpdateBox(ctx context.Context, req UpdateBoxRequest) (Box, error) {
	return call[Box](ctx, c, OpUpdateBox, req)
}

// ListBoxes calls adminListBoxes.
func (c *Client) ListBoxes(ctx context.Context, req ListBoxesRequest) (BoxList, error) {
	return call[BoxList](ctx, c, OpListBoxes, req)
}

// GetBox calls adminGetBox with the box's id or name. Errors: an
// *APIError with 404 not_found.
func (c *Client) GetBox(ctx context.Context, box string) (Box, error) {
	return call[Box](ctx, c, OpGetBox, GetBoxRequest{Box: box})
}

// OpUpgradeBoxAgent upgrades the agent on a box's running droplet over SSH
// (docs/operations.md, "Agent install", under Upgrade).
const OpUpgradeBoxAgent = "adminUpgradeBoxAgent"

// UpgradeBoxAgentCallBound is the least time a client gives one
// adminUpgradeBoxAgent call (docs/operations.md, "Agent install", under
// Upgrade): the daemon waits up to 1 min for SSH, whose last attempt may
// take 20 s more, then up to 3 min for the remote upgrade, then up to the
// report bound (CHALUPA_AGENT_UPGRADE_REPORT_SECONDS, at most 5 min) for
// the new agent's heartbeat; a failure adds the restore (the same SSH and
// script bounds) and the report bound again: 18 min 40 s at most. A
// shorter bound (the CLI's default --timeout is 60 s, the daemon's write
// timeout 60 s) gives up before the daemon can answer. The operation's
// Bound.
const UpgradeBoxAgentCallBound = 20 * time.Minute

// UpgradeBoxAgentRequest is adminUpgradeBoxAgent's: the box's id or name.
type UpgradeBoxAgentRequest struct {
	Box string `path:"box" json:"-"`
}

// BoxAgentUpgrade answers adminUpgradeBoxAgent: what the droplet ran
// before and runs now.
type BoxAgentUpgrade struct {
	Box       string `json:"box"`
	DropletID int64  `json:"dropletId"`
	// Version is the release installed (CHALUPA_AGENT_VERSION).
	Version string `json:"version"`
	// Arch is the droplet's architecture (amd64 or arm64).
	Arch string `json:"arch"`
	// Before and After are the agent's `version` line before and after
	// ("none": no agent was installed).
	Before string `json:"before"`
	After  string `json:"after"`
	// Outcome is upgraded, or skipped when the droplet already ran the
	// version (nothing downloaded or restarted; absent from a server
	// before the rollout's release).
	Outcome string `json:"outcome,omitempty"`
	// Detail is the outcome in words.
	Detail string `json:"detail,omitempty"`
}

// UpgradeBoxAgent calls adminUpgradeBoxAgent. Errors: an *APIError with
// 404 not_found, 409 agent_off (the box does not carry the agent), 409
// no_droplet, 422 agent_release_invalid (naming the variables), 502
// agent_upgrade_failed.
func (c *Client) UpgradeBoxAgent(ctx context.Context, box string) (BoxAgentUpgrade, error) {
	return call[BoxAgentUpgrade](ctx, c, OpUpgradeBoxAgent, UpgradeBoxAgentRequest{Box: box})
}
