package dofake

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Route names a route the server speaks: the method and path pattern, as
// recorded in Request.Route and matched by Fault.Route.
type Route string

// The routes.
const (
	RouteListDroplets        Route = "GET /v2/droplets"
	RouteCreateDroplet       Route = "POST /v2/droplets"
	RouteDeleteDropletsByTag Route = "DELETE /v2/droplets"
	RouteGetDroplet          Route = "GET /v2/droplets/{id}"
	RouteDeleteDroplet       Route = "DELETE /v2/droplets/{id}"
	RouteListVolumes         Route = "GET /v2/volumes"
	RouteGetVolume           Route = "GET /v2/volumes/{id}"
	RouteListSizes           Route = "GET /v2/sizes"
	RouteGetAccount          Route = "GET /v2/account"
	RouteCreateVolume        Route = "POST /v2/volumes"
	RouteDeleteVolume        Route = "DELETE /v2/volumes/{id}"
	RouteVolumeAction        Route = "POST /v2/volumes/{id}/actions"
	RouteCreateFirewall      Route = "POST /v2/firewalls"
	RouteListFirewalls       Route = "GET /v2/firewalls"
	RouteGetFirewall         Route = "GET /v2/firewalls/{id}"
	RouteUpdateFirewall      Route = "PUT /v2/firewalls/{id}"
	RouteDeleteFirewall      Route = "DELETE /v2/firewalls/{id}"
	RouteCreateTag           Route = "POST /v2/tags"
	RouteTagResources        Route = "POST /v2/tags/{name}/resources"
	RouteUntagResources      Route = "DELETE /v2/tags/{name}/resources"
)

// Pagination, as the real API does it.
const (
	// defaultPerPage is the page size when per_page is absent.
	defaultPerPage = 20
	// maxPerPage is the largest per_page honoured; larger values are
	// clamped.
	maxPerPage = 200
)

// statusClientGone is recorded for a request whose client gave up while an
// injected latency was being waited (nginx's convention; nothing is sent).
const statusClientGone = 499

// answer is what a route handler returns: a status and a JSON body (nil for
// none).
type answer struct {
	status int
	body   any
	header http.Header
	// after, when set, runs before the answer is written, without s.mu
	// (WithOnCreate).
	after func()
}

type handler func(r *http.Request, ts *tokenState) answer

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	add := func(route Route, scope func(*http.Request) Scope, h handler) {
		mux.HandleFunc(string(route), func(w http.ResponseWriter, r *http.Request) { s.serve(w, r, route, scope, h) })
	}
	fixed := func(sc Scope) func(*http.Request) Scope { return func(*http.Request) Scope { return sc } }
	add(RouteListDroplets, fixed(ScopeDropletRead), s.listDroplets)
	add(RouteCreateDroplet, fixed(ScopeDropletCreate), s.createDroplet)
	add(RouteDeleteDropletsByTag, fixed(ScopeDropletDelete), s.deleteDropletsByTag)
	add(RouteGetDroplet, fixed(ScopeDropletRead), s.getDroplet)
	add(RouteDeleteDroplet, fixed(ScopeDropletDelete), s.deleteDroplet)
	add(RouteListVolumes, fixed(ScopeVolumeRead), s.listVolumes)
	add(RouteGetVolume, fixed(ScopeVolumeRead), s.getVolume)
	add(RouteListSizes, fixed(ScopeSizesRead), s.listSizes)
	add(RouteGetAccount, fixed(ScopeAccountRead), s.getAccount)
	add(RouteCreateVolume, fixed(ScopeVolumeCreate), s.createVolume)
	add(RouteDeleteVolume, fixed(ScopeVolumeDelete), s.deleteVolume)
	add(RouteVolumeAction, fixed(ScopeVolumeActionDo), s.volumeAction)
	add(RouteCreateFirewall, fixed(ScopeFirewallCreate), s.createFirewall)
	add(RouteListFirewalls, fixed(ScopeFirewallRead), s.listFirewalls)
	add(RouteGetFirewall, fixed(ScopeFirewallRead), s.getFirewall)
	add(RouteUpdateFirewall, fixed(ScopeFirewallUpdate), s.updateFirewall)
	add(RouteDeleteFirewall, fixed(ScopeFirewallDelete), s.deleteFirewall)
	add(RouteCreateTag, fixed(ScopeTagCreate), s.createTag)
	add(RouteTagResources, fixed(ScopeTagCreate), s.tagResources)
	add(RouteUntagResources, fixed(ScopeTagCreate), s.untagResources)
	// Everything else, including a known path with another method: the
	// API's JSON 404 (after authentication, as the real API answers).
	add("/", fixed(""), func(*http.Request, *tokenState) answer { return errAnswer(http.StatusNotFound) })
	return mux
}

