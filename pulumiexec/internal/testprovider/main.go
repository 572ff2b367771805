// Command testprovider is the test stand-in for the DigitalOcean Pulumi
// resource provider (docs/operations.md, "Converge"): a plugin named
// digitalocean, reporting the version the converge program pins, that
// serves exactly the resource tokens the program registers —
// digitalocean:index/droplet:Droplet, index/firewall:Firewall and
// index/volume:Volume — with the real provider's input and output property
// names, backed by the DigitalOcean API over HTTP (in tests, digitalocean/dofake).
//
// Like the real provider it takes its token from DIGITALOCEAN_TOKEN (or
// DIGITALOCEAN_ACCESS_TOKEN) and its API endpoint from DIGITALOCEAN_API_URL.
// It builds its own godo client, as the real provider does: it stands in
// for a third-party binary, not for chalupa's clients (digitalocean).
//
// It is written directly on the provider gRPC interface through the SDK's
// plugin.NewProviderServer, so it adds no module to go.mod. Deviations from
// the real provider, all on paths converge does not take: a droplet change
// other than tags or attached volumes replaces it (the real one resizes and
// renames in place); a volume change replaces it (the real one resizes).
// Like the real provider (terraform-provider-digitalocean's droplet delete,
// which reads the droplet while waiting for it to be unlocked), deleting a
// droplet that is already gone fails; its read answers a gone droplet as
// missing, which is how a refresh drops it from the state.
//
// Build it and install it into a test PULUMI_HOME:
//
//	go build -o pulumi-resource-digitalocean ./pulumiexec/internal/testprovider
//	PULUMI_HOME=… pulumi plugin install resource digitalocean 4.62.0 --file pulumi-resource-digitalocean
package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/blang/semver"
	"github.com/digitalocean/godo"
	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
	"github.com/pulumi/pulumi/sdk/v3/go/common/resource/plugin"
	"github.com/pulumi/pulumi/sdk/v3/go/common/util/rpcutil"
	pulumirpc "github.com/pulumi/pulumi/sdk/v3/proto/go"
	"google.golang.org/grpc"
)

// Version is the provider version this plugin reports: the one the
// converge program requests (pulumiexec.ProviderVersion).
const Version = "4.62.0"

// The resource tokens served.
const (
	tokDroplet  = "digitalocean:index/droplet:Droplet"
	tokFirewall = "digitalocean:index/firewall:Firewall"
	tokVolume   = "digitalocean:index/volume:Volume"
)

func main() {
	if err := serve(); err != nil {
		fmt.Fprintln(os.Stderr, "pulumi-resource-digitalocean (test):", err)
		os.Exit(1)
	}
}

// engineCheck is how often the plugin asks whether the engine that started
// it is still there. Real providers (pulumi's provider.Main) ask every
// 5 minutes; the test double asks often, so a daemon SIGKILLed mid-run by
// a test leaves no plugin behind for long.
const engineCheck = 2 * time.Second

