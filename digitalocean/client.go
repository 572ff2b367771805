// Package digitalocean is the one place chalupa builds DigitalOcean API clients
// (github.com/digitalocean/godo). It owns the rules every provider call
// follows (docs/operations.md, "DigitalOcean API"):
//
//   - the base URL comes from CHALUPA_DO_API_URL (default the public API)
//     and must be https unless its host is loopback, since every request
//     carries a token (CheckBaseURL);
//   - every HTTP request has a deadline (DefaultRequestTimeout);
//   - the User-Agent names chalupa and its version;
//   - the API's budgets (250 requests a minute, 5,000 an hour, per token)
//     are tracked from the RateLimit-* headers godo exposes and a count of
//     the client's own requests; a 429, or a spent budget, holds every
//     call back until the reset instead of retrying: the client never
//     retries at all, so it cannot spin;
//   - a token never appears in a log line, a returned error, or the
//     client's printed form: errors are *Error values reduced to a status,
//     a sentinel kind and a scrubbed reason.
//
// A Client serves one token. The daemon builds one for the platform read
// token (inventory, sizes, volumes), one for the platform write token
// (handed to the reaper alone; only the daemon's wiring reads that
// variable) and one per customer token, which the customer sweep holds
// only as a DropletAPI.
package digitalocean

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/digitalocean/godo"
	"github.com/jonboulle/clockwork"
	"github.com/rs/zerolog"

	"github.com/chalupa-run/chalupa/internal/origin"
)

// Defaults (docs/operations.md, "DigitalOcean API").
const (
	// EnvBaseURL is the variable that sets the API's base URL.
	EnvBaseURL = "CHALUPA_DO_API_URL"
	// DefaultBaseURL is the public API.
	DefaultBaseURL = "https://api.digitalocean.com/"
	// DefaultRequestTimeout bounds each HTTP request (one page of a
	// listing counts as one): the API answers in well under a second, a
	// 200-droplet page included, and 10 s still leaves room for a second
	// call inside the customer sweep's 22 s budget when one hangs.
	DefaultRequestTimeout = 10 * time.Second
	// DefaultSizesTTL is how long Sizes serves its cached catalogue:
	// prices change a few times a year, so one call an hour is plenty
	// for cost reconciliation every 15 minutes.
	DefaultSizesTTL = time.Hour
	// PerPage is the page size of every listing: the API's maximum, so a
	// fleet of 1,000 droplets is 5 requests.
	PerPage = 200
	// MaxPages bounds one listing (40,000 items): a server that never
	// reports its last page cannot hold a caller forever.
	MaxPages = 200
)

// Token is a DigitalOcean API token. Its String, GoString and MarshalText
// forms are "[redacted]", so printing a Config or a Token by mistake shows
// nothing.
type Token string

// String returns "[redacted]" ("" when empty).
func (t Token) String() string {
	if t == "" {
		return ""
	}
	return "[redacted]"
}

// GoString is String, for %#v.
func (t Token) GoString() string { return t.String() }

// MarshalText redacts the token in JSON and text encodings.
func (t Token) MarshalText() ([]byte, error) { return []byte(t.String()), nil }

// Config describes one client.
type Config struct {
	// BaseURL is the API's base URL ("" is DefaultBaseURL); it must pass
	// CheckBaseURL.
	BaseURL string
	// Token is the bearer token. Required.
	Token Token
	// Label names the token wherever the token cannot appear: errors,
	// logs, metrics ("read", "write", "customer:<org slug>"). Required.
	Label string
	// Version is chalupa's version, sent in the User-Agent ("dev" when
	// empty).
	Version string
	// RequestTimeout bounds each HTTP request (DefaultRequestTimeout when
	// zero).
	RequestTimeout time.Duration
	// SizesTTL is how long Sizes caches the catalogue (DefaultSizesTTL
	// when zero).
	SizesTTL time.Duration
	// Clock drives the rate-limit windows, back-off and the sizes cache
	// (the real clock when nil). Request deadlines are real time.
	Clock clockwork.Clock
	// Logger receives a warning when the API rate-limits the token (the
	// zero Logger logs nothing). It never sees the token.
	Logger zerolog.Logger
	// Transport sends the requests (http.DefaultTransport when nil).
	Transport http.RoundTripper
}