// serve runs one request through authentication, the rate limit, injected
// faults and the scope check, then the route's handler, and records it.
func (s *Server) serve(w http.ResponseWriter, r *http.Request, route Route, scope func(*http.Request) Scope, h handler) {
	if route == "/" {
		route = ""
	}
	reqID := newRequestID()
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("X-Request-Id", reqID)

	s.mu.Lock()
	now := s.clock.Now()
	s.seq++
	idx := len(s.log)
	s.log = append(s.log, Request{Seq: s.seq, At: now, Method: r.Method, Path: r.URL.Path, Query: r.URL.Query().Encode(), Route: route})
	finish := func(a answer) {
		for k, vs := range a.header {
			w.Header()[k] = vs
		}
		s.log[idx].Status = a.status // s.mu is held by every caller
		s.mu.Unlock()
		write(w, a, reqID)
	}

	label, ts := LabelNone, (*tokenState)(nil)
	if tok, ok := bearer(r); ok {
		label = LabelUnknown
		if ts = s.tokens[tok]; ts != nil {
			label = ts.label
		}
	}
	s.log[idx].Token = label
	if ts == nil {
		finish(answer{status: http.StatusUnauthorized, body: apiError{ID: "Unauthorized", Message: "Unable to authenticate you"}})
		return
	}

	rate := s.admit(ts, now)
	rateHeaders(w.Header(), rate)
	if rate.retryAfter > 0 {
		finish(tooMany(rate.retryAfter))
		return
	}

	f := s.takeFault(route, label)
	if f != nil && f.Latency > 0 && !pause(s, r, idx, time.After(f.Latency)) {
		return
	}
	if f != nil && f.Status != 0 {
		if f.Status == http.StatusTooManyRequests {
			finish(tooMany(f.RetryAfter))
			return
		}
		finish(errAnswer(f.Status))
		return
	}

	if need := scope(r); need != "" && !ts.has(need) {
		finish(answer{status: http.StatusForbidden, body: apiError{ID: "Forbidden", Message: "You do not have access for the attempted action."}})
		return
	}
	a := h(r, ts)
	if a.after != nil {
		s.mu.Unlock()
		a.after()
		s.mu.Lock()
	}
	if f != nil && f.Hold != nil {
		f.Hold.arrivedOnce.Do(func() { close(f.Hold.arrived) })
		if !pause(s, r, idx, f.Hold.released) {
			return
		}
	}
	if f != nil && f.HoldAnswer > 0 && !pause(s, r, idx, time.After(f.HoldAnswer)) {
		return
	}
	finish(a)
}

// pause releases the server's lock (held on entry) until ready delivers
// or closes, and takes it again; it returns false, with the lock released
// and request idx logged as statusClientGone, when the client gives up
// first. It is the one wait behind Fault.Latency, Fault.Hold and
// Fault.HoldAnswer.
func pause[T any](s *Server, r *http.Request, idx int, ready <-chan T) bool {
	s.mu.Unlock()
	select {
	case <-ready:
		s.mu.Lock()
		return true
	case <-r.Context().Done():
		s.mu.Lock()
		s.log[idx].Status = statusClientGone
		s.mu.Unlock()
		return false
	}
}

func bearer(r *http.Request) (string, bool) {
	v := r.Header.Get("Authorization")
	if len(v) < 7 || !strings.EqualFold(v[:7], "Bearer ") {
		return "", false
	}
	tok := strings.TrimSpace(v[7:])
	return tok, tok != ""
}

