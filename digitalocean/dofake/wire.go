package dofake

import (
	"fmt"
	"slices"
	"sort"
	"time"
)

// The API's JSON shapes (public API v2), written out here rather than
// borrowed from godo so that a test of godo against this server checks
// godo's decoding, not a copy of it.

type linksJSON struct {
	Pages *pagesJSON `json:"pages,omitempty"`
}

type pagesJSON struct {
	First string `json:"first,omitempty"`
	Prev  string `json:"prev,omitempty"`
	Next  string `json:"next,omitempty"`
	Last  string `json:"last,omitempty"`
}

type metaJSON struct {
	Total int `json:"total"`
}

type regionJSON struct {
	Name      string   `json:"name"`
	Slug      string   `json:"slug"`
	Features  []string `json:"features"`
	Available bool     `json:"available"`
	Sizes     []string `json:"sizes"`
}

type imageJSON struct {
	ID            int      `json:"id"`
	Name          string   `json:"name"`
	Distribution  string   `json:"distribution"`
	Slug          string   `json:"slug"`
	Public        bool     `json:"public"`
	Regions       []string `json:"regions"`
	CreatedAt     string   `json:"created_at"`
	MinDiskSize   int      `json:"min_disk_size"`
	Type          string   `json:"type"`
	SizeGigabytes float64  `json:"size_gigabytes"`
	Description   string   `json:"description"`
	Tags          []string `json:"tags"`
	Status        string   `json:"status"`
	ErrorMessage  string   `json:"error_message"`
}

type diskInfoJSON struct {
	Type string `json:"type"`
	Size struct {
		Amount int    `json:"amount"`
		Unit   string `json:"unit"`
	} `json:"size"`
}

type gpuInfoJSON struct {
	Count int    `json:"count"`
	Model string `json:"model"`
	VRAM  struct {
		Amount int    `json:"amount"`
		Unit   string `json:"unit"`
	} `json:"vram"`
}

type sizeJSON struct {
	Slug         string         `json:"slug"`
	Memory       int            `json:"memory"`
	Vcpus        int            `json:"vcpus"`
	Disk         int            `json:"disk"`
	Transfer     float64        `json:"transfer"`
	PriceMonthly float64        `json:"price_monthly"`
	PriceHourly  float64        `json:"price_hourly"`
	Regions      []string       `json:"regions"`
	Available    bool           `json:"available"`
	Description  string         `json:"description"`
	DiskInfo     []diskInfoJSON `json:"disk_info"`
	GPUInfo      *gpuInfoJSON   `json:"gpu_info,omitempty"`
}

type networkV4JSON struct {
	IPAddress string `json:"ip_address"`
	Netmask   string `json:"netmask"`
	Gateway   string `json:"gateway"`
	Type      string `json:"type"`
}

type networkV6JSON struct {
	IPAddress string `json:"ip_address"`
	Netmask   int    `json:"netmask"`
	Gateway   string `json:"gateway"`
	Type      string `json:"type"`
}

type networksJSON struct {
	V4 []networkV4JSON `json:"v4"`
	V6 []networkV6JSON `json:"v6"`
}

type dropletJSON struct {
	ID               int          `json:"id"`
	Name             string       `json:"name"`
	Memory           int          `json:"memory"`
	Vcpus            int          `json:"vcpus"`
	Disk             int          `json:"disk"`
	Locked           bool         `json:"locked"`
	Status           string       `json:"status"`
	Kernel           *struct{}    `json:"kernel"`
	CreatedAt        string       `json:"created_at"`
	Features         []string     `json:"features"`
	BackupIDs        []int        `json:"backup_ids"`
	NextBackupWindow *struct{}    `json:"next_backup_window"`
	SnapshotIDs      []int        `json:"snapshot_ids"`
	Image            imageJSON    `json:"image"`
	VolumeIDs        []string     `json:"volume_ids"`
	Size             sizeJSON     `json:"size"`
	SizeSlug         string       `json:"size_slug"`
	Networks         networksJSON `json:"networks"`
	Region           regionJSON   `json:"region"`
	Tags             []string     `json:"tags"`
	VPCUUID          string       `json:"vpc_uuid"`
}

type dropletsJSON struct {
	Droplets []dropletJSON `json:"droplets"`
	Links    linksJSON     `json:"links"`
	Meta     metaJSON      `json:"meta"`
}

type volumeJSON struct {
	ID              string     `json:"id"`
	Region          regionJSON `json:"region"`
	DropletIDs      []int      `json:"droplet_ids"`
	Name            string     `json:"name"`
	Description     string     `json:"description"`
	SizeGigabytes   int64      `json:"size_gigabytes"`
	CreatedAt       string     `json:"created_at"`
	FilesystemType  string     `json:"filesystem_type"`
	FilesystemLabel string     `json:"filesystem_label"`
	Tags            []string   `json:"tags"`
}

type volumesJSON struct {
	Volumes []volumeJSON `json:"volumes"`
	Links   linksJSON    `json:"links"`
	Meta    metaJSON     `json:"meta"`
}

type sizesJSON struct {
	Sizes []sizeJSON `json:"sizes"`
	Links linksJSON  `json:"links"`
	Meta  metaJSON   `json:"meta"`
}

type teamJSON struct {
	UUID string `json:"uuid"`
	Name string `json:"name"`
}

