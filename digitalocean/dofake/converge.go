package dofake

import (
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"time"
)

// The routes converge's Pulumi program drives through the DigitalOcean
// provider (docs/operations.md, "Converge"): volume writes and actions,
// firewalls and tags. Shapes follow the public API v2.

// Firewall is a cloud firewall the server holds.
type Firewall struct {
	// ID is a UUID-shaped id.
	ID string
	// Name is the firewall's name.
	Name string
	// InboundRules and OutboundRules are the rules as sent.
	InboundRules  []FirewallRule
	OutboundRules []FirewallRule
	// DropletIDs are the droplets it applies to.
	DropletIDs []int
	// Tags are the tags it applies to.
	Tags []string
	// CreatedAt is the server clock when it was created.
	CreatedAt time.Time
}

// FirewallRule is one inbound or outbound rule. Addresses are the
// sources (inbound) or destinations (outbound).
type FirewallRule struct {
	// Protocol is "tcp", "udp" or "icmp".
	Protocol string
	// Ports is "22", "8000-9000", "all" or "" (icmp).
	Ports string
	// Addresses are IPv4/IPv6 addresses or CIDR blocks.
	Addresses []string
}

func (f *Firewall) clone() Firewall {
	c := *f
	c.InboundRules = cloneRules(f.InboundRules)
	c.OutboundRules = cloneRules(f.OutboundRules)
	c.DropletIDs = slices.Clone(f.DropletIDs)
	c.Tags = slices.Clone(f.Tags)
	return c
}

func cloneRules(rs []FirewallRule) []FirewallRule {
	out := make([]FirewallRule, len(rs))
	for i, r := range rs {
		out[i] = r
		out[i].Addresses = slices.Clone(r.Addresses)
	}
	return out
}