func rateHeaders(h http.Header, st rateState) {
	h.Set("RateLimit-Limit", strconv.Itoa(st.limit))
	h.Set("RateLimit-Remaining", strconv.Itoa(max(st.remaining, 0)))
	h.Set("RateLimit-Reset", strconv.FormatInt(st.reset.Unix(), 10))
}

func tooMany(retry time.Duration) answer {
	secs := int(math.Ceil(retry.Seconds()))
	return answer{
		status: http.StatusTooManyRequests,
		body:   apiError{ID: "too_many_requests", Message: "API Rate limit exceeded."},
		header: http.Header{"Retry-After": {strconv.Itoa(max(secs, 1))}},
	}
}

// apiError is the API's error body.
type apiError struct {
	ID        string `json:"id"`
	Message   string `json:"message"`
	RequestID string `json:"request_id,omitempty"`
}

// errAnswer is the API's error for a status, with its usual id and message.
func errAnswer(status int) answer {
	e := apiError{ID: "server_error", Message: "Server Error"}
	switch {
	case status == http.StatusNotFound:
		e = apiError{ID: "not_found", Message: "The resource you were accessing could not be found."}
	case status == http.StatusUnauthorized:
		e = apiError{ID: "Unauthorized", Message: "Unable to authenticate you"}
	case status == http.StatusForbidden:
		e = apiError{ID: "Forbidden", Message: "You do not have access for the attempted action."}
	case status == http.StatusServiceUnavailable:
		e = apiError{ID: "service_unavailable", Message: "The service is temporarily unavailable."}
	case status < 500:
		e = apiError{ID: "bad_request", Message: http.StatusText(status)}
	}
	return answer{status: status, body: e}
}

func unprocessable(format string, a ...any) answer {
	return answer{status: http.StatusUnprocessableEntity, body: apiError{ID: "unprocessable_entity", Message: fmt.Sprintf(format, a...)}}
}

func write(w http.ResponseWriter, a answer, reqID string) {
	if a.body == nil {
		w.Header().Del("Content-Type")
		w.WriteHeader(a.status)
		return
	}
	if e, ok := a.body.(apiError); ok {
		e.RequestID = reqID
		a.body = e
	}
	b, err := json.Marshal(a.body)
	if err != nil {
		panic(err) // our own wire types always marshal
	}
	w.WriteHeader(a.status)
	_, _ = w.Write(append(b, '\n'))
}

func newRequestID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	h := hex.EncodeToString(b)
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// page cuts a list of n items into the requested page and builds the
// links and meta the API returns.
func (s *Server) page(r *http.Request, n int) (lo, hi int, links linksJSON, meta metaJSON) {
	q := r.URL.Query()
	per, err := strconv.Atoi(q.Get("per_page"))
	if err != nil || per < 1 {
		per = defaultPerPage
	}
	per = min(per, maxPerPage)
	p, err := strconv.Atoi(q.Get("page"))
	if err != nil || p < 1 {
		p = 1
	}
	last := max(1, (n+per-1)/per)
	lo, hi = min((p-1)*per, n), min(p*per, n)
	link := func(to int) string {
		v := url.Values{}
		for k, vs := range q {
			v[k] = vs
		}
		v.Set("page", strconv.Itoa(to))
		v.Set("per_page", strconv.Itoa(per))
		return strings.TrimSuffix(s.URL, "/") + r.URL.Path + "?" + v.Encode()
	}
	links.Pages = &pagesJSON{}
	if p > 1 {
		links.Pages.First, links.Pages.Prev = link(1), link(min(p-1, last))
	}
	if p < last {
		links.Pages.Next, links.Pages.Last = link(p+1), link(last)
	}
	if *links.Pages == (pagesJSON{}) {
		links.Pages = nil
	}
	return lo, hi, links, metaJSON{Total: n}
}

func (s *Server) sortedDroplets(keep func(*Droplet) bool) []*Droplet {
	var ds []*Droplet
	for _, d := range s.droplets {
		if keep(d) {
			ds = append(ds, d)
		}
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i].ID < ds[j].ID })
	return ds
}