type accountJSON struct {
	DropletLimit    int       `json:"droplet_limit"`
	FloatingIPLimit int       `json:"floating_ip_limit"`
	ReservedIPLimit int       `json:"reserved_ip_limit"`
	VolumeLimit     int       `json:"volume_limit"`
	Email           string    `json:"email"`
	Name            string    `json:"name"`
	UUID            string    `json:"uuid"`
	EmailVerified   bool      `json:"email_verified"`
	Status          string    `json:"status"`
	StatusMessage   string    `json:"status_message"`
	Team            *teamJSON `json:"team,omitempty"`
}

// regionNames are the display names of the regions fixtures usually use.
var regionNames = map[string]string{
	"nyc1": "New York 1", "nyc3": "New York 3", "sfo3": "San Francisco 3", "ams3": "Amsterdam 3",
	"fra1": "Frankfurt 1", "lon1": "London 1", "sgp1": "Singapore 1", "tor1": "Toronto 1",
	"blr1": "Bangalore 1", "syd1": "Sydney 1", "atl1": "Atlanta 1",
}

// Called with s.mu held (it reads the size catalogue).
func (s *Server) regionWire(slug string) regionJSON {
	name := regionNames[slug]
	if name == "" {
		name = slug
	}
	sizes := make([]string, 0, len(s.sizes))
	for sl := range s.sizes {
		sizes = append(sizes, sl)
	}
	sort.Strings(sizes)
	return regionJSON{Name: name, Slug: slug, Available: true, Sizes: sizes,
		Features: []string{"backups", "ipv6", "metadata", "install_agent", "storage", "image_transfer"}}
}

func (s *Server) sizeWire(sz Size) sizeJSON {
	out := sizeJSON{
		Slug: sz.Slug, Memory: sz.MemoryMiB, Vcpus: sz.VCPUs, Disk: sz.DiskGiB, Transfer: sz.TransferTiB,
		PriceMonthly: sz.PriceMonthly, PriceHourly: sz.PriceHourly, Available: !sz.Unavailable,
		Description: sz.Description, Regions: []string{"ams3", "fra1", "lon1", "nyc1", "nyc3", "sfo3", "sgp1", "tor1"},
	}
	di := diskInfoJSON{Type: "local"}
	di.Size.Amount, di.Size.Unit = sz.DiskGiB, "gib"
	out.DiskInfo = []diskInfoJSON{di}
	if sz.GPUs > 0 {
		g := &gpuInfoJSON{Count: sz.GPUs, Model: sz.GPUModel}
		g.VRAM.Amount, g.VRAM.Unit = 80*sz.GPUs, "gib"
		out.GPUInfo = g
	}
	return out
}

// Called with s.mu held.
func (s *Server) dropletWire(d *Droplet) dropletJSON {
	sz := s.sizes[d.Size] // a size removed from the catalogue keeps its slug
	if sz.Slug == "" {
		sz.Slug = d.Size
	}
	created := d.CreatedAt.UTC().Format(time.RFC3339)
	public := fmt.Sprintf("203.0.113.%d", d.ID%254+1)
	if s.publicV4 != "" {
		public = s.publicV4
	}
	if d.PublicIPv4 != "" {
		public = d.PublicIPv4
	}
	return dropletJSON{
		ID: d.ID, Name: d.Name, Memory: sz.MemoryMiB, Vcpus: sz.VCPUs, Disk: sz.DiskGiB,
		Status: d.Status, CreatedAt: created,
		Features:  []string{"droplet_agent", "private_networking"},
		BackupIDs: []int{}, SnapshotIDs: []int{},
		Image: imageJSON{
			ID: 160232537, Name: "24.04 (LTS) x64", Distribution: "Ubuntu", Slug: d.Image, Public: true,
			Regions: []string{d.Region}, CreatedAt: "2024-04-25T16:26:06Z", MinDiskSize: 7, Type: "base",
			SizeGigabytes: 2.36, Description: "Ubuntu 24.04 (LTS) x64", Tags: []string{}, Status: "available",
		},
		VolumeIDs: append([]string{}, d.VolumeIDs...),
		Size:      s.sizeWire(sz),
		SizeSlug:  d.Size,
		Networks: networksJSON{
			V4: []networkV4JSON{
				{IPAddress: fmt.Sprintf("10.108.%d.%d", d.ID/256%256, d.ID%256), Netmask: "255.255.0.0", Gateway: "10.108.0.1", Type: "private"},
				{IPAddress: public, Netmask: "255.255.255.0", Gateway: "203.0.113.254", Type: "public"},
			},
			V6: []networkV6JSON{},
		},
		Region:  s.regionWire(d.Region),
		Tags:    append([]string{}, d.Tags...),
		VPCUUID: "760e09ef-dc84-11e8-981e-3cfdfeaae000",
	}
}

// Called with s.mu held.
func (s *Server) volumeWire(v *Volume) volumeJSON {
	return volumeJSON{
		ID: v.ID, Region: s.regionWire(v.Region), DropletIDs: append([]int{}, v.DropletIDs...),
		Name: v.Name, SizeGigabytes: v.SizeGiB, CreatedAt: v.CreatedAt.UTC().Format(time.RFC3339),
		FilesystemType: "ext4", Tags: slices.Clone(append([]string{}, v.Tags...)),
	}
}
