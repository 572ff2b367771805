package pulumiexec

import (
	"sort"
	"strconv"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
)

// Resource type tokens of the DigitalOcean provider the program registers.
const (
	typeDroplet  = "digitalocean:index/droplet:Droplet"
	typeFirewall = "digitalocean:index/firewall:Firewall"
	typeVolume   = "digitalocean:index/volume:Volume"
)

// Stack output names.
const (
	OutDropletID  = "dropletId"
	OutIPv4       = "ipv4Address"
	OutFirewallID = "firewallId"
	OutVolumeID   = "volumeId"
)

// dropletResource is the droplet registered by type token, with the
// provider output the program reads.
type dropletResource struct {
	pulumi.CustomResourceState
	IPv4Address pulumi.StringOutput `pulumi:"ipv4Address"`
}

// plainResource is a resource registered by type token whose outputs
// the program does not read.
type plainResource struct {
	pulumi.CustomResourceState
}

func resourceOpts(known string, extra ...pulumi.ResourceOption) []pulumi.ResourceOption {
	opts := append([]pulumi.ResourceOption{pulumi.Version(ProviderVersion)}, extra...)
	if known != "" {
		opts = append(opts, pulumi.Import(pulumi.ID(known)))
	}
	return opts
}

// dataProgram is the `<box>-data` stack: the volume, protected, so that no
// destroy or replacement of it happens without unprotecting it first
// (Engine.Run with IncludeData). adopt imports the known id. A box without
// a data volume (VolumeGiB 0) registers nothing: an empty stack. (Setting
// a box's volume to 0 after its volume exists is refused by the up, since
// the volume is protected: data is never deleted as a side effect.)
func dataProgram(spec BoxSpec, adopt bool, protect bool) pulumi.RunFunc {
	return func(ctx *pulumi.Context) error {
		if spec.VolumeGiB == 0 {
			return nil
		}
		known := ""
		if adopt {
			known = spec.Known.VolumeID
		}
		tags := []string{TagChalupa, tagEnvPrefix + spec.EnvironmentSlug, tagBoxPrefix + spec.Name}
		if spec.JobID != "" {
			tags = append(tags, tagJobPrefix+spec.JobID)
		}
		var vol plainResource
		err := ctx.RegisterResource(typeVolume, "volume", pulumi.Map{
			"name":   pulumi.String(spec.Name + "-data"),
			"region": pulumi.String(spec.Region),
			"size":   pulumi.Int(spec.VolumeGiB),
			"tags":   pulumi.ToStringArray(sortedCopy(tags)),
		}, &vol, resourceOpts(known, pulumi.Protect(protect))...)
		if err != nil {
			return err
		}
		ctx.Export(OutVolumeID, vol.ID())
		return nil
	}
}

// computeProgram is the `<box>-compute` stack: the droplet (with the data
// volume attached through its volumeIds, the provider's importable way to
// attach) and its firewall. volumeID is the data stack's output ("" when
// the data stack has none yet, as in a first preview).
func computeProgram(spec BoxSpec, volumeID string, adopt bool) pulumi.RunFunc {
	return func(ctx *pulumi.Context) error {
		dropletKnown, firewallKnown := "", ""
		if adopt {
			dropletKnown, firewallKnown = spec.Known.DropletID, spec.Known.FirewallID
		}
		keys := sortedCopy(spec.SSHKeyFingerprints)
		props := pulumi.Map{
			"name":      pulumi.String(spec.Name),
			"region":    pulumi.String(spec.Region),
			"size":      pulumi.String(spec.Size),
			"image":     pulumi.String(spec.Image),
			"sshKeys":   pulumi.ToStringArray(keys),
			"tags":      pulumi.ToStringArray(spec.dropletTags()),
			"volumeIds": pulumi.ToStringArray(nonEmpty(volumeID)),
		}
		if spec.UserData != "" {
			props["userData"] = pulumi.String(spec.UserData)
		}
		var droplet dropletResource
		// One box is one droplet: a replacement deletes the old one first
		// (its volume can be attached to one droplet only). SSH keys and
		// user data act at creation only and cannot be read back, so they
		// never force a replacement of a running droplet or fail an import.
		err := ctx.RegisterResource(typeDroplet, "droplet", props, &droplet, resourceOpts(dropletKnown,
			pulumi.DeleteBeforeReplace(true), pulumi.IgnoreChanges([]string{"sshKeys", "userData"}))...)
		if err != nil {
			return err
		}
		dropletIDs := droplet.ID().ToStringOutput().ApplyT(func(id string) ([]int, error) {
			n, err := strconv.Atoi(id)
			return []int{n}, err
		}).(pulumi.IntArrayOutput)
		var fw plainResource
		everywhere := pulumi.ToStringArray([]string{"0.0.0.0/0", "::/0"})
		// The firewall carries the box's tag so that crash recovery finds
		// it as it finds the droplet. Only that tag: on DigitalOcean a
		// firewall's tags select the droplets it applies to, so the
		// chalupa or environment tag would open every chalupa droplet (or
		// the environment's) to this box's SSH sources.
		err = ctx.RegisterResource(typeFirewall, "firewall", pulumi.Map{
			"name":       pulumi.String(spec.Name),
			"tags":       pulumi.ToStringArray([]string{BoxTag(spec.Name)}),
			"dropletIds": dropletIDs,
			"inboundRules": pulumi.Array{pulumi.Map{
				"protocol":        pulumi.String("tcp"),
				"portRange":       pulumi.String("22"),
				"sourceAddresses": pulumi.ToStringArray(spec.sshSources()),
			}},
			// A DigitalOcean firewall drops what no rule admits, outbound
			// too: the box may reach anything.
			"outboundRules": pulumi.Array{
				pulumi.Map{"protocol": pulumi.String("tcp"), "portRange": pulumi.String("all"), "destinationAddresses": everywhere},
				pulumi.Map{"protocol": pulumi.String("udp"), "portRange": pulumi.String("all"), "destinationAddresses": everywhere},
				pulumi.Map{"protocol": pulumi.String("icmp"), "destinationAddresses": everywhere},
			},
		}, &fw, resourceOpts(firewallKnown)...)
		if err != nil {
			return err
		}
		ctx.Export(OutDropletID, droplet.ID())
		ctx.Export(OutIPv4, droplet.IPv4Address)
		ctx.Export(OutFirewallID, fw.ID())
		return nil
	}
}

func sortedCopy(ss []string) []string {
	out := append([]string(nil), ss...)
	sort.Strings(out)
	return out
}

func nonEmpty(s string) []string {
	if s == "" {
		return []string{}
	}
	return []string{s}
}