func (s *Server) listDroplets(r *http.Request, _ *tokenState) answer {
	tag := r.URL.Query().Get("tag_name")
	ds := s.sortedDroplets(func(d *Droplet) bool { return tag == "" || d.HasTag(tag) })
	lo, hi, links, meta := s.page(r, len(ds))
	out := dropletsJSON{Droplets: []dropletJSON{}, Links: links, Meta: meta}
	for _, d := range ds[lo:hi] {
		out.Droplets = append(out.Droplets, s.dropletWire(d))
	}
	return answer{status: http.StatusOK, body: out}
}

func (s *Server) getDroplet(r *http.Request, _ *tokenState) answer {
	id, err := strconv.Atoi(r.PathValue("id"))
	d := s.droplets[id]
	if err != nil || d == nil {
		return errAnswer(http.StatusNotFound)
	}
	return answer{status: http.StatusOK, body: map[string]any{"droplet": s.dropletWire(d)}}
}

func (s *Server) deleteDroplet(r *http.Request, _ *tokenState) answer {
	id, err := strconv.Atoi(r.PathValue("id"))
	if err != nil || s.droplets[id] == nil {
		return errAnswer(http.StatusNotFound)
	}
	s.forgetDroplet(id)
	return answer{status: http.StatusNoContent, after: s.deletedHook()}
}

func (s *Server) deleteDropletsByTag(r *http.Request, _ *tokenState) answer {
	tag := r.URL.Query().Get("tag_name")
	if tag == "" {
		return unprocessable("tag_name is required")
	}
	for _, d := range s.sortedDroplets(func(d *Droplet) bool { return d.HasTag(tag) }) {
		s.forgetDroplet(d.ID)
	}
	return answer{status: http.StatusNoContent, after: s.deletedHook()}
}

// deletedHook is the answer's after for a route that deleted droplets: it
// runs the WithOnDelete hook for them (nil without one). Called with s.mu
// held.
func (s *Server) deletedHook() func() {
	if s.onDelete == nil || len(s.deleted) == 0 {
		return nil
	}
	return s.runDeleted
}

// hostname is the API's rule for droplet names.
var hostname = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9.-]{0,253}[A-Za-z0-9])?$`)

func (s *Server) createDroplet(r *http.Request, ts *tokenState) answer {
	var req struct {
		Name     string          `json:"name"`
		Names    []string        `json:"names"`
		Region   string          `json:"region"`
		Size     string          `json:"size"`
		Image    json.RawMessage `json:"image"`
		Tags     []string        `json:"tags"`
		SSHKeys  []any           `json:"ssh_keys"`
		UserData string          `json:"user_data"`
		Volumes  []any           `json:"volumes"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(nil, r.Body, 1<<20)).Decode(&req); err != nil {
		return answer{status: http.StatusBadRequest, body: apiError{ID: "bad_request", Message: "The request body is not valid JSON."}}
	}
	switch {
	case len(req.Names) > 0:
		return unprocessable("creating several droplets at once is not supported by this test server")
	case !hostname.MatchString(req.Name):
		return unprocessable("Name Only valid hostname characters are allowed. (a-z, A-Z, 0-9, . and -)")
	case req.Region == "":
		return unprocessable("Region is not available")
	case req.Size == "":
		return unprocessable("Size is not available")
	case len(req.Image) == 0 || string(req.Image) == "null":
		return unprocessable("You specified an invalid image for Droplet creation.")
	}
	if sz, ok := s.sizes[req.Size]; !ok || sz.Unavailable {
		return unprocessable("Size is not available in this region.")
	}
	for _, tag := range req.Tags {
		if !ValidTag(tag) {
			return unprocessable("tag names must only contain letters, numbers, colons, dashes and underscores")
		}
	}
	if len(req.Tags) > 0 && !ts.has(ScopeTagCreate) {
		// Tagging at creation needs tag:create beside droplet:create.
		return answer{status: http.StatusForbidden, body: apiError{ID: "Forbidden", Message: "You do not have access for the attempted action."}}
	}
	image := DefaultImage
	var slug string
	if json.Unmarshal(req.Image, &slug) == nil && slug != "" {
		image = slug
	}
	tags := req.Tags
	if tags == nil {
		tags = NoTags
	}
	var keys, vols []string
	for _, k := range req.SSHKeys {
		keys = append(keys, fmt.Sprint(k))
	}
	for _, v := range req.Volumes {
		id := fmt.Sprint(v)
		if m, ok := v.(map[string]any); ok {
			id = fmt.Sprint(m["id"])
		}
		vol := s.volumes[id]
		if vol == nil || vol.Region != req.Region || len(vol.DropletIDs) > 0 {
			return unprocessable("volume %s cannot be attached: unknown, in another region or attached", id)
		}
		vols = append(vols, id)
	}
	d := s.addDroplet(Droplet{Name: req.Name, Region: req.Region, Size: req.Size, Image: image, Tags: tags,
		SSHKeys: keys, UserData: req.UserData, VolumeIDs: vols})
	for _, id := range vols {
		s.volumes[id].DropletIDs = []int{d.ID}
	}
	wire := s.dropletWire(s.droplets[d.ID])
	wire.Status = "new" // the fake boots at once: reads after this say "active"
	wire.Networks = networksJSON{V4: []networkV4JSON{}, V6: []networkV6JSON{}}
	actionID := 36804636 + d.ID%1000000
	a := answer{status: http.StatusAccepted, body: map[string]any{
		"droplet": wire,
		"links": map[string]any{"actions": []map[string]any{{
			"id": actionID, "rel": "create", "href": fmt.Sprintf("%sv2/actions/%d", s.URL, actionID),
		}}},
	}}
	if s.onCreate != nil {
		booted, created := s.onCreate, s.droplets[d.ID].clone()
		a.after = func() { booted(created) }
	}
	return a
}

