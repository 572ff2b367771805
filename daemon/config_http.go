package daemon

import (
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"

	"github.com/chalupa-run/chalupa/console"
	"github.com/chalupa-run/chalupa/internal/origin"
)

// HTTPConfig is where the daemon listens and the origin it is reached by
// (docs/operations.md, "Configuration").
type HTTPConfig struct {
	// Listen is CHALUPA_LISTEN, host:port (DefaultListen, loopback).
	Listen string
	// Origin is CHALUPA_ORIGIN, scheme://host (http://Listen on a
	// loopback listener when unset).
	Origin string
	// TrustedProxies are the proxies whose X-Forwarded-For the console's
	// login rate limit believes (CHALUPA_TRUSTED_PROXIES, comma-separated
	// addresses or CIDR prefixes; none by default: docs/operations.md,
	// "Console").
	TrustedProxies []netip.Prefix
}

// loadListen reads CHALUPA_LISTEN and records on l whether it is usable
// and loopback: the origin, the secrets and the modes depend on it.
func (h *HTTPConfig) loadListen(l *loader, v string) {
	h.Listen = v
	if h.Listen == "" {
		h.Listen = DefaultListen
	}
	if host, port, err := net.SplitHostPort(h.Listen); err != nil {
		l.bad("CHALUPA_LISTEN must be host:port")
	} else if p, err := strconv.Atoi(port); err != nil || p < 0 || p > 65535 {
		l.bad("CHALUPA_LISTEN has an invalid port")
	} else {
		l.loopback, l.listenOK = origin.IsLoopbackHost(host), true
	}
}

// loadTrustedProxies reads CHALUPA_TRUSTED_PROXIES.
func (h *HTTPConfig) loadTrustedProxies(l *loader, v string) {
	tp, err := console.ParseTrustedProxies(v)
	if err != nil {
		l.bad("CHALUPA_TRUSTED_PROXIES must be comma-separated IP addresses or CIDR prefixes")
		return
	}
	h.TrustedProxies = tp
}

// validate checks CHALUPA_ORIGIN against the listener: required and https
// off loopback, an origin only (docs/operations.md, "Configuration").
func (h *HTTPConfig) validate(l *loader) {
	loopback := l.loopback
	if h.Origin == "" && !loopback && l.dataDirOK && l.listenOK {
		l.bad("CHALUPA_ORIGIN is required when CHALUPA_LISTEN is not a loopback address (the public https origin)")
	} else if h.Origin == "" {
		h.Origin = "http://" + h.Listen
	} else if u, err := url.Parse(h.Origin); err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		l.bad("CHALUPA_ORIGIN must be an absolute http(s) URL")
	} else if u.Scheme != "https" && !origin.IsLoopbackHost(u.Hostname()) {
		l.bad("CHALUPA_ORIGIN must use https unless its host is loopback")
	} else if u.Scheme != "https" && l.listenOK && !loopback {
		// A public listener behind a plain-http loopback origin: the
		// console's cookies and origin checks would name a host nobody
		// reaches it by (docs/operations.md, "Configuration").
		l.bad("CHALUPA_ORIGIN must use https when CHALUPA_LISTEN is not a loopback address (the public https origin)")
	} else if (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.User != nil {
		l.bad("CHALUPA_ORIGIN must be an origin (scheme and host only)")
	} else {
		h.Origin = u.Scheme + "://" + u.Host
	}
}

// trustedProxiesText prints CHALUPA_TRUSTED_PROXIES as parsed.
func trustedProxiesText(ps []netip.Prefix) string {
	if len(ps) == 0 {
		return "(none: X-Forwarded-For is ignored)"
	}
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.String()
	}
	return strings.Join(out, ",")
}