func serve() error {
	p := &provider{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if len(os.Args) > 1 { // the engine's address, as for any plugin
		if err := rpcutil.Healthcheck(ctx, os.Args[1], engineCheck, cancel); err != nil {
			return err
		}
	}
	stop := make(chan bool)
	go func() { <-ctx.Done(); close(stop) }()
	handle, err := rpcutil.ServeWithOptions(rpcutil.ServeOptions{
		Init: func(s *grpc.Server) error {
			pulumirpc.RegisterResourceProviderServer(s, plugin.NewProviderServer(p))
			return nil
		},
		Cancel: stop,
	})
	if err != nil {
		return err
	}
	// The engine reads the port from the plugin's first line of output.
	fmt.Printf("%d\n", handle.Port)
	return <-handle.Done
}

type provider struct {
	plugin.UnimplementedProvider
	do *godo.Client
}

type bearer struct{ token string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

func (p *provider) GetPluginInfo(context.Context) (plugin.PluginInfo, error) {
	v := semver.MustParse(Version)
	return plugin.PluginInfo{Version: &v}, nil
}

func (p *provider) Handshake(context.Context, plugin.ProviderHandshakeRequest) (*plugin.ProviderHandshakeResponse, error) {
	return &plugin.ProviderHandshakeResponse{}, nil
}

func (p *provider) CheckConfig(_ context.Context, req plugin.CheckConfigRequest) (plugin.CheckConfigResponse, error) {
	return plugin.CheckConfigResponse{Properties: req.News}, nil
}

func (p *provider) DiffConfig(context.Context, plugin.DiffConfigRequest) (plugin.DiffConfigResponse, error) {
	return plugin.DiffResult{Changes: plugin.DiffNone}, nil
}

func (p *provider) Configure(context.Context, plugin.ConfigureRequest) (plugin.ConfigureResponse, error) {
	token := os.Getenv("DIGITALOCEAN_TOKEN")
	if token == "" {
		token = os.Getenv("DIGITALOCEAN_ACCESS_TOKEN")
	}
	if token == "" {
		return plugin.ConfigureResponse{}, errors.New("DIGITALOCEAN_TOKEN is not set")
	}
	base := os.Getenv("DIGITALOCEAN_API_URL")
	if base == "" {
		base = "https://api.digitalocean.com"
	}
	if !strings.HasSuffix(base, "/") {
		base += "/"
	}
	c, err := godo.New(&http.Client{Transport: bearer{token}}, godo.SetBaseURL(base))
	if err != nil {
		return plugin.ConfigureResponse{}, err
	}
	p.do = c
	return plugin.ConfigureResponse{}, nil
}

func (p *provider) Check(_ context.Context, req plugin.CheckRequest) (plugin.CheckResponse, error) {
	var failures []plugin.CheckFailure
	need := map[string][]string{
		tokDroplet:  {"image", "region", "size", "name"},
		tokFirewall: {"name"},
		tokVolume:   {"region", "size", "name"},
	}[string(req.Type)]
	for _, k := range need {
		if _, ok := req.News[resource.PropertyKey(k)]; !ok {
			failures = append(failures, plugin.CheckFailure{Property: resource.PropertyKey(k), Reason: "required"})
		}
	}
	return plugin.CheckResponse{Properties: req.News, Failures: failures}, nil
}

// inPlace are the inputs an update changes without replacing the resource.
var inPlace = map[string]map[string]bool{
	tokDroplet:  {"tags": true, "volumeIds": true},
	tokFirewall: {"name": true, "dropletIds": true, "inboundRules": true, "outboundRules": true, "tags": true},
	tokVolume:   {"tags": true},
}

func (p *provider) Diff(_ context.Context, req plugin.DiffRequest) (plugin.DiffResponse, error) {
	keys := map[resource.PropertyKey]bool{}
	for k := range req.OldInputs {
		keys[k] = true
	}
	for k := range req.NewInputs {
		keys[k] = true
	}
	var changed, replace []resource.PropertyKey
	detailed := map[string]plugin.PropertyDiff{}
	for k := range keys {
		if slices.Contains(req.IgnoreChanges, string(k)) || strings.HasPrefix(string(k), "__") {
			continue
		}
		o, n := req.OldInputs[k], req.NewInputs[k]
		if !n.ContainsUnknowns() && o.DeepEquals(n) {
			continue
		}
		changed = append(changed, k)
		kind := plugin.DiffUpdate
		if !inPlace[string(req.Type)][string(k)] {
			kind = plugin.DiffUpdateReplace
			replace = append(replace, k)
		}
		detailed[string(k)] = plugin.PropertyDiff{Kind: kind, InputDiff: true}
	}
	if len(changed) == 0 {
		return plugin.DiffResult{Changes: plugin.DiffNone}, nil
	}
	sort.Slice(changed, func(i, j int) bool { return changed[i] < changed[j] })
	return plugin.DiffResult{Changes: plugin.DiffSome, ChangedKeys: changed, ReplaceKeys: replace,
		DetailedDiff: detailed, DeleteBeforeReplace: string(req.Type) == tokDroplet}, nil
}

func (p *provider) Create(ctx context.Context, req plugin.CreateRequest) (plugin.CreateResponse, error) {
	in := req.Properties
	if req.Preview {
		return plugin.CreateResponse{Properties: in}, nil
	}
	var id string
	var err error
	switch req.Type {
	case tokDroplet:
		id, err = p.createDroplet(ctx, in)
	case tokFirewall:
		var fw *godo.Firewall
		fw, _, err = p.do.Firewalls.Create(ctx, firewallRequest(in))
		if fw != nil {
			id = fw.ID
		}
	case tokVolume:
		var v *godo.Volume
		v, _, err = p.do.Storage.CreateVolume(ctx, &godo.VolumeCreateRequest{
			Name: str(in, "name"), Region: str(in, "region"), SizeGigaBytes: int64(num(in, "size")),
			Description: str(in, "description"), Tags: strs(in, "tags"),
		})
		if v != nil {
			id = v.ID
		}
	default:
		return plugin.CreateResponse{}, fmt.Errorf("unknown resource type %s", req.Type)
	}
	if err != nil {
		return plugin.CreateResponse{}, err
	}
	rr, err := p.read(ctx, string(req.Type), id, in)
	if err != nil {
		return plugin.CreateResponse{}, err
	}
	if rr.ID == "" {
		return plugin.CreateResponse{}, fmt.Errorf("%s %s vanished after creation", req.Type, id)
	}
	return plugin.CreateResponse{ID: resource.ID(id), Properties: rr.Outputs, Status: resource.StatusOK}, nil
}

func (p *provider) createDroplet(ctx context.Context, in resource.PropertyMap) (string, error) {
	r := &godo.DropletCreateRequest{
		Name: str(in, "name"), Region: str(in, "region"), Size: str(in, "size"),
		Image: godo.DropletCreateImage{Slug: str(in, "image")}, Tags: strs(in, "tags"), UserData: str(in, "userData"),
	}
	for _, k := range strs(in, "sshKeys") {
		r.SSHKeys = append(r.SSHKeys, godo.DropletCreateSSHKey{Fingerprint: k})
	}
	for _, v := range strs(in, "volumeIds") {
		r.Volumes = append(r.Volumes, godo.DropletCreateVolume{ID: v})
	}
	d, _, err := p.do.Droplets.Create(ctx, r)
	if err != nil {
		return "", err
	}
	return strconv.Itoa(d.ID), nil
}

func (p *provider) Read(ctx context.Context, req plugin.ReadRequest) (plugin.ReadResponse, error) {
	rr, err := p.read(ctx, string(req.Type), string(req.ID), req.Inputs)
	if err != nil {
		return plugin.ReadResponse{}, err
	}
	return plugin.ReadResponse{ReadResult: rr, Status: resource.StatusOK}, nil
}

// read fetches a resource and answers its inputs and outputs; a resource
// the API no longer has answers an empty ID. old are the inputs known so
// far (none on import): what the API never returns (a droplet's SSH keys
// and user data) is kept from them.
func (p *provider) read(ctx context.Context, typ, id string, old resource.PropertyMap) (plugin.ReadResult, error) {
	var in, out map[string]any
	switch typ {
	case tokDroplet:
		n, err := strconv.Atoi(id)
		if err != nil {
			return plugin.ReadResult{}, fmt.Errorf("droplet id %q is not a number", id)
		}
		d, resp, err := p.do.Droplets.Get(ctx, n)
		if gone(resp) {
			return plugin.ReadResult{}, nil
		}
		if err != nil {
			return plugin.ReadResult{}, err
		}
		tags := slices.Clone(d.Tags)
		sort.Strings(tags)
		in = map[string]any{"name": d.Name, "region": d.Region.Slug, "size": d.SizeSlug, "image": d.Image.Slug,
			"tags": anys(tags), "volumeIds": anys(d.VolumeIDs)}
		for _, k := range []string{"sshKeys", "userData"} {
			if v, ok := old[resource.PropertyKey(k)]; ok {
				in[k] = v.Mappable()
			}
		}
		pub, _ := d.PublicIPv4()
		priv, _ := d.PrivateIPv4()
		out = map[string]any{"ipv4Address": pub, "ipv4AddressPrivate": priv, "status": d.Status,
			"dropletUrn": d.URN(), "createdAt": d.Created, "priceHourly": d.Size.PriceHourly}
	case tokFirewall:
		f, resp, err := p.do.Firewalls.Get(ctx, id)
		if gone(resp) {
			return plugin.ReadResult{}, nil
		}
		if err != nil {
			return plugin.ReadResult{}, err
		}
		var inbound, outbound []any
		for _, r := range f.InboundRules {
			var src []string
			if r.Sources != nil {
				src = r.Sources.Addresses
			}
			inbound = append(inbound, map[string]any{"protocol": r.Protocol, "portRange": r.PortRange, "sourceAddresses": anys(src)})
		}
		for _, r := range f.OutboundRules {
			var dst []string
			if r.Destinations != nil {
				dst = r.Destinations.Addresses
			}
			rule := map[string]any{"protocol": r.Protocol, "destinationAddresses": anys(dst)}
			if r.PortRange != "" {
				rule["portRange"] = r.PortRange
			}
			outbound = append(outbound, rule)
		}
		ids := make([]any, 0, len(f.DropletIDs))
		for _, d := range f.DropletIDs {
			ids = append(ids, float64(d))
		}
		in = map[string]any{"name": f.Name, "dropletIds": ids, "inboundRules": inbound, "outboundRules": outbound}
		if len(f.Tags) > 0 {
			tags := slices.Clone(f.Tags)
			sort.Strings(tags)
			in["tags"] = anys(tags)
		}
		out = map[string]any{"status": f.Status, "createdAt": f.Created}
	case tokVolume:
		v, resp, err := p.do.Storage.GetVolume(ctx, id)
		if gone(resp) {
			return plugin.ReadResult{}, nil
		}
		if err != nil {
			return plugin.ReadResult{}, err
		}
		tags := slices.Clone(v.Tags)
		sort.Strings(tags)
		in = map[string]any{"name": v.Name, "region": v.Region.Slug, "size": float64(v.SizeGigaBytes), "tags": anys(tags)}
		if d, ok := old["description"]; ok {
			in["description"] = d.Mappable()
		}
		ids := make([]any, 0, len(v.DropletIDs))
		for _, d := range v.DropletIDs {
			ids = append(ids, float64(d))
		}
		out = map[string]any{"dropletIds": ids, "volumeUrn": v.URN(), "filesystemType": v.FilesystemType}
	default:
		return plugin.ReadResult{}, fmt.Errorf("unknown resource type %s", typ)
	}
	for k, v := range in {
		out[k] = v
	}
	return plugin.ReadResult{ID: resource.ID(id), Inputs: resource.NewPropertyMapFromMap(in),
		Outputs: resource.NewPropertyMapFromMap(out)}, nil
}

func (p *provider) Update(ctx context.Context, req plugin.UpdateRequest) (plugin.UpdateResponse, error) {
	in := req.NewInputs
	if req.Preview {
		return plugin.UpdateResponse{Properties: in}, nil
	}
	id := string(req.ID)
	switch req.Type {
	case tokDroplet:
		n, _ := strconv.Atoi(id)
		if err := p.retag(ctx, id, godo.DropletResourceType, strs(req.OldOutputs, "tags"), strs(in, "tags")); err != nil {
			return plugin.UpdateResponse{}, err
		}
		oldVols, newVols := strs(req.OldOutputs, "volumeIds"), strs(in, "volumeIds")
		for _, v := range oldVols {
			if !slices.Contains(newVols, v) {
				if _, _, err := p.do.StorageActions.DetachByDropletID(ctx, v, n); err != nil {
					return plugin.UpdateResponse{}, err
				}
			}
		}
		for _, v := range newVols {
			if !slices.Contains(oldVols, v) {
				if _, _, err := p.do.StorageActions.Attach(ctx, v, n); err != nil {
					return plugin.UpdateResponse{}, err
				}
			}
		}
	case tokFirewall:
		if _, _, err := p.do.Firewalls.Update(ctx, id, firewallRequest(in)); err != nil {
			return plugin.UpdateResponse{}, err
		}
	case tokVolume:
		if err := p.retag(ctx, id, godo.VolumeResourceType, strs(req.OldOutputs, "tags"), strs(in, "tags")); err != nil {
			return plugin.UpdateResponse{}, err
		}
	}
	rr, err := p.read(ctx, string(req.Type), id, in)
	if err != nil {
		return plugin.UpdateResponse{}, err
	}
	return plugin.UpdateResponse{Properties: rr.Outputs, Status: resource.StatusOK}, nil
}

func (p *provider) retag(ctx context.Context, id string, typ godo.ResourceType, old, new []string) error {
	res := []godo.Resource{{ID: id, Type: typ}}
	for _, t := range new {
		if !slices.Contains(old, t) {
			if _, _, err := p.do.Tags.Create(ctx, &godo.TagCreateRequest{Name: t}); err != nil {
				return err
			}
			if _, err := p.do.Tags.TagResources(ctx, t, &godo.TagResourcesRequest{Resources: res}); err != nil {
				return err
			}
		}
	}
	for _, t := range old {
		if !slices.Contains(new, t) {
			if _, err := p.do.Tags.UntagResources(ctx, t, &godo.UntagResourcesRequest{Resources: res}); err != nil {
				return err
			}
		}
	}
	return nil
}

func (p *provider) Delete(ctx context.Context, req plugin.DeleteRequest) (plugin.DeleteResponse, error) {
	id := string(req.ID)
	var resp *godo.Response
	var err error
	switch req.Type {
	case tokDroplet:
		n, _ := strconv.Atoi(id)
		// The real provider first waits for the droplet to be unlocked,
		// reading it: a droplet already gone fails the delete there
		// ("Error waiting for droplet to be unlocked for destroy"), so a
		// destroy must refresh first to count it as deleted.
		if _, gr, gerr := p.do.Droplets.Get(ctx, n); gerr != nil {
			if gone(gr) {
				return plugin.DeleteResponse{}, fmt.Errorf("waiting for droplet to be unlocked for destroy (%s): retrieving droplet: 404 Not Found", id)
			}
			return plugin.DeleteResponse{}, gerr
		}
		resp, err = p.do.Droplets.Delete(ctx, n)
	case tokFirewall:
		resp, err = p.do.Firewalls.Delete(ctx, id)
	case tokVolume:
		resp, err = p.do.Storage.DeleteVolume(ctx, id)
	default:
		return plugin.DeleteResponse{}, fmt.Errorf("unknown resource type %s", req.Type)
	}
	if err != nil && !gone(resp) {
		return plugin.DeleteResponse{}, err
	}
	return plugin.DeleteResponse{Status: resource.StatusOK}, nil
}

func firewallRequest(in resource.PropertyMap) *godo.FirewallRequest {
	r := &godo.FirewallRequest{Name: str(in, "name"), Tags: strs(in, "tags")}
	for _, v := range list(in, "dropletIds") {
		if v.IsNumber() {
			r.DropletIDs = append(r.DropletIDs, int(v.NumberValue()))
		}
	}
	for _, v := range list(in, "inboundRules") {
		if v.IsObject() {
			m := v.ObjectValue()
			r.InboundRules = append(r.InboundRules, godo.InboundRule{Protocol: str(m, "protocol"), PortRange: str(m, "portRange"),
				Sources: &godo.Sources{Addresses: strs(m, "sourceAddresses")}})
		}
	}
	for _, v := range list(in, "outboundRules") {
		if v.IsObject() {
			m := v.ObjectValue()
			r.OutboundRules = append(r.OutboundRules, godo.OutboundRule{Protocol: str(m, "protocol"), PortRange: str(m, "portRange"),
				Destinations: &godo.Destinations{Addresses: strs(m, "destinationAddresses")}})
		}
	}
	return r
}

func gone(resp *godo.Response) bool { return resp != nil && resp.StatusCode == http.StatusNotFound }

func str(m resource.PropertyMap, k string) string {
	if v, ok := m[resource.PropertyKey(k)]; ok && v.IsString() {
		return v.StringValue()
	}
	return ""
}

func num(m resource.PropertyMap, k string) float64 {
	if v, ok := m[resource.PropertyKey(k)]; ok && v.IsNumber() {
		return v.NumberValue()
	}
	return 0
}

func list(m resource.PropertyMap, k string) []resource.PropertyValue {
	if v, ok := m[resource.PropertyKey(k)]; ok && v.IsArray() {
		return v.ArrayValue()
	}
	return nil
}

func strs(m resource.PropertyMap, k string) []string {
	var out []string
	for _, v := range list(m, k) {
		if v.IsString() {
			out = append(out, v.StringValue())
		}
	}
	return out
}

func anys(ss []string) []any {
	out := make([]any, 0, len(ss))
	for _, s := range ss {
		out = append(out, s)
	}
	return out
}