// CheckBaseURL validates an API base URL and returns it normalised to
// "scheme://host[:port]/" ("" gives DefaultBaseURL). The URL carries every
// token chalupa holds, so it must be https unless its host is loopback (a
// test server), an origin only (no path, query or fragment), and without
// user info. Error messages never repeat the URL.
func CheckBaseURL(raw string) (string, error) {
	if raw == "" {
		return DefaultBaseURL, nil
	}
	u, err := url.Parse(raw)
	switch {
	case err != nil || u.Opaque != "" || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https"):
		return "", errors.New("must be an absolute http(s) URL such as " + DefaultBaseURL)
	case u.User != nil:
		return "", errors.New("must not hold user info (user:password@): tokens travel in a header")
	case (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.ForceQuery || u.Fragment != "":
		return "", errors.New("must be scheme://HOST[:PORT]/ with no path, query or fragment")
	case u.Scheme == "http" && !origin.IsLoopbackHost(u.Hostname()):
		return "", errors.New("must use https unless its host is loopback: it carries the DigitalOcean tokens")
	}
	return u.Scheme + "://" + u.Host + "/", nil
}

// DropletAPI is the part of the API a customer token may be used for:
// droplets only (docs/operations.md, "DigitalOcean API"). The customer
// sweep holds customer clients as a DropletAPI.
type DropletAPI interface {
	// GetDroplet returns one droplet; ErrNotFound when it does not exist.
	GetDroplet(ctx context.Context, id int) (Droplet, error)
	// ListDropletsByTag returns every droplet carrying tag, all pages.
	ListDropletsByTag(ctx context.Context, tag string) ([]Droplet, error)
	// DeleteDroplet destroys a droplet; a droplet already gone is
	// DeleteAlreadyGone, not an error.
	DeleteDroplet(ctx context.Context, id int) (DeleteResult, error)
}

// API is everything the platform tokens are used for: droplets, volumes,
// the size catalogue and the account.
type API interface {
	DropletAPI
	// ListVolumesByTag returns every volume carrying tag.
	ListVolumesByTag(ctx context.Context, tag string) ([]Volume, error)
	// ListFirewallsByTag returns every firewall carrying tag.
	ListFirewallsByTag(ctx context.Context, tag string) ([]Firewall, error)
	// Sizes returns the size catalogue with prices (cached).
	Sizes(ctx context.Context) ([]Size, error)
	// Account returns the token's account.
	Account(ctx context.Context) (Account, error)
}

var _ API = (*Client)(nil)

// Client is a DigitalOcean API client for one token. Create it with New;
// it is safe for concurrent use.
type Client struct {
	label    string
	token    Token
	godo     *godo.Client
	clock    clockwork.Clock
	timeout  time.Duration
	sizesTTL time.Duration
	log      zerolog.Logger

	mu           sync.Mutex
	hourKnown    bool
	hourLimit    int
	hourLeft     int
	hourReset    time.Time
	minute       []time.Time // this client's requests in the last minute, oldest first
	blockedUntil time.Time
	requests     uint64
	limited      uint64
	heldBack     uint64

	sizesMu sync.Mutex
	sizes   []Size
	sizesAt time.Time
}

// New builds a client. Errors: a missing token or label, or a base URL
// CheckBaseURL refuses (the message names CHALUPA_DO_API_URL, never the
// URL or the token).
func New(cfg Config) (*Client, error) {
	base, err := CheckBaseURL(cfg.BaseURL)
	if err != nil {
		return nil, fmt.Errorf("digitalocean: %s %w", EnvBaseURL, err)
	}
	if cfg.Token == "" {
		return nil, errors.New("digitalocean: no token")
	}
	if cfg.Label == "" {
		return nil, errors.New("digitalocean: no token label")
	}
	c := &Client{
		label:    cfg.Label,
		token:    cfg.Token,
		clock:    cfg.Clock,
		timeout:  cfg.RequestTimeout,
		sizesTTL: cfg.SizesTTL,
		log:      cfg.Logger.With().Str("component", "digitalocean").Str("token", cfg.Label).Logger(),
	}
	if c.clock == nil {
		c.clock = clockwork.NewRealClock()
	}
	if c.timeout <= 0 {
		c.timeout = DefaultRequestTimeout
	}
	if c.sizesTTL <= 0 {
		c.sizesTTL = DefaultSizesTTL
	}
	transport := cfg.Transport
	if transport == nil {
		transport = http.DefaultTransport
	}
	baseURL, _ := url.Parse(base)
	hc := &http.Client{
		Transport:     &bearerTransport{next: transport, host: baseURL.Host, token: cfg.Token},
		CheckRedirect: func(*http.Request, []*http.Request) error { return errRedirect },
	}
	version := cfg.Version
	if version == "" {
		version = "dev"
	}
	// godo.New without a RetryConfig: no retrying client underneath, so a
	// 429 or 5xx comes back to this package at once.
	gc, err := godo.New(hc, godo.SetBaseURL(base), godo.SetUserAgent("chalupa/"+version))
	if err != nil {
		return nil, errors.New("digitalocean: building the godo client failed")
	}
	c.godo = gc
	return c, nil
}

// Label is the token's label.
func (c *Client) Label() string { return c.label }

// String names the client by its label, never its token.
func (c *Client) String() string { return "digitalocean(" + c.label + ")" }

// GoString is String, so %#v of a Client shows no token either.
func (c *Client) GoString() string { return c.String() }

// bearerTransport adds the token to requests for the API's own host and
// to nothing else.
type bearerTransport struct {
	next  http.RoundTripper
	host  string
	token Token
}

func (t *bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.URL.Host != t.host {
		return nil, errRedirect
	}
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+string(t.token))
	return t.next.RoundTrip(r)
}

