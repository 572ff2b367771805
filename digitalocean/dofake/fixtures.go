package dofake

import (
	"fmt"
	"regexp"
	"slices"
	"time"
)

// Fixture defaults (AddDroplet, AddVolume).
const (
	// DefaultRegion is the region of a droplet or volume that names none.
	DefaultRegion = "nyc3"
	// DefaultSize is the size slug of a droplet that names none.
	DefaultSize = "s-1vcpu-1gb"
	// DefaultImage is the image slug of a droplet that names none.
	DefaultImage = "ubuntu-24-04-x64"
	// DefaultTag is the tag of a droplet or volume whose Tags is nil:
	// chalupa's own tag, so a fixture is chalupa's unless a test says
	// otherwise. Pass NoTags for an untagged one.
	DefaultTag = "chalupa"
	// DefaultVolumeGiB is the size of a volume that names none.
	DefaultVolumeGiB = 100
	// firstDropletID is the first id handed out: large, like real ids, and
	// never 0 (which chalupa reads as "unknown droplet").
	firstDropletID = 400000001
)

// NoTags is a Tags value for a fixture without any tag (nil means
// DefaultTag).
var NoTags = []string{}

// EnvTags returns chalupa's tags for a droplet of environment slug:
// "chalupa" and "chalupa:env:<slug>" (docs/operations.md, "DigitalOcean
// API").
func EnvTags(slug string) []string { return []string{DefaultTag, "chalupa:env:" + slug} }

// tagName is DigitalOcean's rule for tag names: letters, digits, ':', '-'
// and '_', at most 255 characters.
var tagName = regexp.MustCompile(`^[A-Za-z0-9:_-]{1,255}$`)

// ValidTag reports whether DigitalOcean accepts name as a tag name.
func ValidTag(name string) bool { return tagName.MatchString(name) }

// Droplet is a droplet the server holds. Zero fields of a fixture get
// defaults (AddDroplet).
type Droplet struct {
	// ID is unique; 0 assigns the next free id.
	ID int
	// Name defaults to "droplet-<id>".
	Name string
	// Region is a region slug (DefaultRegion).
	Region string
	// Size is a size slug of the catalogue (DefaultSize); its vcpus,
	// memory, disk and prices are what the droplet reports.
	Size string
	// Image is an image slug (DefaultImage).
	Image string
	// Status is "new", "active", "off" or "archive" (default "active").
	Status string
	// Tags defaults to [DefaultTag] when nil; NoTags means none.
	Tags []string
	// VolumeIDs are attached volumes.
	VolumeIDs []string
	// SSHKeys are the key ids or fingerprints given at creation (the API
	// never returns them; tests read them here).
	SSHKeys []string
	// UserData is the cloud-init user data given at creation.
	UserData string
	// PublicIPv4 is the droplet's public IPv4 address; "" means the
	// server's (WithPublicIPv4, else 203.0.113.<n>). A machine backend
	// sets it to the booted machine's own address (SetPublicIPv4).
	PublicIPv4 string
	// CreatedAt defaults to the server clock's now.
	CreatedAt time.Time
}

func (d *Droplet) clone() Droplet {
	c := *d
	c.Tags = slices.Clone(d.Tags)
	c.VolumeIDs = slices.Clone(d.VolumeIDs)
	c.SSHKeys = slices.Clone(d.SSHKeys)
	return c
}

// HasTag reports whether the droplet carries tag.
func (d Droplet) HasTag(tag string) bool { return slices.Contains(d.Tags, tag) }

// AddDroplet stores a droplet, filling zero fields with defaults, and
// returns it as stored. It panics on a taken id, an unknown size or an
// invalid tag (a broken fixture, not a test outcome).
func (s *Server) AddDroplet(d Droplet) Droplet {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addDroplet(d)
}