func (s *Server) sortedVolumes(keep func(*Volume) bool) []*Volume {
	var vs []*Volume
	for _, v := range s.volumes {
		if keep(v) {
			vs = append(vs, v)
		}
	}
	sort.Slice(vs, func(i, j int) bool {
		if !vs[i].CreatedAt.Equal(vs[j].CreatedAt) {
			return vs[i].CreatedAt.Before(vs[j].CreatedAt)
		}
		return vs[i].ID < vs[j].ID
	})
	return vs
}

func (s *Server) listVolumes(r *http.Request, _ *tokenState) answer {
	q := r.URL.Query()
	name, region := q.Get("name"), q.Get("region")
	vs := s.sortedVolumes(func(v *Volume) bool {
		return (name == "" || v.Name == name) && (region == "" || v.Region == region)
	})
	lo, hi, links, meta := s.page(r, len(vs))
	out := volumesJSON{Volumes: []volumeJSON{}, Links: links, Meta: meta}
	for _, v := range vs[lo:hi] {
		out.Volumes = append(out.Volumes, s.volumeWire(v))
	}
	return answer{status: http.StatusOK, body: out}
}

func (s *Server) getVolume(r *http.Request, _ *tokenState) answer {
	v := s.volumes[r.PathValue("id")]
	if v == nil {
		return errAnswer(http.StatusNotFound)
	}
	return answer{status: http.StatusOK, body: map[string]any{"volume": s.volumeWire(v)}}
}

func (s *Server) listSizes(r *http.Request, _ *tokenState) answer {
	slugs := make([]string, 0, len(s.sizes))
	for slug := range s.sizes {
		slugs = append(slugs, slug)
	}
	sort.Strings(slugs)
	lo, hi, links, meta := s.page(r, len(slugs))
	out := sizesJSON{Sizes: []sizeJSON{}, Links: links, Meta: meta}
	for _, slug := range slugs[lo:hi] {
		out.Sizes = append(out.Sizes, s.sizeWire(s.sizes[slug]))
	}
	return answer{status: http.StatusOK, body: out}
}

func (s *Server) getAccount(*http.Request, *tokenState) answer {
	a := s.account
	return answer{status: http.StatusOK, body: map[string]any{"account": accountJSON{
		DropletLimit: a.DropletLimit, FloatingIPLimit: 3, ReservedIPLimit: 3, VolumeLimit: a.VolumeLimit,
		Email: a.Email, Name: a.Name, UUID: a.UUID, EmailVerified: a.EmailVerified, Status: a.Status,
		StatusMessage: "", Team: &teamJSON{UUID: a.TeamUUID, Name: a.TeamName},
	}}}
}
