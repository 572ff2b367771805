package storage

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"
)

// Box is one declared machine of an environment: a cloud_resource row of
// kind box with its cloud_resource_config (docs/operations.md, "Boxes").
// It is the converge oracle: intent, never wiped as recovery.
type Box struct {
	// ID is the box's ULID (the converge scope id).
	ID string
	// Name is unique across boxes; its stacks are <name>-compute and
	// <name>-data.
	Name string
	// EnvironmentID and EnvironmentSlug name its environment.
	EnvironmentID   int64
	EnvironmentSlug string
	// Managed marks the box's deployments as managed (reaped with the
	// platform token, excluded from customer sweeps).
	Managed bool
	// Config is the declared configuration.
	Config BoxConfig
	// Resources are the provider ids last recorded (zero: none known).
	Resources BoxResources
	// Launch is the last successful launch result (zero: never launched);
	// kept after the droplet is gone.
	Launch BoxLaunch
	// AgentUpgrade is the box's agent upgrade state (zero: none).
	AgentUpgrade BoxAgentUpgrade
	// CreatedAt and UpdatedAt are the row's stamps.
	CreatedAt, UpdatedAt time.Time
}

// Agent upgrade states of a box (docs/operations.md, "Agent install",
// under Upgrade).
const (
	// AgentUpgrading: an upgrade started and its agent has not yet
	// heartbeated with the new version (nor has the restore settled it).
	AgentUpgrading = "upgrading"
	// AgentUpgradeFailed: the upgrade failed and the previous agent did
	// not report again (the restore could not run, or its agent is silent).
	AgentUpgradeFailed = "upgrade-failed"
)

// BoxAgentUpgrade is a box's agent upgrade state.
type BoxAgentUpgrade struct {
	// State is AgentUpgrading, AgentUpgradeFailed or "" (none).
	State string
	// Version is the release being (or that failed to be) installed.
	Version string
	// Since is when the state was set.
	Since time.Time
}

// BoxConfig is a box's declared configuration (cloud_resource_config).
type BoxConfig struct {
	// Version increases on each update (1 at creation).
	Version int64
	// Region, Size and Image are DigitalOcean slugs.
	Region, Size, Image string
	// SSHKeyFingerprints are the DigitalOcean SSH key fingerprints
	// installed on the droplet (at least one).
	SSHKeyFingerprints []string
	// CustomerSource and ControlPlaneSource are the firewall's inbound SSH
	// sources, each an IPv4 /32 ("203.0.113.7/32"); both are required.
	CustomerSource, ControlPlaneSource string
	// VolumeSizeGiB is the data volume's size in GiB (0: no data volume).
	VolumeSizeGiB int64
	// Tags are extra droplet tags (the program adds its own).
	Tags []string
	// Agent says whether converge installs the agent on the box's
	// droplet (true by default; docs/operations.md, "Boxes").
	Agent bool
	// AgentIdleMinutes is the agent's idle limit in minutes (1..10080,
	// default 30); AgentSessionMinutes its session limit in minutes from
	// the install (0: none, at most 43200).
	AgentIdleMinutes, AgentSessionMinutes int64
	// UpdatedAt is when the configuration last changed.
	UpdatedAt time.Time
}

// BoxResources are the provider ids of a box's created resources.
type BoxResources struct {
	// DropletID is the droplet's id (0: none).
	DropletID int64
	// FirewallID and VolumeID are "" when none.
	FirewallID, VolumeID string
	// RecordedAt is when they were recorded (zero: never).
	RecordedAt time.Time
}

// BoxLaunch is the result of a box's last successful up.
type BoxLaunch struct {
	// DropletID is the droplet launched.
	DropletID int64
	// IPv4 and IPv6 are its public addresses ("" when none).
	IPv4, IPv6 string
	// HostKey is the pinned SSH host key (authorized_keys form).
	HostKey string
	// LaunchedAt is when the up succeeded (zero: never launched).
	LaunchedAt time.Time
	// JobID is the job that created the box's resources (the per-job tag
	// on them); a later up of the same droplet keeps it.
	JobID string
}

const boxCols = `r.id, r.name, r.environment_id, e.slug, r.managed,
	coalesce(r.droplet_id, 0), coalesce(r.firewall_id, ''), coalesce(r.volume_id, ''), r.resources_at,
	coalesce(r.launch_droplet_id, 0), coalesce(r.launch_ipv4, ''), coalesce(r.launch_ipv6, ''), coalesce(r.launch_host_key, ''), r.launched_at, coalesce(r.launch_job_id, ''),
	r.created_at, r.updated_at, coalesce(r.agent_upgrade_state, ''), coalesce(r.agent_upgrade_version, ''), r.agent_upgrade_at,
	c.version, c.region, c.size, c.image, c.ssh_key_fingerprints, c.customer_source, c.control_plane_source, c.volume_size_gib, c.tags, c.agent, c.agent_idle_minutes, c.agent_session_minutes, c.updated_at
	FROM cloud_resource r JOIN cloud_resource_config c ON c.resource_id = r.id JOIN environments e ON e.id = r.environment_id`