// String never shows the token.
func (t *bearerTransport) String() string { return "bearer(" + t.host + ")" }

// GoString is String.
func (t *bearerTransport) GoString() string { return t.String() }

// do runs one HTTP request through godo: held back while a budget is
// spent, bounded by the request deadline, its rate headers recorded, its
// error classified.
func (c *Client) do(ctx context.Context, op string, call func(context.Context) (*godo.Response, error)) (*godo.Response, error) {
	if err := c.reserve(op); err != nil {
		return nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	resp, err := call(cctx)
	c.observe(op, resp)
	if err != nil {
		return resp, c.classify(ctx, op, resp, err)
	}
	return resp, nil
}

// listAll fetches every page of a listing.
func listAll[T any](ctx context.Context, c *Client, op string, page func(context.Context, *godo.ListOptions) ([]T, *godo.Response, error)) ([]T, error) {
	var all []T
	for p := 1; p <= MaxPages; p++ {
		var items []T
		resp, err := c.do(ctx, op, func(ctx context.Context) (*godo.Response, error) {
			var (
				resp *godo.Response
				err  error
			)
			items, resp, err = page(ctx, &godo.ListOptions{Page: p, PerPage: PerPage})
			return resp, err
		})
		if err != nil {
			return nil, err
		}
		all = append(all, items...)
		if resp.Links == nil || resp.Links.IsLastPage() || len(items) == 0 {
			return all, nil
		}
	}
	return nil, &Error{Op: op, Token: c.label, Kind: ErrProvider, Reason: fmt.Sprintf("more than %d pages", MaxPages)}
}

// Droplet is what chalupa reads of a droplet.
type Droplet struct {
	// ID is the droplet id.
	ID int
	// Name is the droplet's name.
	Name string
	// Status is "new", "active", "off" or "archive".
	Status string
	// Region is the region slug.
	Region string
	// SizeSlug is the size slug.
	SizeSlug string
	// Tags are the droplet's tags.
	Tags []string
	// VolumeIDs are the attached volumes.
	VolumeIDs []string
	// CreatedAt is when the droplet was created (zero if unparseable).
	CreatedAt time.Time
	// PriceHourly and PriceMonthly (USD) are the size's list prices as
	// the droplet reports them now.
	PriceHourly, PriceMonthly float64
	// VCPUs, MemoryMiB and DiskGiB are the droplet's resources.
	VCPUs, MemoryMiB, DiskGiB int
}

// HasTag reports whether the droplet carries tag.
func (d Droplet) HasTag(tag string) bool { return slices.Contains(d.Tags, tag) }

func dropletFrom(g godo.Droplet) Droplet {
	d := Droplet{
		ID: g.ID, Name: g.Name, Status: g.Status, SizeSlug: g.SizeSlug,
		Tags: slices.Clone(g.Tags), VolumeIDs: slices.Clone(g.VolumeIDs),
		VCPUs: g.Vcpus, MemoryMiB: g.Memory, DiskGiB: g.Disk,
	}
	if g.Region != nil {
		d.Region = g.Region.Slug
	}
	if g.Size != nil {
		d.PriceHourly, d.PriceMonthly = g.Size.PriceHourly, g.Size.PriceMonthly
		if d.SizeSlug == "" {
			d.SizeSlug = g.Size.Slug
		}
	}
	d.CreatedAt, _ = time.Parse(time.RFC3339, g.Created)
	return d
}

// ErrBadArgument is returned, without any request, for a droplet id below
// 1 or an invalid tag name: a caller bug, deliberately none of the API's
// sentinels (a reaper must never read it as "already gone").
var ErrBadArgument = errors.New("digitalocean: bad argument")

// GetDroplet returns droplet id. Errors: ErrNotFound, ErrUnauthorized,
// ErrForbidden, ErrRateLimited, ErrProvider (as *Error); ErrBadArgument
// for id < 1.
func (c *Client) GetDroplet(ctx context.Context, id int) (Droplet, error) {
	if id < 1 {
		return Droplet{}, fmt.Errorf("%w: droplet id %d", ErrBadArgument, id)
	}
	var d *godo.Droplet
	_, err := c.do(ctx, "GetDroplet", func(ctx context.Context) (*godo.Response, error) {
		var (
			resp *godo.Response
			err  error
		)
		d, resp, err = c.godo.Droplets.Get(ctx, id)
		return resp, err
	})
	if err != nil {
		return Droplet{}, err
	}
	if d == nil {
		return Droplet{}, &Error{Op: "GetDroplet", Token: c.label, Kind: ErrProvider, Reason: "malformed answer"}
	}
	return dropletFrom(*d), nil
}

// ListDropletsByTag returns every droplet carrying tag (tag_name filter,
// all pages of PerPage). Errors as GetDroplet; ErrBadArgument for a name
// DigitalOcean does not allow as a tag.
func (c *Client) ListDropletsByTag(ctx context.Context, tag string) ([]Droplet, error) {
	if !ValidTag(tag) {
		return nil, fmt.Errorf("%w: invalid tag name", ErrBadArgument)
	}
	gs, err := listAll(ctx, c, "ListDropletsByTag", func(ctx context.Context, opt *godo.ListOptions) ([]godo.Droplet, *godo.Response, error) {
		return c.godo.Droplets.ListByTag(ctx, tag, opt)
	})
	if err != nil {
		return nil, err
	}
	out := make([]Droplet, len(gs))
	for i, g := range gs {
		out[i] = dropletFrom(g)
	}
	return out, nil
}

// DeleteResult tells how a DeleteDroplet succeeded.
type DeleteResult int

const (
	// DeleteFailed accompanies an error.
	DeleteFailed DeleteResult = iota
	// Deleted: the API accepted the delete (204).
	Deleted
	// DeleteAlreadyGone: the API answered 404; the droplet was already
	// destroyed, which for the reaper is success, reported apart.
	DeleteAlreadyGone
)

// String is "failed", "deleted" or "already-gone".
func (r DeleteResult) String() string {
	switch r {
	case Deleted:
		return "deleted"
	case DeleteAlreadyGone:
		return "already-gone"
	}
	return "failed"
}

// DeleteDroplet destroys droplet id. A 404 is (DeleteAlreadyGone, nil).
// Errors: ErrUnauthorized, ErrForbidden, ErrRateLimited, ErrProvider (as
// *Error), with DeleteFailed; ErrBadArgument for id < 1, without a
// request. The caller checks the droplet's tags first: this method
// deletes whatever id it is given.
func (c *Client) DeleteDroplet(ctx context.Context, id int) (DeleteResult, error) {
	if id < 1 {
		return DeleteFailed, fmt.Errorf("%w: droplet id %d", ErrBadArgument, id)
	}
	_, err := c.do(ctx, "DeleteDroplet", func(ctx context.Context) (*godo.Response, error) {
		return c.godo.Droplets.Delete(ctx, id)
	})
	switch {
	case errors.Is(err, ErrNotFound):
		return DeleteAlreadyGone, nil
	case err != nil:
		return DeleteFailed, err
	}
	return Deleted, nil
}

// Volume is what chalupa reads of a block-storage volume.
type Volume struct {
	// ID is the volume id.
	ID string
	// Name is the volume's name.
	Name string
	// Region is the region slug.
	Region string
	// SizeGiB is size_gigabytes: what storage is billed on.
	SizeGiB int64
	// Tags are the volume's tags.
	Tags []string
	// DropletIDs are the droplets it is attached to.
	DropletIDs []int
	// CreatedAt is when the volume was created.
	CreatedAt time.Time
}

// Firewall is a cloud firewall as converge's crash recovery needs it.
type Firewall struct {
	// ID is the firewall id (a UUID).
	ID string
	// Name is the firewall's name.
	Name string
	// Tags are its tags (on DigitalOcean, the tags of the droplets it
	// applies to).
	Tags []string
	// DropletIDs are the droplets it applies to by id.
	DropletIDs []int
}

// ListFirewallsByTag returns every firewall carrying tag. The API has no
// tag filter for firewalls, so this lists them all (all pages) and filters
// here. Errors as GetDroplet.
func (c *Client) ListFirewallsByTag(ctx context.Context, tag string) ([]Firewall, error) {
	if !ValidTag(tag) {
		return nil, fmt.Errorf("%w: invalid tag name", ErrBadArgument)
	}
	fs, err := listAll(ctx, c, "ListFirewallsByTag", func(ctx context.Context, opt *godo.ListOptions) ([]godo.Firewall, *godo.Response, error) {
		return c.godo.Firewalls.List(ctx, opt)
	})
	if err != nil {
		return nil, err
	}
	var out []Firewall
	for _, f := range fs {
		if slices.Contains(f.Tags, tag) {
			out = append(out, Firewall{ID: f.ID, Name: f.Name, Tags: slices.Clone(f.Tags), DropletIDs: slices.Clone(f.DropletIDs)})
		}
	}
	return out, nil
}

// ListVolumesByTag returns every volume carrying tag. The API has no tag
// filter for volumes, so this lists them all (all pages) and filters here.
// Errors as GetDroplet.
func (c *Client) ListVolumesByTag(ctx context.Context, tag string) ([]Volume, error) {
	if !ValidTag(tag) {
		return nil, fmt.Errorf("%w: invalid tag name", ErrBadArgument)
	}
	vs, err := listAll(ctx, c, "ListVolumesByTag", func(ctx context.Context, opt *godo.ListOptions) ([]godo.Volume, *godo.Response, error) {
		return c.godo.Storage.ListVolumes(ctx, &godo.ListVolumeParams{ListOptions: opt})
	})
	if err != nil {
		return nil, err
	}
	var out []Volume
	for _, v := range vs {
		if !slices.Contains(v.Tags, tag) {
			continue
		}
		vol := Volume{ID: v.ID, Name: v.Name, SizeGiB: v.SizeGigaBytes, Tags: slices.Clone(v.Tags),
			DropletIDs: slices.Clone(v.DropletIDs), CreatedAt: v.CreatedAt}
		if v.Region != nil {
			vol.Region = v.Region.Slug
		}
		out = append(out, vol)
	}
	return out, nil
}

// Size is a droplet size with its list prices.
type Size struct {
	// Slug names the size.
	Slug string
	// PriceHourly and PriceMonthly are USD list prices.
	PriceHourly, PriceMonthly float64
	// VCPUs, MemoryMiB and DiskGiB are the size's resources.
	VCPUs, MemoryMiB, DiskGiB int
	// Available is false for sizes no longer offered.
	Available bool
}

// Sizes returns the size catalogue, served from a cache younger than the
// client's SizesTTL; a failed refresh returns the error and keeps the old
// cache for the next call. Errors as GetDroplet.
func (c *Client) Sizes(ctx context.Context) ([]Size, error) {
	c.sizesMu.Lock()
	defer c.sizesMu.Unlock()
	if c.sizes != nil && c.clock.Since(c.sizesAt) < c.sizesTTL {
		return slices.Clone(c.sizes), nil
	}
	gs, err := listAll(ctx, c, "Sizes", c.godo.Sizes.List)
	if err != nil {
		return nil, err
	}
	sizes := make([]Size, len(gs))
	for i, g := range gs {
		sizes[i] = Size{Slug: g.Slug, PriceHourly: g.PriceHourly, PriceMonthly: g.PriceMonthly,
			VCPUs: g.Vcpus, MemoryMiB: g.Memory, DiskGiB: g.Disk, Available: g.Available}
	}
	c.sizes, c.sizesAt = sizes, c.clock.Now()
	return slices.Clone(sizes), nil
}

// Account is what chalupa reads of the token's account.
type Account struct {
	// UUID identifies the account; TeamUUID and TeamName its team.
	UUID, TeamUUID, TeamName string
	// Email is the account's e-mail address.
	Email string
	// Status is "active", "warning" or "locked".
	Status string
	// DropletLimit is the most droplets the account may hold.
	DropletLimit int
}

// Account returns the token's account. Errors as GetDroplet.
func (c *Client) Account(ctx context.Context) (Account, error) {
	var a *godo.Account
	_, err := c.do(ctx, "Account", func(ctx context.Context) (*godo.Response, error) {
		var (
			resp *godo.Response
			err  error
		)
		a, resp, err = c.godo.Account.Get(ctx)
		return resp, err
	})
	if err != nil {
		return Account{}, err
	}
	if a == nil {
		return Account{}, &Error{Op: "Account", Token: c.label, Kind: ErrProvider, Reason: "malformed answer"}
	}
	out := Account{UUID: a.UUID, Email: a.Email, Status: a.Status, DropletLimit: a.DropletLimit}
	if a.Team != nil {
		out.TeamUUID, out.TeamName = a.Team.UUID, a.Team.Name
	}
	return out, nil
}

// Tag scheme (docs/operations.md, "DigitalOcean API"): every droplet
// chalupa may destroy carries TagChalupa and EnvTag(slug).
const (
	// TagChalupa marks every resource chalupa manages.
	TagChalupa = "chalupa"
	// envTagPrefix and boxTagPrefix precede an environment slug and a
	// converge box id.
	envTagPrefix = "chalupa:env:"
	boxTagPrefix = "chalupa:box:"
)

// EnvTag is the tag naming an environment: "chalupa:env:<slug>".
func EnvTag(slug string) string { return envTagPrefix + slug }

// BoxTag is the tag converge adds for a box: "chalupa:box:<id>".
func BoxTag(id string) string { return boxTagPrefix + id }

// ValidTag reports whether DigitalOcean accepts name as a tag name: 1–255
// letters, digits, ':', '-' or '_'.
func ValidTag(name string) bool {
	if len(name) == 0 || len(name) > 255 {
		return false
	}
	return strings.IndexFunc(name, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == ':' || r == '-' || r == '_')
	}) < 0
}