func (s *Server) addDroplet(d Droplet) Droplet {
	if d.ID == 0 {
		for s.droplets[s.nextID] != nil {
			s.nextID++
		}
		d.ID = s.nextID
		s.nextID++
	}
	if s.droplets[d.ID] != nil {
		panic(fmt.Sprintf("dofake: droplet %d exists", d.ID))
	}
	if d.Name == "" {
		d.Name = fmt.Sprintf("droplet-%d", d.ID)
	}
	if d.Region == "" {
		d.Region = DefaultRegion
	}
	if d.Size == "" {
		d.Size = DefaultSize
	}
	if _, ok := s.sizes[d.Size]; !ok {
		panic(fmt.Sprintf("dofake: unknown size %q (add it with SetSize)", d.Size))
	}
	if d.Image == "" {
		d.Image = DefaultImage
	}
	if d.Status == "" {
		d.Status = "active"
	}
	if d.Tags == nil {
		d.Tags = []string{DefaultTag}
	}
	for _, tag := range d.Tags {
		if !ValidTag(tag) {
			panic(fmt.Sprintf("dofake: invalid tag %q", tag))
		}
	}
	if d.CreatedAt.IsZero() {
		d.CreatedAt = s.clock.Now()
	}
	d.CreatedAt = d.CreatedAt.UTC().Truncate(time.Second)
	c := d.clone()
	s.droplets[d.ID] = &c
	return d.clone()
}

// RemoveDroplet deletes a droplet behind chalupa's back (destroyed in the
// control panel); a missing id is a no-op.
func (s *Server) RemoveDroplet(id int) {
	s.mu.Lock()
	s.forgetDroplet(id)
	s.mu.Unlock()
	s.runDeleted()
}

// runDeleted runs the WithOnDelete hook for every droplet forgotten since
// the last call, without the server's lock.
func (s *Server) runDeleted() {
	s.mu.Lock()
	gone, f := s.deleted, s.onDelete
	s.deleted = nil
	s.mu.Unlock()
	for _, d := range gone {
		f(d)
	}
}

// SetStatus sets a droplet's status ("new", "active", "off", "archive"),
// as the platform does when the machine behind it starts or stops; it
// reports whether the droplet exists.
func (s *Server) SetStatus(id int, status string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.droplets[id]
	if d == nil {
		return false
	}
	d.Status = status
	return true
}

// SetPublicIPv4 sets a droplet's public IPv4 address (Droplet.PublicIPv4);
// it reports whether the droplet exists.
func (s *Server) SetPublicIPv4(id int, addr string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.droplets[id]
	if d == nil {
		return false
	}
	d.PublicIPv4 = addr
	return true
}

// forgetDroplet deletes a droplet the way the API does: its volumes are
// detached and it leaves every firewall. Called with s.mu held; the
// droplet is queued for the WithOnDelete hook (runDeleted).
func (s *Server) forgetDroplet(id int) {
	if d := s.droplets[id]; d != nil && s.onDelete != nil {
		s.deleted = append(s.deleted, d.clone())
	}
	delete(s.droplets, id)
	for _, v := range s.volumes {
		v.DropletIDs = slices.DeleteFunc(v.DropletIDs, func(d int) bool { return d == id })
	}
	for _, f := range s.firewalls {
		f.DropletIDs = slices.DeleteFunc(f.DropletIDs, func(d int) bool { return d == id })
	}
}

// Volume is a block-storage volume the server holds. Zero fields of a
// fixture get defaults (AddVolume).
type Volume struct {
	// ID is unique; "" assigns a fresh UUID-shaped id.
	ID string
	// Name defaults to "volume-<n>".
	Name string
	// Region is a region slug (DefaultRegion).
	Region string
	// SizeGiB is size_gigabytes (DefaultVolumeGiB).
	SizeGiB int64
	// Tags defaults to [DefaultTag] when nil; NoTags means none.
	Tags []string
	// DropletIDs are the droplets it is attached to.
	DropletIDs []int
	// CreatedAt defaults to the server clock's now.
	CreatedAt time.Time
}

func (v *Volume) clone() Volume {
	c := *v
	c.Tags = slices.Clone(v.Tags)
	c.DropletIDs = slices.Clone(v.DropletIDs)
	return c
}