func scanBox(row interface{ Scan(...any) error }) (Box, error) {
	var b Box
	var resAt, launchAt, created, updated, cfgUpdated, upgradeAt sql.NullInt64
	var keys, tags string
	if err := row.Scan(&b.ID, &b.Name, &b.EnvironmentID, &b.EnvironmentSlug, &b.Managed,
		&b.Resources.DropletID, &b.Resources.FirewallID, &b.Resources.VolumeID, &resAt,
		&b.Launch.DropletID, &b.Launch.IPv4, &b.Launch.IPv6, &b.Launch.HostKey, &launchAt, &b.Launch.JobID,
		&created, &updated, &b.AgentUpgrade.State, &b.AgentUpgrade.Version, &upgradeAt,
		&b.Config.Version, &b.Config.Region, &b.Config.Size, &b.Config.Image, &keys, &b.Config.CustomerSource,
		&b.Config.ControlPlaneSource, &b.Config.VolumeSizeGiB, &tags,
		&b.Config.Agent, &b.Config.AgentIdleMinutes, &b.Config.AgentSessionMinutes, &cfgUpdated); err != nil {
		return Box{}, err
	}
	if err := json.Unmarshal([]byte(keys), &b.Config.SSHKeyFingerprints); err != nil {
		return Box{}, fmt.Errorf("box ssh keys: %w", err)
	}
	if err := json.Unmarshal([]byte(tags), &b.Config.Tags); err != nil {
		return Box{}, fmt.Errorf("box tags: %w", err)
	}
	b.Resources.RecordedAt, b.Launch.LaunchedAt, b.AgentUpgrade.Since = fromMS(resAt), fromMS(launchAt), fromMS(upgradeAt)
	b.CreatedAt, b.UpdatedAt, b.Config.UpdatedAt = fromMS(created), fromMS(updated), fromMS(cfgUpdated)
	return b, nil
}

