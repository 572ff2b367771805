package dofake_test

import (
	"context"
	"net/http"
	"slices"
	"testing"

	"github.com/digitalocean/godo"

	"github.com/chalupa-run/chalupa/digitalocean/dofake"
)

// TestConvergeRoutes: godo drives the routes converge's provider uses —
// volumes, volume actions, firewalls, tags — and the server keeps the
// cross-references the real API keeps (a deleted droplet is detached and
// leaves its firewall; an attached volume cannot be deleted).
func TestConvergeRoutes(t *testing.T) {
	ctx := context.Background()
	s := dofake.New(t)
	c := godoClient(t, s, s.AddToken("provision", dofake.FullAccess...))

	vol, resp, err := c.Storage.CreateVolume(ctx, &godo.VolumeCreateRequest{
		Name: "box-1-data", Region: "nyc3", SizeGigaBytes: 50, Tags: []string{"chalupa", "chalupa:env:demo"},
	})
	if err != nil || resp.StatusCode != http.StatusCreated || vol.SizeGigaBytes != 50 || vol.Region.Slug != "nyc3" {
		t.Fatalf("create volume: %+v %v", vol, err)
	}
	t.Run("volume name taken", func(t *testing.T) {
		_, resp, err := c.Storage.CreateVolume(ctx, &godo.VolumeCreateRequest{Name: "box-1-data", Region: "nyc3", SizeGigaBytes: 1})
		if got := status(t, resp, err); got != http.StatusConflict {
			t.Errorf("status = %d, want 409", got)
		}
	})

	d, _, err := c.Droplets.Create(ctx, &godo.DropletCreateRequest{
		Name: "box-1", Region: "nyc3", Size: "s-1vcpu-1gb", Image: godo.DropletCreateImage{Slug: "ubuntu-24-04-x64"},
		SSHKeys: []godo.DropletCreateSSHKey{{Fingerprint: "aa:bb"}}, UserData: "#cloud-config\n",
		Volumes: []godo.DropletCreateVolume{{ID: vol.ID}}, Tags: []string{"chalupa"},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Run("droplet created with the volume attached", func(t *testing.T) {
		got, _, err := c.Droplets.Get(ctx, d.ID)
		if err != nil || !slices.Equal(got.VolumeIDs, []string{vol.ID}) {
			t.Fatalf("droplet volumes = %v (%v)", got.VolumeIDs, err)
		}
		v, _, _ := c.Storage.GetVolume(ctx, vol.ID)
		if !slices.Equal(v.DropletIDs, []int{d.ID}) {
			t.Errorf("volume droplets = %v", v.DropletIDs)
		}
		fx, _ := s.Droplet(d.ID)
		if !slices.Equal(fx.SSHKeys, []string{"aa:bb"}) || fx.UserData != "#cloud-config\n" {
			t.Errorf("fixture = %+v", fx)
		}
	})
	t.Run("attached volume cannot be deleted; detach, attach", func(t *testing.T) {
		resp, err := c.Storage.DeleteVolume(ctx, vol.ID)
		if got := status(t, resp, err); got != http.StatusConflict {
			t.Errorf("delete attached = %d, want 409", got)
		}
		a, _, err := c.StorageActions.DetachByDropletID(ctx, vol.ID, d.ID)
		if err != nil || a.Status != "completed" {
			t.Fatalf("detach: %+v %v", a, err)
		}
		if v, _, _ := c.Storage.GetVolume(ctx, vol.ID); len(v.DropletIDs) != 0 {
			t.Errorf("after detach: %v", v.DropletIDs)
		}
		if _, _, err := c.StorageActions.Attach(ctx, vol.ID, d.ID); err != nil {
			t.Fatal(err)
		}
		if got, _, _ := c.Droplets.Get(ctx, d.ID); !slices.Equal(got.VolumeIDs, []string{vol.ID}) {
			t.Errorf("after attach: %v", got.VolumeIDs)
		}
	})

	fw, resp, err := c.Firewalls.Create(ctx, &godo.FirewallRequest{
		Name: "box-1", DropletIDs: []int{d.ID},
		InboundRules: []godo.InboundRule{{Protocol: "tcp", PortRange: "22",
			Sources: &godo.Sources{Addresses: []string{"198.51.100.7/32", "203.0.113.9/32"}}}},
		OutboundRules: []godo.OutboundRule{{Protocol: "tcp", PortRange: "all",
			Destinations: &godo.Destinations{Addresses: []string{"0.0.0.0/0"}}}},
	})
	if err != nil || resp.StatusCode != http.StatusAccepted || fw.Status != "succeeded" {
		t.Fatalf("create firewall: %+v %v", fw, err)
	}
	t.Run("firewall read, list, update", func(t *testing.T) {
		got, _, err := c.Firewalls.Get(ctx, fw.ID)
		if err != nil || got.Name != "box-1" || !slices.Equal(got.DropletIDs, []int{d.ID}) ||
			!slices.Equal(got.InboundRules[0].Sources.Addresses, []string{"198.51.100.7/32", "203.0.113.9/32"}) {
			t.Fatalf("get firewall: %+v %v", got, err)
		}
		list, _, err := c.Firewalls.List(ctx, nil)
		if err != nil || len(list) != 1 {
			t.Errorf("list: %d %v", len(list), err)
		}
		up, _, err := c.Firewalls.Update(ctx, fw.ID, &godo.FirewallRequest{Name: "box-1", DropletIDs: []int{d.ID},
			InboundRules: []godo.InboundRule{{Protocol: "tcp", PortRange: "22", Sources: &godo.Sources{Addresses: []string{"198.51.100.8/32"}}}}})
		if err != nil || !slices.Equal(up.InboundRules[0].Sources.Addresses, []string{"198.51.100.8/32"}) {
			t.Errorf("update: %+v %v", up, err)
		}
	})
	t.Run("tags added and removed", func(t *testing.T) {
		if _, _, err := c.Tags.Create(ctx, &godo.TagCreateRequest{Name: "chalupa:job:j1"}); err != nil {
			t.Fatal(err)
		}
		req := &godo.TagResourcesRequest{Resources: []godo.Resource{{ID: itoa(d.ID), Type: godo.DropletResourceType}}}
		if _, err := c.Tags.TagResources(ctx, "chalupa:job:j1", req); err != nil {
			t.Fatal(err)
		}
		if got, _ := s.Droplet(d.ID); !got.HasTag("chalupa:job:j1") {
			t.Errorf("tags after tagging = %v", got.Tags)
		}
		if _, err := c.Tags.UntagResources(ctx, "chalupa:job:j1", &godo.UntagResourcesRequest{Resources: req.Resources}); err != nil {
			t.Fatal(err)
		}
		if got, _ := s.Droplet(d.ID); got.HasTag("chalupa:job:j1") {
			t.Errorf("tags after untagging = %v", got.Tags)
		}
	})
	t.Run("deleting the droplet detaches its volume and leaves the firewall", func(t *testing.T) {
		if _, err := c.Droplets.Delete(ctx, d.ID); err != nil {
			t.Fatal(err)
		}
		if v, _, _ := c.Storage.GetVolume(ctx, vol.ID); len(v.DropletIDs) != 0 {
			t.Errorf("volume still attached to %v", v.DropletIDs)
		}
		if f, _, _ := c.Firewalls.Get(ctx, fw.ID); len(f.DropletIDs) != 0 {
			t.Errorf("firewall still names %v", f.DropletIDs)
		}
		if _, err := c.Storage.DeleteVolume(ctx, vol.ID); err != nil {
			t.Errorf("delete detached volume: %v", err)
		}
		if _, err := c.Firewalls.Delete(ctx, fw.ID); err != nil {
			t.Errorf("delete firewall: %v", err)
		}
		if len(s.Volumes()) != 0 || len(s.Firewalls()) != 0 {
			t.Errorf("left: %v %v", s.Volumes(), s.Firewalls())
		}
	})
	t.Run("a read-only token cannot create", func(t *testing.T) {
		ro := godoClient(t, s, s.AddToken("ro", dofake.ReadOnly...))
		_, resp, err := ro.Firewalls.Create(ctx, &godo.FirewallRequest{Name: "x"})
		if got := status(t, resp, err); got != http.StatusForbidden {
			t.Errorf("status = %d, want 403", got)
		}
	})
}

func itoa(n int) string { return godo.Stringify(n) }

// TestOnCreateBootsBeforeTheAnswer: WithOnCreate runs once per droplet the
// API creates, with its user data, before the create is answered and
// without the server's lock (it can read the server); a fixture does not
// run it.
func TestOnCreateBootsBeforeTheAnswer(t *testing.T) {
	ctx := context.Background()
	var booted []dofake.Droplet
	var s *dofake.Server
	s = dofake.New(t, dofake.WithOnCreate(func(d dofake.Droplet) {
		if _, ok := s.Droplet(d.ID); !ok { // deadlocks if the lock were held
			t.Errorf("droplet %d not listed while it boots", d.ID)
		}
		booted = append(booted, d)
	}))
	s.AddDroplet(dofake.Droplet{})
	c := godoClient(t, s, s.AddToken("provision", dofake.FullAccess...))
	d, _, err := c.Droplets.Create(ctx, &godo.DropletCreateRequest{Name: "box-1", Region: "nyc3", Size: "s-1vcpu-1gb",
		Image: godo.DropletCreateImage{Slug: "ubuntu-24-04-x64"}, UserData: "#cloud-config\nruncmd: [[true]]\n"})
	if err != nil {
		t.Fatal(err)
	}
	if len(booted) != 1 || booted[0].ID != d.ID || booted[0].UserData != "#cloud-config\nruncmd: [[true]]\n" {
		t.Fatalf("booted %+v when the create of droplet %d was answered, want exactly it with its user data", booted, d.ID)
	}
}