// AddVolume stores a volume, filling zero fields with defaults, and returns
// it as stored. It panics on a taken id or an invalid tag.
func (s *Server) AddVolume(v Volume) Volume {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := len(s.volumes) + 1
	if v.ID == "" {
		v.ID = fmt.Sprintf("506f78a4-e098-11e5-ad9f-%012d", n)
	}
	if s.volumes[v.ID] != nil {
		panic(fmt.Sprintf("dofake: volume %s exists", v.ID))
	}
	if v.Name == "" {
		v.Name = fmt.Sprintf("volume-%d", n)
	}
	if v.Region == "" {
		v.Region = DefaultRegion
	}
	if v.SizeGiB == 0 {
		v.SizeGiB = DefaultVolumeGiB
	}
	if v.Tags == nil {
		v.Tags = []string{DefaultTag}
	}
	for _, tag := range v.Tags {
		if !ValidTag(tag) {
			panic(fmt.Sprintf("dofake: invalid tag %q", tag))
		}
	}
	if v.CreatedAt.IsZero() {
		v.CreatedAt = s.clock.Now()
	}
	v.CreatedAt = v.CreatedAt.UTC().Truncate(time.Second)
	c := v.clone()
	s.volumes[v.ID] = &c
	return v.clone()
}

// RemoveVolume deletes a volume behind chalupa's back; a missing id is a
// no-op.
func (s *Server) RemoveVolume(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.volumes, id)
}

// Size is a droplet size of the catalogue.
type Size struct {
	// Slug names the size ("s-1vcpu-1gb").
	Slug string
	// VCPUs, MemoryMiB and DiskGiB are the size's resources.
	VCPUs     int
	MemoryMiB int
	DiskGiB   int
	// TransferTiB is the included outbound transfer.
	TransferTiB float64
	// PriceMonthly (USD per month) and PriceHourly (USD per hour) are the
	// list prices.
	PriceMonthly float64
	PriceHourly  float64
	// Description is the control panel's name for the size's family.
	Description string
	// GPUs is the number of GPUs (0 for a CPU size); GPUModel names them.
	GPUs     int
	GPUModel string
	// Unavailable hides the size from new droplets (available: false).
	Unavailable bool
}

// DefaultSizes is the catalogue a new server starts with: a few basic
// sizes and one GPU size, with prices shaped like the public list (fixtures
// for arithmetic, not a statement of current prices).
func DefaultSizes() []Size {
	return []Size{
		{Slug: "s-1vcpu-1gb", VCPUs: 1, MemoryMiB: 1024, DiskGiB: 25, TransferTiB: 1, PriceMonthly: 6, PriceHourly: 0.00893, Description: "Basic"},
		{Slug: "s-1vcpu-2gb", VCPUs: 1, MemoryMiB: 2048, DiskGiB: 50, TransferTiB: 2, PriceMonthly: 12, PriceHourly: 0.01786, Description: "Basic"},
		{Slug: "s-2vcpu-4gb", VCPUs: 2, MemoryMiB: 4096, DiskGiB: 80, TransferTiB: 4, PriceMonthly: 24, PriceHourly: 0.03571, Description: "Basic"},
		{Slug: "s-4vcpu-8gb", VCPUs: 4, MemoryMiB: 8192, DiskGiB: 160, TransferTiB: 5, PriceMonthly: 48, PriceHourly: 0.07143, Description: "Basic"},
		{Slug: "gpu-h100x1-80gb", VCPUs: 20, MemoryMiB: 245760, DiskGiB: 720, TransferTiB: 15, PriceMonthly: 2522.16, PriceHourly: 3.39, Description: "H100 GPU - 1X", GPUs: 1, GPUModel: "nvidia_h100"},
	}
}

// SetSize adds a size to the catalogue or replaces the one with its slug
// (a price change).
func (s *Server) SetSize(sz Size) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sizes[sz.Slug] = sz
}

// Account is what GET /v2/account answers.
type Account struct {
	UUID          string
	Email         string
	Name          string
	TeamUUID      string
	TeamName      string
	DropletLimit  int
	VolumeLimit   int
	Status        string
	EmailVerified bool
}

func defaultAccount() Account {
	return Account{
		UUID: "b6fr89dbf6d9156cace5f3c78dc9851d957381ef", Email: "operator@example.com", Name: "Operator",
		TeamUUID: "5df3e3004a17e242b7c20ca6c9fc25b701a47ece", TeamName: "chalupa",
		DropletLimit: 25, VolumeLimit: 100, Status: "active", EmailVerified: true,
	}
}

// SetAccount replaces the account GET /v2/account answers.
func (s *Server) SetAccount(a Account) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.account = a
}