func jsonList(v []string) string {
	if v == nil {
		v = []string{}
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// CreateBox inserts a box (with id, name, managed flag and cfg, version 1)
// in the environment with envSlug and returns it. Errors: ErrNotFound when
// the environment does not exist; ErrConflict when the name is taken.
func CreateBox(ctx context.Context, q Querier, id, name, envSlug string, managed bool, cfg BoxConfig, now time.Time) (Box, error) {
	res, err := q.ExecContext(ctx,
		`INSERT INTO cloud_resource (id, kind, name, environment_id, managed, created_at, updated_at)
		 SELECT ?, 'box', ?, id, ?, ?, ? FROM environments WHERE slug = ?`,
		id, name, managed, ms(now), ms(now), envSlug)
	if isUniqueViolation(err) {
		return Box{}, ErrConflict
	}
	if err != nil {
		return Box{}, fmt.Errorf("insert box: %w", err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return Box{}, fmt.Errorf("insert box: %w", err)
	} else if n == 0 {
		return Box{}, ErrNotFound
	}
	if _, err := q.ExecContext(ctx,
		`INSERT INTO cloud_resource_config (resource_id, version, region, size, image, ssh_key_fingerprints,
		   customer_source, control_plane_source, volume_size_gib, tags, agent, agent_idle_minutes, agent_session_minutes, updated_at)
		 VALUES (?, 1, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		id, cfg.Region, cfg.Size, cfg.Image, jsonList(cfg.SSHKeyFingerprints), cfg.CustomerSource,
		cfg.ControlPlaneSource, cfg.VolumeSizeGiB, jsonList(cfg.Tags), cfg.Agent, cfg.AgentIdleMinutes, cfg.AgentSessionMinutes, ms(now)); err != nil {
		return Box{}, fmt.Errorf("insert box config: %w", err)
	}
	return BoxByRef(ctx, q, id)
}

// BoxByRef returns the box whose id or name is ref. Errors: ErrNotFound.
func BoxByRef(ctx context.Context, q Querier, ref string) (Box, error) {
	b, err := scanBox(q.QueryRowContext(ctx, `SELECT `+boxCols+` WHERE r.id = ?1 OR r.name = ?1 ORDER BY r.id = ?1 DESC LIMIT 1`, ref))
	if err != nil {
		return Box{}, notFound(err)
	}
	return b, nil
}

// ListBoxes returns the boxes of the environment with envSlug ("" for
// every environment), ordered by environment slug then name.
func ListBoxes(ctx context.Context, q Querier, envSlug string) ([]Box, error) {
	rows, err := q.QueryContext(ctx, `SELECT `+boxCols+` WHERE (?1 = '' OR e.slug = ?1) ORDER BY e.slug, r.name`, envSlug)
	if err != nil {
		return nil, fmt.Errorf("list boxes: %w", err)
	}
	defer rows.Close()
	out := []Box{}
	for rows.Next() {
		b, err := scanBox(rows)
		if err != nil {
			return nil, fmt.Errorf("list boxes: %w", err)
		}
		out = append(out, b)
	}
	return out, rows.Err()
}

// UpdateBox replaces the box's configuration with cfg (its version
// increases by one) and its managed flag, and returns the box. Errors:
// ErrNotFound.
func UpdateBox(ctx context.Context, q Querier, id string, managed bool, cfg BoxConfig, now time.Time) (Box, error) {
	res, err := q.ExecContext(ctx,
		`UPDATE cloud_resource_config SET version = version + 1, region = ?, size = ?, image = ?, ssh_key_fingerprints = ?,
		   customer_source = ?, control_plane_source = ?, volume_size_gib = ?, tags = ?,
		   agent = ?, agent_idle_minutes = ?, agent_session_minutes = ?, updated_at = ?
		 WHERE resource_id = ?`,
		cfg.Region, cfg.Size, cfg.Image, jsonList(cfg.SSHKeyFingerprints), cfg.CustomerSource, cfg.ControlPlaneSource,
		cfg.VolumeSizeGiB, jsonList(cfg.Tags), cfg.Agent, cfg.AgentIdleMinutes, cfg.AgentSessionMinutes, ms(now), id)
	if err != nil {
		return Box{}, fmt.Errorf("update box: %w", err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return Box{}, fmt.Errorf("update box: %w", err)
	} else if n == 0 {
		return Box{}, ErrNotFound
	}
	if _, err := q.ExecContext(ctx, `UPDATE cloud_resource SET managed = ?, updated_at = ? WHERE id = ?`, managed, ms(now), id); err != nil {
		return Box{}, fmt.Errorf("update box: %w", err)
	}
	return BoxByRef(ctx, q, id)
}

// RecordBoxResources records the provider ids of the box's resources as
// found by an up, a refresh or crash recovery (docs/operations.md,
// "Boxes"). Errors: ErrNotFound.
func RecordBoxResources(ctx context.Context, q Querier, id string, r BoxResources, now time.Time) error {
	var drop, fw, vol any
	if r.DropletID != 0 {
		drop = r.DropletID
	}
	if r.FirewallID != "" {
		fw = r.FirewallID
	}
	if r.VolumeID != "" {
		vol = r.VolumeID
	}
	res, err := q.ExecContext(ctx,
		`UPDATE cloud_resource SET droplet_id = ?, firewall_id = ?, volume_id = ?, resources_at = ?, updated_at = ? WHERE id = ?`,
		drop, fw, vol, ms(now), ms(now), id)
	return oneRow(res, err, "record box resources")
}

// RecordBoxLaunch records the result of a successful up; it is kept after
// the droplet is gone (docs/operations.md, "Boxes"). A launch of another
// droplet ends an upgrade-failed agent upgrade state: the new droplet
// booted the configured release (docs/operations.md, "Agent install",
// under Upgrade). Errors: ErrNotFound.
func RecordBoxLaunch(ctx context.Context, q Querier, id string, l BoxLaunch, now time.Time) error {
	res, err := q.ExecContext(ctx,
		`UPDATE cloud_resource SET launch_droplet_id = ?, launch_ipv4 = ?, launch_ipv6 = ?, launch_host_key = ?,
		   launched_at = ?, launch_job_id = ?, updated_at = ?,
		   agent_upgrade_state = CASE WHEN agent_upgrade_state = 'upgrade-failed' AND launch_droplet_id IS NOT ? THEN NULL ELSE agent_upgrade_state END
		 WHERE id = ?`,
		l.DropletID, l.IPv4, l.IPv6, l.HostKey, ms(l.LaunchedAt), l.JobID, ms(now), l.DropletID, id)
	return oneRow(res, err, "record box launch")
}

// oneRow checks that an UPDATE addressed exactly one existing row.
func oneRow(res sql.Result, err error, what string) error {
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if n == 0 {
		return ErrNotFound
	}
	return nil
}