// Firewalls returns every firewall the server holds, by id.
func (s *Server) Firewalls() []Firewall {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Firewall, 0, len(s.firewalls))
	for _, f := range s.firewalls {
		out = append(out, f.clone())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Volumes returns every volume the server holds, by id.
func (s *Server) Volumes() []Volume {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Volume, 0, len(s.volumes))
	for _, v := range s.volumes {
		out = append(out, v.clone())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// RemoveFirewall deletes a firewall behind chalupa's back; a missing id is
// a no-op.
func (s *Server) RemoveFirewall(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.firewalls, id)
}

func decode(r *http.Request, v any) *answer {
	if err := json.NewDecoder(http.MaxBytesReader(nil, r.Body, 1<<20)).Decode(v); err != nil {
		a := answer{status: http.StatusBadRequest, body: apiError{ID: "bad_request", Message: "The request body is not valid JSON."}}
		return &a
	}
	return nil
}

func (s *Server) newUUID(kind byte) string {
	s.actionSeq++
	return fmt.Sprintf("%08x-e098-11e5-ad9f-%c%011d", s.clock.Now().Unix(), kind, s.actionSeq)
}

func (s *Server) createVolume(r *http.Request, _ *tokenState) answer {
	var req struct {
		Name           string   `json:"name"`
		Region         string   `json:"region"`
		SizeGigabytes  int64    `json:"size_gigabytes"`
		Description    string   `json:"description"`
		FilesystemType string   `json:"filesystem_type"`
		Tags           []string `json:"tags"`
	}
	if a := decode(r, &req); a != nil {
		return *a
	}
	switch {
	case !volumeName.MatchString(req.Name):
		return unprocessable("name must be lowercase letters, digits and dashes, starting with a letter")
	case req.Region == "":
		return unprocessable("region is required")
	case req.SizeGigabytes < 1 || req.SizeGigabytes > 16384:
		return unprocessable("size_gigabytes must be between 1 and 16384")
	}
	for _, v := range s.volumes {
		if v.Name == req.Name && v.Region == req.Region {
			return answer{status: http.StatusConflict, body: apiError{ID: "conflict", Message: "a volume with this name already exists in the region"}}
		}
	}
	for _, tag := range req.Tags {
		if !ValidTag(tag) {
			return unprocessable("tag names must only contain letters, numbers, colons, dashes and underscores")
		}
	}
	tags := req.Tags
	if tags == nil {
		tags = NoTags
	}
	id := s.newUUID('v')
	now := s.clock.Now().UTC().Truncate(time.Second)
	s.volumes[id] = &Volume{ID: id, Name: req.Name, Region: req.Region, SizeGiB: req.SizeGigabytes,
		Tags: slices.Clone(tags), DropletIDs: []int{}, CreatedAt: now}
	return answer{status: http.StatusCreated, body: map[string]any{"volume": s.volumeWire(s.volumes[id])}}
}

func (s *Server) deleteVolume(r *http.Request, _ *tokenState) answer {
	v := s.volumes[r.PathValue("id")]
	if v == nil {
		return errAnswer(http.StatusNotFound)
	}
	if len(v.DropletIDs) > 0 {
		return answer{status: http.StatusConflict, body: apiError{ID: "conflict", Message: "volume is currently attached to a droplet: detach it first"}}
	}
	delete(s.volumes, v.ID)
	return answer{status: http.StatusNoContent}
}

func (s *Server) volumeAction(r *http.Request, _ *tokenState) answer {
	v := s.volumes[r.PathValue("id")]
	if v == nil {
		return errAnswer(http.StatusNotFound)
	}
	var req struct {
		Type      string `json:"type"`
		DropletID int    `json:"droplet_id"`
		Region    string `json:"region"`
	}
	if a := decode(r, &req); a != nil {
		return *a
	}
	d := s.droplets[req.DropletID]
	if d == nil {
		return errAnswer(http.StatusNotFound)
	}
	var kind string
	switch req.Type {
	case "attach":
		if d.Region != v.Region {
			return unprocessable("volume and droplet are in different regions")
		}
		if len(v.DropletIDs) > 0 && v.DropletIDs[0] != d.ID {
			return unprocessable("volume is already attached to another droplet")
		}
		v.DropletIDs = []int{d.ID}
		if !slices.Contains(d.VolumeIDs, v.ID) {
			d.VolumeIDs = append(d.VolumeIDs, v.ID)
		}
		kind = "attach_volume"
	case "detach":
		if !slices.Contains(v.DropletIDs, d.ID) {
			return unprocessable("volume is not attached to this droplet")
		}
		v.DropletIDs = slices.DeleteFunc(v.DropletIDs, func(id int) bool { return id == d.ID })
		d.VolumeIDs = slices.DeleteFunc(d.VolumeIDs, func(id string) bool { return id == v.ID })
		kind = "detach_volume"
	default:
		return unprocessable("unknown action type")
	}
	s.actionSeq++
	now := s.clock.Now().UTC().Format(time.RFC3339)
	return answer{status: http.StatusAccepted, body: map[string]any{"action": map[string]any{
		"id": 72531856 + s.actionSeq, "status": "completed", "type": kind, "started_at": now, "completed_at": now,
		"resource_id": 0, "resource_type": "volume", "region_slug": v.Region,
	}}}
}

// firewallJSON is the API's firewall shape.
type firewallJSON struct {
	ID             string             `json:"id"`
	Name           string             `json:"name"`
	Status         string             `json:"status"`
	InboundRules   []inboundRuleJSON  `json:"inbound_rules"`
	OutboundRules  []outboundRuleJSON `json:"outbound_rules"`
	CreatedAt      string             `json:"created_at"`
	DropletIDs     []int              `json:"droplet_ids"`
	Tags           []string           `json:"tags"`
	PendingChanges []struct{}         `json:"pending_changes"`
}

type endpointsJSON struct {
	Addresses        []string `json:"addresses,omitempty"`
	DropletIDs       []int    `json:"droplet_ids,omitempty"`
	Tags             []string `json:"tags,omitempty"`
	LoadBalancerUIDs []string `json:"load_balancer_uids,omitempty"`
}

type inboundRuleJSON struct {
	Protocol  string         `json:"protocol"`
	PortRange string         `json:"ports"`
	Sources   *endpointsJSON `json:"sources"`
}

type outboundRuleJSON struct {
	Protocol     string         `json:"protocol"`
	PortRange    string         `json:"ports"`
	Destinations *endpointsJSON `json:"destinations"`
}

type firewallRequest struct {
	Name          string             `json:"name"`
	InboundRules  []inboundRuleJSON  `json:"inbound_rules"`
	OutboundRules []outboundRuleJSON `json:"outbound_rules"`
	DropletIDs    []int              `json:"droplet_ids"`
	Tags          []string           `json:"tags"`
}

// apply validates a firewall request and stores it into f. Called with
// s.mu held.
func (s *Server) applyFirewall(req firewallRequest, f *Firewall) *answer {
	if req.Name == "" || !hostname.MatchString(req.Name) {
		a := unprocessable("name must contain only letters, digits, dots and dashes")
		return &a
	}
	if len(req.InboundRules) == 0 && len(req.OutboundRules) == 0 {
		a := unprocessable("at least one rule must be specified")
		return &a
	}
	for _, id := range req.DropletIDs {
		if s.droplets[id] == nil {
			a := unprocessable("droplet %d not found", id)
			return &a
		}
	}
	f.Name = req.Name
	f.InboundRules, f.OutboundRules = nil, nil
	for _, r := range req.InboundRules {
		var addrs []string
		if r.Sources != nil {
			addrs = slices.Clone(r.Sources.Addresses)
		}
		f.InboundRules = append(f.InboundRules, FirewallRule{Protocol: r.Protocol, Ports: r.PortRange, Addresses: addrs})
	}
	for _, r := range req.OutboundRules {
		var addrs []string
		if r.Destinations != nil {
			addrs = slices.Clone(r.Destinations.Addresses)
		}
		f.OutboundRules = append(f.OutboundRules, FirewallRule{Protocol: r.Protocol, Ports: r.PortRange, Addresses: addrs})
	}
	f.DropletIDs = slices.Clone(req.DropletIDs)
	f.Tags = slices.Clone(req.Tags)
	return nil
}

// Called with s.mu held.
func (s *Server) firewallWire(f *Firewall) firewallJSON {
	out := firewallJSON{ID: f.ID, Name: f.Name, Status: "succeeded", CreatedAt: f.CreatedAt.UTC().Format(time.RFC3339),
		InboundRules: []inboundRuleJSON{}, OutboundRules: []outboundRuleJSON{}, DropletIDs: []int{}, Tags: []string{},
		PendingChanges: []struct{}{}}
	for _, r := range f.InboundRules {
		out.InboundRules = append(out.InboundRules, inboundRuleJSON{Protocol: r.Protocol, PortRange: r.Ports,
			Sources: &endpointsJSON{Addresses: slices.Clone(r.Addresses)}})
	}
	for _, r := range f.OutboundRules {
		out.OutboundRules = append(out.OutboundRules, outboundRuleJSON{Protocol: r.Protocol, PortRange: r.Ports,
			Destinations: &endpointsJSON{Addresses: slices.Clone(r.Addresses)}})
	}
	out.DropletIDs = append(out.DropletIDs, f.DropletIDs...)
	out.Tags = append(out.Tags, f.Tags...)
	return out
}

func (s *Server) createFirewall(r *http.Request, _ *tokenState) answer {
	var req firewallRequest
	if a := decode(r, &req); a != nil {
		return *a
	}
	f := &Firewall{ID: s.newUUID('f'), CreatedAt: s.clock.Now().UTC().Truncate(time.Second)}
	if a := s.applyFirewall(req, f); a != nil {
		return *a
	}
	s.firewalls[f.ID] = f
	return answer{status: http.StatusAccepted, body: map[string]any{"firewall": s.firewallWire(f)}}
}

func (s *Server) listFirewalls(r *http.Request, _ *tokenState) answer {
	fs := make([]*Firewall, 0, len(s.firewalls))
	for _, f := range s.firewalls {
		fs = append(fs, f)
	}
	sort.Slice(fs, func(i, j int) bool { return fs[i].ID < fs[j].ID })
	lo, hi, links, meta := s.page(r, len(fs))
	out := []firewallJSON{}
	for _, f := range fs[lo:hi] {
		out = append(out, s.firewallWire(f))
	}
	return answer{status: http.StatusOK, body: map[string]any{"firewalls": out, "links": links, "meta": meta}}
}

func (s *Server) getFirewall(r *http.Request, _ *tokenState) answer {
	f := s.firewalls[r.PathValue("id")]
	if f == nil {
		return errAnswer(http.StatusNotFound)
	}
	return answer{status: http.StatusOK, body: map[string]any{"firewall": s.firewallWire(f)}}
}

func (s *Server) updateFirewall(r *http.Request, _ *tokenState) answer {
	f := s.firewalls[r.PathValue("id")]
	if f == nil {
		return errAnswer(http.StatusNotFound)
	}
	var req firewallRequest
	if a := decode(r, &req); a != nil {
		return *a
	}
	next := f.clone()
	if a := s.applyFirewall(req, &next); a != nil {
		return *a
	}
	*f = next
	return answer{status: http.StatusOK, body: map[string]any{"firewall": s.firewallWire(f)}}
}

func (s *Server) deleteFirewall(r *http.Request, _ *tokenState) answer {
	if s.firewalls[r.PathValue("id")] == nil {
		return errAnswer(http.StatusNotFound)
	}
	delete(s.firewalls, r.PathValue("id"))
	return answer{status: http.StatusNoContent}
}

func (s *Server) createTag(r *http.Request, _ *tokenState) answer {
	var req struct {
		Name string `json:"name"`
	}
	if a := decode(r, &req); a != nil {
		return *a
	}
	if !ValidTag(req.Name) {
		return unprocessable("tag names must only contain letters, numbers, colons, dashes and underscores")
	}
	s.tags[req.Name] = true
	return answer{status: http.StatusCreated, body: map[string]any{"tag": map[string]any{
		"name": req.Name, "resources": map[string]any{"count": 0},
	}}}
}

type tagResourcesRequest struct {
	Resources []struct {
		ID   string `json:"resource_id"`
		Type string `json:"resource_type"`
	} `json:"resources"`
}

// retag adds (add) or removes a tag on the droplets and volumes a request
// names. Called with s.mu held.
func (s *Server) retag(r *http.Request, add bool) answer {
	tag := r.PathValue("name")
	if !ValidTag(tag) {
		return errAnswer(http.StatusNotFound)
	}
	var req tagResourcesRequest
	if a := decode(r, &req); a != nil {
		return *a
	}
	edit := func(tags []string) []string {
		tags = slices.DeleteFunc(tags, func(t string) bool { return t == tag })
		if add {
			tags = append(tags, tag)
		}
		return tags
	}
	for _, res := range req.Resources {
		switch res.Type {
		case "droplet":
			id, err := strconv.Atoi(res.ID)
			if err != nil || s.droplets[id] == nil {
				return unprocessable("droplet %s not found", res.ID)
			}
			s.droplets[id].Tags = edit(s.droplets[id].Tags)
		case "volume":
			v := s.volumes[res.ID]
			if v == nil {
				return unprocessable("volume %s not found", res.ID)
			}
			v.Tags = edit(v.Tags)
		default:
			return unprocessable("resource_type %q is not supported by this test server", res.Type)
		}
	}
	if add {
		s.tags[tag] = true
	}
	return answer{status: http.StatusNoContent}
}

func (s *Server) tagResources(r *http.Request, _ *tokenState) answer   { return s.retag(r, true) }
func (s *Server) untagResources(r *http.Request, _ *tokenState) answer { return s.retag(r, false) }

// volumeName is the API's rule for volume names: lowercase letters, digits
// and dashes, starting with a letter, at most 64 characters.
var volumeName = regexp.MustCompile(`^[a-z][a-z0-9-]{0,63}$`)
